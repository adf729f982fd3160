"""A decision that comes while the APPROVAL_WAIT step holds the task's lease still reaches the
task at once, on both backends (defect D5 of issue 29, "a slow grant").

The decision wakes the task and publishes a step that claims at once; while another step holds
the lease that claim fails and the message is dropped. Before the fix the holder then released
the lease and nothing else was queued: the task sat in APPROVAL_WAIT, granted, until the
sweeper's dispatch grace (60 s by default) ran out. No sweeper runs here: what the queue holds
must carry the task on.
"""

from __future__ import annotations

from typing import Any

import pytest

from agent_jobs.core.contracts import Action
from agent_jobs.core.states import Status
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.store import Dispatch, Store
from agent_jobs.store.schema import tasks
from tests.contract.support import shift
from tests.contract.test_step_failures import Scripted, events, run

S = Status


def _needs_approval(self: Scripted, i: wf.StepInput, a: Action) -> wf.Authorization:
    return wf.Authorization("needs_approval", "P@1")


@pytest.mark.parametrize("grant", [True, False], ids=["granted", "denied"])
def test_a_decision_while_the_approval_step_holds_the_lease_moves_the_task_at_once(
    store: Store, tenant: str, monkeypatch: pytest.MonkeyPatch, grant: bool
) -> None:
    flow = Scripted(authorize=_needs_approval)
    h, task = run(store, tenant, flow)
    h.run_until_idle()
    assert store.get(task.id).status is S.APPROVAL_WAIT
    (approval,) = store.list_approvals(tenant, status="pending", task_id=task.id)

    # The approval step runs again while the approval is pending (its timer fell due: the
    # backoff of a failed attempt), and the approver decides while it holds the lease.
    shift(store, tasks, task.id, next_attempt_at=-1.0)
    read = store.approval_at_now
    dropped: list[Any] = []

    def read_then_decide(approval_id: str) -> Any:
        seen = read(approval_id)
        monkeypatch.setattr(store, "approval_at_now", read)  # once
        h.orchestrator.decide_approval(approval.approval_id, "lead-41", grant=grant)
        # The decision's own message is delivered now, during this step: its claim fails.
        dropped.append(h.run_one())
        return seen

    monkeypatch.setattr(store, "approval_at_now", read_then_decide)
    h.publisher.queue.append(Dispatch(task.id, tenant, claim=True))
    report = h.run_one()
    assert report is not None and report.to_status is None  # it saw "pending": no transition
    assert dropped == [None], "the decision's message must have met the held lease"
    assert store.get(task.id).lease_owner is None

    # No sweep and no grace: the released step's message carries the decision to the task.
    h.run_until_idle()
    after = store.get(task.id)
    names = events(store, task.id)
    if grant:
        assert after.status is S.COMPLETED, names
        assert flow.calls.get("execute") == 1  # the granted action, sent once
        assert store.approval(approval.approval_id).status == "used"
    else:
        # The denial's transition (the step's, not the decision's own event): back to RUNNING
        # to re-plan; this workflow then finishes without the denied action.
        moved = [e for e in store.events(task.id) if e.type == "approval_denied" and e.to_status]
        assert [(e.from_status, e.to_status) for e in moved] == [("APPROVAL_WAIT", "RUNNING")]
        assert flow.calls.get("execute") is None
        assert after.status is S.COMPLETED, names


def test_a_release_with_nothing_new_queues_nothing(store: Store, tenant: str) -> None:
    """The other side: a step that finds the approval still pending, with nothing decided
    while it ran, gives the lease back and publishes nothing (no busy loop)."""
    h, task = run(store, tenant, Scripted(authorize=_needs_approval))
    h.run_until_idle()
    shift(store, tasks, task.id, next_attempt_at=-1.0)
    h.publisher.queue.append(Dispatch(task.id, tenant, claim=True))
    report = h.run_one()
    assert report is not None and report.to_status is None and report.dispatch is None
    assert not h.publisher.queue
    assert store.get(task.id).status is S.APPROVAL_WAIT
