"""Guardrails count a canary's stuck tasks as failures, on SQLite and Postgres.

Before, the window counted finished tasks only: a canary whose every task parked in RETRY_WAIT
for good had no tasks to judge (`tasks` 0, under `min_tasks`) and was never reverted. A task
not finished that has not moved for `AGENT_JOBS_CANARY_STUCK_AFTER_S` is stuck; time passes by
rewriting `updated_at` in SQL, never by sleeping.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.releases.rollout import Guardrails, ReleaseService
from agent_jobs.store.schema import tasks
from agent_jobs.testing import Harness
from agent_jobs.workflows.noop import NoopWorkflow
from tests.contract.test_releases import CATALOG, WF, manifest, tenants

BOUND_S = 600.0


class ParkingNoop(NoopWorkflow):
    """`noop@1` that, asked to, retries far in the future: a task parked, going nowhere."""

    def decide(self, inp: wf.StepInput) -> wf.StepDecision:
        if inp.input.get("park"):
            return wf.Retry("waiting for a system that never answers", retry_after_s=86_400)
        return super().decide(inp)


@pytest.fixture
def svc(store: Any) -> ReleaseService:
    return ReleaseService(store, CATALOG, eval_runs=5)


@pytest.fixture
def harness(store: Any) -> Harness:
    registry = WorkflowRegistry()
    registry.register(ParkingNoop())
    return Harness(store, registry)


def canary_with_parked_tasks(svc: ReleaseService, h: Harness) -> list[str]:
    """rel-a incumbent (3 tasks completed), rel-b canary (3 tasks parked in RETRY_WAIT)."""
    svc.create(manifest("rel-a"), "alice")
    svc.create(manifest("rel-b"), "alice")
    svc.promote("rel-a", "alice", "first", force=True)
    svc.start("rel-b", "canary", 50, "alice", "try b")
    for t in tenants(False, 3):
        task = h.submit(t, "k", TaskRequest(workflow=WF, input={"steps": 1}))
        assert h.settle(task.id).status.value == "COMPLETED"
    parked = []
    for t in tenants(True, 3):
        task = h.submit(t, "k", TaskRequest(workflow=WF, input={"park": True}))
        assert task.pinned["release"] == "rel-b"
        parked.append(task.id)
    h.run_until_idle()
    assert {h.store.get(i).status.value for i in parked} == {"RETRY_WAIT"}
    return parked


def age(store: Any, task_ids: list[str], seconds: float) -> None:
    """The tasks' last transition `seconds` earlier, still inside the guardrails' window."""
    c, back = tasks.c, timedelta(seconds=seconds)
    with store.engine.begin() as conn:
        rows = conn.execute(select(c.id, c.created_at, c.updated_at).where(c.id.in_(task_ids)))
        for task_id, created, updated in rows.all():
            conn.execute(
                update(tasks)
                .where(c.id == task_id)
                .values(created_at=created - back, updated_at=updated - back)
            )


def test_a_canary_whose_tasks_park_past_the_bound_is_reverted(
    svc: ReleaseService, harness: Harness, store: Any
) -> None:
    parked = canary_with_parked_tasks(svc, harness)
    g = Guardrails(min_tasks=3, stuck_after_s=BOUND_S)
    fresh = svc.check_guardrails(WF, g)
    # Parked a moment ago: not stuck yet, and nothing finished: too few to judge.
    assert fresh["candidate"]["tasks"] == 0 and not fresh["reverted"]
    age(store, parked, BOUND_S - 60)
    assert svc.check_guardrails(WF, g)["candidate"]["stuck"] == 0  # under the bound
    age(store, parked, 61)
    result = svc.check_guardrails(WF, g)
    assert result["candidate"]["stuck"] == 3 and result["candidate"]["escalation_rate"] == 1.0
    assert result["incumbent"]["stuck"] == 0 and result["incumbent"]["tasks"] == 3
    assert result["reverted"] is True
    assert result["breaches"] == [
        "escalation rate 1.00 (3 stuck) vs 0.00",
        "verified success rate 0.00 vs 1.00",
    ]
    history = store.release_history(WF)
    assert history[0].action == "auto_revert" and "3 stuck" in history[0].reason
    assert store.rollout(WF).candidate is None


def test_the_bound_defaults_to_its_setting(
    svc: ReleaseService, harness: Harness, store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    parked = canary_with_parked_tasks(svc, harness)
    monkeypatch.setenv("AGENT_JOBS_CANARY_STUCK_AFTER_S", "120")
    age(store, parked, 100)
    assert svc.check_guardrails(WF, Guardrails(min_tasks=3))["reverted"] is False
    age(store, parked, 30)
    assert svc.check_guardrails(WF, Guardrails(min_tasks=3))["reverted"] is True


def test_a_task_waiting_for_an_approver_is_never_stuck(
    svc: ReleaseService, harness: Harness, store: Any
) -> None:
    parked = canary_with_parked_tasks(svc, harness)
    # A person's approval pending for long says nothing about the release.
    with store.engine.begin() as conn:
        conn.execute(update(tasks).where(tasks.c.id.in_(parked)).values(status="APPROVAL_WAIT"))
    age(store, parked, BOUND_S * 2)
    result = svc.check_guardrails(WF, Guardrails(min_tasks=3, stuck_after_s=BOUND_S))
    assert result["candidate"]["stuck"] == 0 and result["reverted"] is False
