"""The remaining branches of the step functions, each made to happen and named (both backends).

With `test_step_failures.py` these make every event the orchestrator can write happen at least
once (`tests/unit/test_event_names.py` checks that no name is left out).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import update

from agent_jobs.core.contracts import Action
from agent_jobs.core.errors import InvalidInput
from agent_jobs.core.states import Status
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.store.schema import tasks
from tests.contract.test_step_failures import Scripted, events, run

S = Status


def test_the_plain_path_reads_records_the_intent_commits_and_verifies(
    store: Any, tenant: str
) -> None:
    h, task = run(store, tenant, Scripted())
    final = h.settle(task.id)
    assert final.status is S.COMPLETED
    assert events(store, task.id) == [
        "created",
        "started",
        "observed",
        "intent_recorded",
        "effect_committed",
        "completed",
    ]


def test_a_draft_is_handed_to_the_verifier(store: Any, tenant: str) -> None:
    h, task = run(store, tenant, Scripted(decide=lambda self, i: wf.ToVerify(i.state)))
    h.settle(task.id)
    assert events(store, task.id)[-2:] == ["draft_ready", "completed"]


def test_a_definitive_rejection_goes_back_to_running(store: Any, tenant: str) -> None:
    h, task = run(
        store, tenant, Scripted(execute=lambda self, i, a: wf.EffectRejected("insufficient_funds"))
    )
    final = h.settle(task.id)
    names = events(store, task.id)
    assert "effect_rejected" in names
    assert final.status is S.COMPLETED  # the default decide then drafts a reply
    (effect,) = store.effects(task.id)
    assert effect.status == "failed"


def test_a_workflow_may_escalate(store: Any, tenant: str) -> None:
    h, task = run(store, tenant, Scripted(decide=lambda self, i: wf.Escalate("needs a human")))
    final = h.settle(task.id)
    assert final.status is S.ESCALATED
    assert events(store, task.id)[-1] == "escalated"


def test_invalid_input_found_by_start_stops_the_task(store: Any, tenant: str) -> None:
    def start(self: Scripted, i: wf.StepInput) -> dict[str, Any]:
        raise InvalidInput("order_id is missing", field="input.order_id")

    h, task = run(store, tenant, Scripted(start=start))
    final = h.settle(task.id)
    assert final.status is S.FAILED
    assert events(store, task.id)[-1] == "stopped"


def test_a_retry_decision_parks_and_comes_back_due(store: Any, tenant: str) -> None:
    answers: list[wf.StepDecision] = []

    def decide(self: Scripted, i: wf.StepInput) -> wf.StepDecision:
        if not answers:
            answers.append(wf.Retry("rate limited upstream"))
            return answers[0]
        return wf.ToVerify(i.state)

    h, task = run(store, tenant, Scripted(decide=decide))
    final = h.settle(task.id)
    assert final.status is S.COMPLETED
    names = events(store, task.id)
    assert names.index("retry_scheduled") < names.index("retry_due")


def test_a_late_result_from_a_worker_that_lost_its_lease_is_kept_and_changes_nothing(
    store: Any, tenant: str
) -> None:
    holder: dict[str, Any] = {}

    def execute(self: Scripted, i: wf.StepInput, a: Action) -> wf.EffectOutcome:
        h = holder["h"]
        h.expire_lease(i.task_id)
        assert h.store.claim(i.task_id, "another-worker", 30) is not None  # it moves on
        return wf.EffectApplied({"ref": "r1"})

    h, task = run(store, tenant, Scripted(execute=execute))
    holder["h"] = h
    h.run_until_idle()
    names = events(store, task.id)
    assert "late_result_dropped" in names
    assert store.get(task.id).status is S.EXECUTING, "the zombie's commit did not land"


def test_an_unknown_effect_of_a_cancelled_task_that_is_not_found_is_escalated(
    store: Any, tenant: str
) -> None:
    holder: dict[str, Any] = {}

    def execute(self: Scripted, i: wf.StepInput, a: Action) -> wf.EffectOutcome:
        holder["h"].orchestrator.cancel(i.task_id)
        return wf.EffectUnknown("timeout")

    h, task = run(
        store, tenant, Scripted(execute=execute, reconcile=lambda self, i, a: wf.NoEffect())
    )
    holder["h"] = h
    final = h.settle(task.id)
    assert final.status is S.ESCALATED
    assert events(store, task.id)[-1] == "reconciled_not_found"


def test_policy_that_denies_when_an_expired_grant_would_be_asked_again_escalates(
    store: Any, tenant: str
) -> None:
    calls = {"authorize": 0}
    holder: dict[str, Any] = {}

    def authorize(self: Scripted, i: wf.StepInput, a: Action) -> wf.Authorization:
        calls["authorize"] += 1
        if calls["authorize"] <= 2:  # the proposal, and the revalidation at use
            return wf.Authorization("needs_approval", "P@1", "over the limit")
        return wf.Authorization("deny", "P@1", "rule rescinded")

    def execute(self: Scripted, i: wf.StepInput, a: Action) -> wf.EffectOutcome:
        (approval,) = holder["h"].store.list_approvals(i.tenant_id)
        holder["h"].expire_approval(approval.approval_id)  # the grant lapses meanwhile
        return wf.EffectUnknown("timeout")

    h, task = run(
        store,
        tenant,
        Scripted(authorize=authorize, execute=execute, reconcile=lambda self, i, a: wf.NoEffect()),
    )
    holder["h"] = h
    h.run_until_idle()
    assert events(store, task.id)[-1] == "approval_requested"
    (approval,) = store.list_approvals(tenant)
    h.orchestrator.decide_approval(approval.approval_id, "a-manager", grant=True)
    final = h.settle(task.id)
    assert final.status is S.ESCALATED
    assert events(store, task.id)[-1] == "policy_denied_on_retry"


def test_a_lost_lease_over_an_unreadable_effect_record_escalates_and_the_sweep_goes_on(
    store: Any, tenant: str
) -> None:
    """One corrupted row must not stall the lease sweeper for every other task."""
    holder: dict[str, Any] = {}

    def execute(self: Scripted, i: wf.StepInput, a: Action) -> wf.EffectOutcome:
        h = holder["h"]
        with h.store.tx() as conn:  # the checkpoint loses its pending action (a bug elsewhere)
            conn.execute(
                update(tasks)
                .where(tasks.c.id == i.task_id)
                .values(state={"runtime": {"pending_action": None}})
            )
        h.expire_lease(i.task_id)
        assert h.sweepers.lease() == 1
        return wf.EffectApplied({})

    h, task = run(store, tenant, Scripted(execute=execute))
    holder["h"] = h
    h.run_until_idle()
    final = store.get(task.id)
    assert final.status is S.ESCALATED
    assert "lease_lost_during_effect" in events(store, task.id)
