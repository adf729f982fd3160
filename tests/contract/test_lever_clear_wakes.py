"""Turning a write lever off wakes the tasks it parked at once, on SQLite and Postgres: they do
not wait out their held-poll backoff (up to a minute), their step goes to their tenant's queue,
and the effect reaches the business system exactly once. Tasks another lever still holds, or
that a provider throttled, stay parked. The switches are the database's (`StoreSwitches`), changed
through the operator service, as the CLI and the API change them; time moves in SQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.park import PARK_KEY, Park, ParkReason
from agent_jobs.core.states import Status
from agent_jobs.ops.live import StoreSwitches, install
from agent_jobs.ops.service import OpsService
from agent_jobs.ops.switches import StaticSwitches
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.store import Store
from agent_jobs.store.schema import tasks
from agent_jobs.store.types import db_now_plus
from agent_jobs.testing import Harness
from agent_jobs.workflows.example import ExampleWorkflow
from agent_jobs.workflows.example_backend import ExampleBackend

WHO = {"actor": "oncall", "reason": "INC-7"}


@pytest.fixture
def rig(store: Store, tmp_path: Path) -> Iterator[tuple[Harness, ExampleBackend, OpsService]]:
    ledger = ExampleBackend(tmp_path / "ledger.db")
    registry = WorkflowRegistry()
    registry.register(ExampleWorkflow(ledger))
    h = Harness(store, registry)
    previous = install(StoreSwitches(store, refresh_s=0.0))  # every read sees the table
    try:
        yield h, ledger, OpsService(store, h.publisher.publish)
    finally:
        install(previous)


def _payout(h: Harness, tenant: str, key: str) -> str:
    body = {"account": "acc_42", "amount_minor": 1500, "reads": 0}
    task = h.submit(tenant, key, TaskRequest(workflow="example@1", input=body))
    h.run_until_idle()
    return task.id


def _ask_again(h: Harness, task_id: str) -> None:
    """Its held-poll timer falls due (rewritten in SQL): it asks the lever, which still holds."""
    h.make_due(task_id)
    h.sweepers.all()
    h.run_until_idle()


def _rewrite_park(store: Store, task_id: str, park: Park) -> None:
    """The task's park rewritten in SQL (a provider's throttle in place of a lever's hold)."""
    state = store.get(task_id).state
    runtime = {**state["runtime"], PARK_KEY: park.entry()}
    with store.tx() as conn:
        conn.execute(
            update(tasks).where(tasks.c.id == task_id).values(state={**state, "runtime": runtime})
        )


def _wait_s(store: Store, task_id: str) -> float:
    row = store.get(task_id)
    assert row.next_attempt_at is not None
    return (row.next_attempt_at - store.db_now()).total_seconds()


def test_turning_effects_back_on_sends_the_held_effect_at_once_and_once(
    rig: tuple[Harness, ExampleBackend, OpsService], store: Store
) -> None:
    h, ledger, ops = rig
    ops.set("effects_stopped", tenant_id="acme", **WHO)
    task_id = _payout(h, "acme", "held-1")
    for _ in range(5):  # 2, 4, 8, 16, 32 s: its next ask is half a minute away
        _ask_again(h, task_id)
    held = store.get(task_id)
    park = held.view().park
    assert held.status is Status.RETRY_WAIT and park is not None
    assert park.reason is ParkReason.HELD_BY_OPERATOR and park.detail.startswith("effects_stopped")
    assert _wait_s(store, task_id) > 30.0
    assert ledger.transfers() == []

    h.publisher.published.clear()
    assert ops.clear("effects_stopped", tenant_id="acme", **WHO)
    # Due now, and its step already on its tenant's queue: no timer, no sweeper.
    assert _wait_s(store, task_id) <= 0.0
    assert [(d.task_id, d.tenant_id) for d in h.publisher.published] == [(task_id, "acme")]
    h.run_until_idle()
    done = h.settle(task_id)
    assert done.status is Status.COMPLETED
    assert [t.idempotency_key for t in ledger.transfers()] == ["payout:acme:held-1"]
    # Turning it off again (nothing on) wakes nothing and sends nothing more.
    ops.set("effects_stopped", tenant_id="acme", **WHO)
    assert ops.clear("effects_stopped", tenant_id="acme", **WHO)
    h.run_until_idle()
    assert len(ledger.transfers()) == 1


def test_only_the_tasks_that_lever_held_wake(
    rig: tuple[Harness, ExampleBackend, OpsService], store: Store
) -> None:
    """Two levers on: clearing one wakes a task only when no other lever still holds its
    write; another tenant's held task and a provider's throttle are left to their timers."""
    h, ledger, ops = rig
    ops.set("effects_stopped", tenant_id="acme", **WHO)
    ops.set("effects_stopped", tenant_id="beta", **WHO)
    acme = _payout(h, "acme", "a-1")
    beta = _payout(h, "beta", "b-1")
    throttled = _payout(h, "acme", "a-2")
    # The third one's park rewritten as a provider's throttle (a 429 with Retry-After).
    _rewrite_park(store, throttled, Park.of(ParkReason.THROTTLED, "429 Too Many Requests"))
    ops.set("read_only", tenant_id="acme", **WHO)  # a second lever over acme's writes
    for task_id in (acme, beta, throttled):
        assert store.get(task_id).status is Status.RETRY_WAIT
    before = {t: store.get(t).next_attempt_at for t in (acme, beta, throttled)}

    h.publisher.published.clear()
    ops.clear("read_only", tenant_id="acme", **WHO)  # not the lever that parked acme's
    ops.clear("effects_stopped", tenant_id="beta", **WHO)
    assert [d.task_id for d in h.publisher.published] == [beta]
    assert store.get(acme).next_attempt_at == before[acme]
    assert store.get(throttled).next_attempt_at == before[throttled]

    ops.set("read_only", tenant_id="acme", **WHO)
    h.publisher.published.clear()
    ops.clear("effects_stopped", tenant_id="acme", **WHO)  # read_only still holds acme
    assert h.publisher.published == []
    assert store.get(acme).next_attempt_at == before[acme]
    h.run_until_idle()
    assert [t.idempotency_key for t in ledger.transfers()] == ["payout:beta:b-1"]


def test_the_wake_reads_past_one_batch(store: Store, tmp_path: Path) -> None:
    """More parked tasks than one batch, most of them not the lever's: every one it held is
    found (keyset pages), each once."""
    from agent_jobs.ops.switches import EFFECTS_STOPPED_REASON
    from agent_jobs.store.holds import wake_lever_held

    ledger = ExampleBackend(tmp_path / "ledger.db")
    registry = WorkflowRegistry()
    registry.register(ExampleWorkflow(ledger))
    h = Harness(store, registry)
    previous = install(StaticSwitches())
    try:
        from tests.contract.test_ops_switches import switched

        install(switched(effects_stopped=(("acme",), True)))
        ids = [_payout(h, "acme", f"k-{i}") for i in range(7)]
    finally:
        install(previous)
    held = set(ids[::2])
    with store.tx() as conn:  # every one a minute from its next ask (the held poll's cap)
        conn.execute(
            update(tasks).where(tasks.c.id.in_(ids)).values(next_attempt_at=db_now_plus(60.0))
        )
    for task_id in set(ids) - held:  # the others: a provider's throttle, not a lever's
        _rewrite_park(store, task_id, Park.of(ParkReason.THROTTLED, "429 Too Many Requests"))
    seen: list[str] = []

    def wakes(tenant: str, park: Park, tool: str | None) -> bool:
        seen.append(park.detail)
        return tenant == "acme" and EFFECTS_STOPPED_REASON in park.detail

    woken = wake_lever_held(store, "acme", wakes, batch=2)
    assert sorted(d.task_id for d in woken) == sorted(held)
    assert len(seen) == len(held)  # only the lever's parks are asked about, each once
    assert all(_wait_s(store, t) <= 0.0 for t in held)
    assert wake_lever_held(store, "acme", wakes, batch=2) == []  # due now: not again
