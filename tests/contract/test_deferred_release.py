"""A step a workflow defers (`Deferred`: a shared resource of its own is busy) is held with
`held_for = deferred`; the held sweeper sends it out again, gate or no gate, once its wait is
over (tests/contract/test_deferred_backoff.py), and it defers again while the resource stays
busy. Nothing else releases such a hold (it stayed held for good)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import select, update

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.errors import Deferred
from agent_jobs.core.states import Status
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.store import Store
from agent_jobs.store.schema import tasks
from agent_jobs.testing import Harness
from agent_jobs.workflows import builtin_registry
from agent_jobs.workflows.noop import NoActions


class _Busy(NoActions):
    """Defers while `busy` says the resource is taken, then completes."""

    name = "busy_resource"
    version = 1

    def __init__(self) -> None:
        self.busy = True
        self.asked = 0

    def pinned(self) -> dict[str, Any]:
        return {}

    def start(self, inp: wf.StepInput) -> dict[str, Any]:
        return {}

    def decide(self, inp: wf.StepInput) -> wf.StepDecision:
        self.asked += 1
        if self.busy:
            raise Deferred("the shared resource is busy")
        return wf.ToVerify(dict(inp.state))


def later(store: Store, task_id: str, seconds: float) -> None:
    """`seconds` pass for the task: its hold and its last transition move back (in SQL)."""
    c, back = tasks.c, timedelta(seconds=seconds)
    with store.engine.begin() as conn:
        held, updated = conn.execute(
            select(c.held_since, c.updated_at).where(c.id == task_id)
        ).one()
        values: dict[str, Any] = {"updated_at": updated - back}
        if held is not None:
            values["held_since"] = held - back
        conn.execute(update(tasks).where(c.id == task_id).values(**values))


def test_a_deferred_step_goes_out_again_on_the_held_sweep(store: Store, tenant: str) -> None:
    busy = _Busy()
    registry = builtin_registry()
    registry.register(busy)
    harness = Harness(store, registry)
    task = harness.submit(tenant, "k-busy", TaskRequest(workflow="busy_resource@1", input={}))
    harness.run_until_idle()
    held = store.get(task.id)
    assert held.held_for == "deferred" and held.status is Status.RUNNING
    asked = busy.asked
    # Still busy: a sweep after its wait sends it out once, it defers again (no loop within a
    # sweep).
    later(store, task.id, 5.0)
    assert harness.sweepers.held() == 1
    harness.run_until_idle()
    assert busy.asked == asked + 1 and store.get(task.id).held_for == "deferred"
    busy.busy = False
    assert harness.sweepers.held() == 0  # deferred again a moment ago: its wait is not over
    later(store, task.id, 5.0)
    assert harness.sweepers.held() == 1
    assert harness.settle(task.id).status is Status.COMPLETED
