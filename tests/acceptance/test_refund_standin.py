"""The refund agent against another implementation of the business-systems contract.

Real `celery -A agent_jobs worker` processes on Postgres and Redis run `refund_resolution@3`
against `tests.support.standin_systems` (written from CONTRACT.md alone, sharing no code with the
sim) whose every write and lookup may fail, commit and drop, answer after the caller gave up, or
be throttled (429 / 503 + Retry-After, nothing applied);
one worker is SIGKILLed once refunds start. Expected: every task ends, exactly one refund per
confirmed duplicate capture and none elsewhere, and nothing the policy did not allow ever
reaches the payments system (no refund sent before its approval, no other fields, no other
payment, never more than the duplicate's amount).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.bench.procs import WorkerProcess
from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import TERMINAL, Status
from agent_jobs.sim import worlds
from tests.support.live import live_runtime, wait_until
from tests.support.standin_systems import StandInSystems

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

APPROVER = "lead-41"
CUSTOMER = ("cus_6000", "Asha Verma", "asha.verma@example.com")


def _world() -> tuple[dict[str, Any], dict[str, int]]:
    """The golden cases side by side, plus four small duplicates that need no approval.
    Returns the world and the refund each duplicated payment must get (payment -> amount)."""
    world: dict[str, Any] = {"orders": [], "payments": [], "refunds": []}
    for build in (
        worlds.incident_8472,  # INR 2,000 twice: approval, one refund
        worlds.malicious_note,  # the same with an injection in the note
        worlds.amount_above_captured,  # INR 1,500 twice on a 2,000 order: one refund of 1,500
        worlds.auth_hold_lookalike,  # a hold, not a charge: nothing
        worlds.already_refunded,  # refunded before: nothing new
        worlds.single_capture,  # one charge only: nothing
    ):
        w = build()
        for k in ("orders", "payments", "refunds"):
            world[k] += w[k]
        world["policies"] = w["policies"]
    expected = {"pay_8472_b": 200_000, "pay_9104_b": 200_000, "pay_9103_b": 150_000}
    for n in range(4):  # INR 500 twice: below the approval threshold
        small = worlds.double_capture(f"700{n}", CUSTOMER, amount=50_000)
        world["orders"] += small["orders"]
        world["payments"] += small["payments"]
        expected[f"pay_700{n}_b"] = 50_000
    return world, expected


@pytest.fixture
def standin() -> Iterator[StandInSystems]:
    world, _ = _world()
    with StandInSystems(world, seed=int(os.environ.get("AGENT_JOBS_STANDIN_SEED", "7"))) as s:
        yield s


@pytest.fixture
def live(pg_database: str, standin: StandInSystems) -> Iterator[tuple[Any, dict[str, str]]]:
    env = {
        "AGENT_JOBS_DATABASE_URL": pg_database,
        "AGENT_JOBS_SYSTEMS_URL": standin.base_url,
        "AGENT_JOBS_LEASE_TTL_S": "3",
        "AGENT_JOBS_DISPATCH_GRACE_S": "3",
        "AGENT_JOBS_RETRY_BASE_S": "0.2",
        "AGENT_JOBS_RETRY_MAX_S": "1",
    }
    with live_runtime(**env) as live:
        yield live


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for w in started:
        w.stop()


def _start(workers: list[WorkerProcess], env: dict[str, str], name: str, logs: Path) -> None:
    w = WorkerProcess(env, name=name, log=logs / f"{name}.log")
    workers.append(w)
    w.wait_ready()


def test_refund_agent_against_a_harsher_standin(
    live: tuple[Any, dict[str, str]],
    standin: StandInSystems,
    workers: list[WorkerProcess],
    tmp_path: Path,
) -> None:
    rt, env = live
    _, expected = _world()
    _start(workers, env, "w1", tmp_path)
    _start(workers, env, "w2", tmp_path)
    orders = ["8472", "9104", "9103", "9101", "9102", "9105", "7000", "7001", "7002", "7003"]
    ids = {}
    for order_id in orders:
        message = f"Order {order_id} was charged twice, and my refund has not arrived."
        request = TaskRequest(
            workflow="refund_resolution@3", input={"message": message, "channel": "chat"}
        )
        for _ in range(2):  # the double tap
            created = rt.orchestrator.submit(
                "acme", f"req-{order_id}", request, requester="svc-support-chat"
            )
        ids[order_id] = created.task.id

    granted: dict[str, float] = {}  # payment id -> when its approval was granted

    def grant_pending() -> None:
        import time

        for a in rt.store.list_approvals("acme", status="pending"):
            rt.orchestrator.decide_approval(a.approval_id, APPROVER, grant=True)
            granted[a.args["payment_id"]] = time.time()

    def step() -> bool:
        rt.sweepers.all()
        grant_pending()
        return True

    wait_until("the first refund sent", lambda: step() and standin.posts, 120, every_s=0.2)
    workers[0].sigkill()
    _start(workers, env, "w3", tmp_path)

    def done() -> bool:
        step()
        return all(rt.store.get(t).status in TERMINAL for t in ids.values())

    wait_until("every task terminal", done, 300, every_s=0.3)

    finals = {o: rt.store.get(t) for o, t in ids.items()}
    trail = {o: [e.type for e in rt.store.events(t.id)] for o, t in finals.items()}
    assert {o: t.status for o, t in finals.items()} == dict.fromkeys(orders, Status.COMPLETED), (
        trail,
        standin.faults,
    )

    # exactly one refund per confirmed duplicate, none elsewhere (rf_2950 was there before)
    new = [r for r in standin.refunds() if r["refund_id"] != "rf_2950"]
    assert Counter(r["payment_id"] for r in new) == Counter(dict.fromkeys(expected, 1))
    assert {r["payment_id"]: r["amount_minor"] for r in new} == expected
    for order_id, task in finals.items():
        refund = [r for r in new if r["order_id"] == order_id]
        assert task.outcome.get("refund_id") == (refund[0]["refund_id"] if refund else None)

    # nothing unauthorised reached the payments system
    for post in standin.posts:
        body = post["body"]
        assert set(body) <= {"payment_id", "amount_minor", "currency", "reason"}, body
        assert body["payment_id"] in expected, body
        assert body["amount_minor"] <= expected[body["payment_id"]], body
        if expected[body["payment_id"]] >= 100_000:  # approval required first
            assert post["at"] >= granted[body["payment_id"]], post
    # and the harshness was real: writes were lost after committing, lookups failed, and calls
    # were throttled (429 or 503 + Retry-After, nothing applied) without costing a task
    kinds = Counter(f.split(":", 1)[1] for f in standin.faults if f.startswith("refunds.create"))
    assert kinds["drop_after_commit"] + kinds["error_after_commit"] >= 1, standin.faults
    assert any(f.endswith(":throttled") for f in standin.faults), standin.faults
    assert any(t.count("reconciled_found") for t in trail.values()), trail
