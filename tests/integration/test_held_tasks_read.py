"""Issue 22, item 1: a task in every held and parked state, put there by the real levers (the
operator's pause and stop of effects through `OpsService`, the dispatch gate's tenant cap and
the model-call cap on real Redis, a workflow's `Deferred`, a cancel during an effect, an
approval wait, a lost response), is read over the HTTP API, the Python client, the CLI and the
console's views, on Postgres. Before `DisplayStatus` was derived from the core, every held
reading was a 500 (and one such task broke the tenant's whole console list)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from agent_jobs.client import AgentJobsClient
from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.errors import Deferred
from agent_jobs.core.states import DisplayStatus, Status
from agent_jobs.gateway import ModelCapSaturated, RedisModelSlots
from agent_jobs.ops.live import StoreSwitches, install
from agent_jobs.ops.service import OpsService
from agent_jobs.ops.switches import StaticSwitches
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.queue.gate import GatePolicy, RedisGate
from agent_jobs.sim import worlds
from agent_jobs.testing import Harness
from agent_jobs.workflows.noop import NoActions, NoopWorkflow
from tests.browser.scenes import APPROVER, REQUESTER, refund_registry, request_for, world_with
from tests.integration.api_env import api_settings, auth, harness_app, serve, token

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

ORDERS = ("7101", "7102", "7103", "7104")
D = DisplayStatus


class _NeedsTheModel(NoActions):
    """Its decision needs a model-call slot: `ModelCapSaturated` when the cap is full."""

    name = "needs_model"
    version = 1

    def __init__(self, slots: RedisModelSlots) -> None:
        self.slots = slots

    def pinned(self) -> dict[str, Any]:
        return {}

    def start(self, inp: wf.StepInput) -> dict[str, Any]:
        return {}

    def decide(self, inp: wf.StepInput) -> wf.StepDecision:
        holder = f"{inp.task_id}:{uuid.uuid4().hex}"
        if not self.slots.acquire(holder):
            raise ModelCapSaturated("all model slots are in use")
        self.slots.release(holder)
        return wf.ToVerify(dict(inp.state))


class _WantsAResource(NoActions):
    """A workflow whose step waits for a shared resource of its own: `Deferred`."""

    name = "wants_resource"
    version = 1

    def pinned(self) -> dict[str, Any]:
        return {}

    def start(self, inp: wf.StepInput) -> dict[str, Any]:
        return {}

    def decide(self, inp: wf.StepInput) -> wf.StepDecision:
        raise Deferred("the shared resource is busy")


def _world() -> dict[str, Any]:
    builders = [
        (lambda o=o: worlds.double_capture(o, (f"cus_{o}", f"Customer {o}", f"c{o}@example.com")))
        for o in ORDERS
    ]
    return world_with(*builders)


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    p = f"hr{uuid.uuid4().hex[:8]}"
    yield p
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(f"{p}:*"):
        client.delete(key)


@pytest.fixture
def obeyed() -> Iterator[None]:
    """This process obeys the switches the test installs; the previous ones come back after."""
    previous = install(StaticSwitches())
    yield
    install(previous)


def _put_in_every_state(
    h: Harness, sim: Any, tenant: str, gate: RedisGate, slots: RedisModelSlots
) -> dict[str, DisplayStatus]:
    """task id -> what it must read, each put there by the lever a person or the system uses."""
    expected: dict[str, DisplayStatus] = {}
    store, orch = h.store, h.orchestrator

    def refund(order: str) -> tuple[str, str]:
        task = h.submit(tenant, f"req-{order}", request_for(order), requester=REQUESTER)
        assert h.settle(task.id).status is Status.APPROVAL_WAIT
        [approval] = store.list_approvals(tenant, status="pending", task_id=task.id)
        return task.id, approval.approval_id

    # A person has not decided yet.
    waiting, _ = refund(ORDERS[0])
    expected[waiting] = D.AWAITING_APPROVAL

    # Granted; the refund's response is lost after the system committed it: the outcome is
    # being confirmed. A second one is then cancelled while its effect may be in flight.
    for order in ORDERS[1:3]:
        task_id, approval_id = refund(order)
        sim.admin.arm("refunds.create", "drop_after_commit")
        orch.decide_approval(approval_id, APPROVER, grant=True)
        while store.get(task_id).status is not Status.EXEC_UNKNOWN:
            assert h.run_one() is not None
        h.publisher.queue.clear()  # the reconcile step is not run: it stays unknown
        expected[task_id] = D.CONFIRMING_EFFECT
    assert orch.cancel(task_id, tenant).accepted
    expected[task_id] = D.CANCEL_REQUESTED

    # The operator stops the tenant's effects; a granted refund then waits, nothing applied.
    ops = OpsService(store, h.publisher.publish)
    install(StoreSwitches(store, refresh_s=0.0))
    task_id, approval_id = refund(ORDERS[3])
    ops.set("effects_stopped", tenant_id=tenant, actor="oncall", reason="INC-22 drill")
    orch.decide_approval(approval_id, APPROVER, grant=True)
    h.run_until_idle()
    assert store.get(task_id).status is Status.RETRY_WAIT
    expected[task_id] = D.STOPPED_BY_OPERATOR

    # Every model-call slot is taken: the step is deferred and held.
    assert slots.acquire("someone-else")
    task_id = h.submit(tenant, "model", TaskRequest(workflow="needs_model@1")).id
    h.run_until_idle()
    expected[task_id] = D.HELD_MODEL_CAP

    # A workflow's own shared resource is busy.
    task_id = h.submit(tenant, "resource", TaskRequest(workflow="wants_resource@1")).id
    h.run_until_idle()
    expected[task_id] = D.HELD_DEFERRED

    # The tenant is at its concurrency cap: the next task is held at the gate.
    fillers = 0
    while gate.admit(tenant, f"filler-{fillers}"):
        fillers += 1
    task_id = h.submit(tenant, "capped", TaskRequest(workflow="noop@1")).id
    expected[task_id] = D.HELD_GATE

    # The operator pauses the tenant: the next task's step is held for the pause.
    ops.set("paused", tenant_id=tenant, actor="oncall", reason="INC-22 drain")
    task_id = h.submit(tenant, "paused", TaskRequest(workflow="noop@1")).id
    expected[task_id] = D.PAUSED

    for task_id, reading in expected.items():
        assert store.get(task_id).view().display_status == reading, task_id
    return expected


_CLI_LOOP = """
import sys
from agent_jobs.cli import main
tenant, ids = sys.argv[1], sys.argv[2:]
for task_id in ids:
    for extra in ([], ["--json"]):
        code = main(["status", task_id, "--tenant", tenant, *extra])
        print(f"\\x1e{code}", flush=True)
"""


def _cli_status(database_url: str, tenant: str, task_ids: list[str]) -> dict[str, tuple[str, str]]:
    """`agent-jobs status ID` and `status ID --json` for every task, as a separate process on the
    same database: the CLI's own `main`, run in turn in one child (one start, not one a call)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_JOBS_")}
    env["AGENT_JOBS_DATABASE_URL"] = database_url
    run = subprocess.run(
        [sys.executable, "-c", _CLI_LOOP, tenant, *task_ids],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    parts = re.split(r"\x1e(-?\d+)\n", run.stdout)  # output, its exit code, output, ...
    texts, codes = parts[0:-1:2], parts[1::2]
    assert codes == ["0"] * 2 * len(task_ids) and parts[-1] == "", (run.stdout, run.stderr)
    return {t: (texts[2 * i], texts[2 * i + 1]) for i, t in enumerate(task_ids)}


@pytest.mark.usefixtures("obeyed")
def test_every_held_and_parked_task_reads_over_the_api_client_cli_and_console(
    pg_store: Any, pg_database: str, redis_url: str, prefix: str, tenant: str
) -> None:
    from fastapi.testclient import TestClient

    cfg = api_settings()
    gate = RedisGate(redis_url, prefix, GatePolicy(default_cap=4))
    slots = RedisModelSlots(redis_url, prefix, limit=1, ttl_s=300)
    from agent_jobs.sim.server import SimServer

    with SimServer(_world()) as sim:
        registry = refund_registry(sim.base_url)
        registry.register(NoopWorkflow())
        registry.register(_NeedsTheModel(slots))
        registry.register(_WantsAResource())
        h = Harness(pg_store, registry, cfg, gate=gate, model_slots=slots)
        # The gate obeys the pause lever as a worker's does (`ops.live`), over the same table.
        h.publisher.gated.switches = StoreSwitches(pg_store, refresh_s=0.0)  # type: ignore[attr-defined]
        expected = _put_in_every_state(h, sim, tenant, gate, slots)

        _, app = harness_app(pg_store, registry, cfg)
        api = TestClient(app)
        reader = auth(token(cfg, tenant, "svc"))

        # The HTTP API, task by task.
        for task_id, reading in expected.items():
            answer = api.get(f"/v1/tasks/{task_id}", headers=reader)
            assert answer.status_code == 200, (reading, answer.text)
            assert answer.json()["display_status"] == reading.value

        # The console: the tenant's whole list, and each task's timeline.
        answer = api.get("/v1/console/tasks", params={"limit": 200}, headers=reader)
        assert answer.status_code == 200, answer.text
        listed = {t["task_id"]: t["display_status"] for t in answer.json()["tasks"]}
        assert {t: listed.get(t) for t in expected} == {t: r.value for t, r in expected.items()}
        for task_id, reading in expected.items():
            answer = api.get(f"/v1/console/tasks/{task_id}/timeline", headers=reader)
            assert answer.status_code == 200, (reading, answer.text)
            assert answer.json()["task"]["display_status"] == reading.value

        # The Python client, over a real HTTP server.
        with serve(app) as base:
            client = AgentJobsClient(base, token(cfg, tenant, "svc"))
            for task_id, reading in expected.items():
                assert client.get(task_id).display_status == reading

        # The CLI, as a separate process on the same database.
        read = _cli_status(pg_database, tenant, list(expected))
        for task_id, reading in expected.items():
            text, as_json = read[task_id]
            assert f"({reading.value})" in text
            assert json.loads(as_json)["display_status"] == reading.value
