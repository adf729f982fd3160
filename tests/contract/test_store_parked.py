"""Invariant 6, parked costs nothing: RETRY_WAIT and APPROVAL_WAIT hold no lease, and their timer
lives in the database (`next_attempt_at`); a human decision or a cancel wakes them.
Runs on SQLite and Postgres."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from agent_jobs.core.errors import RecordNotFound
from agent_jobs.core.states import Status
from agent_jobs.orchestrator.sweepers import Sweepers
from agent_jobs.store import Store
from agent_jobs.store.guard import Guard
from agent_jobs.testing import TEST_SETTINGS, LostBroker, RecordingPublisher
from tests.contract.support import (
    OTHER,
    S,
    action,
    claim,
    event_types,
    make_due,
    n_events,
    new_task,
    park_for_approval,
    running,
    to,
)

Park = Callable[[Store, str], str]


def retry_wait(store: Store, tenant: str, wake_in_s: float = 600.0) -> str:
    lease = running(store, tenant)
    result = store.transition(
        Guard.lease(lease), to(S.RETRY_WAIT, "transient_error", wake_in_s=wake_in_s, attempts=1)
    )
    assert result.dispatch is None and result.lease is None  # no message, no lease
    return lease.task_id


def approval_wait(store: Store, tenant: str, approval_id: str = "apr_1") -> str:
    lease = running(store, tenant)
    result = store.transition(
        Guard.lease(lease), park_for_approval(action(), approval_id, ttl_s=600.0)
    )
    assert result.dispatch is None and result.lease is None
    return lease.task_id


@pytest.mark.parametrize("park", [retry_wait, approval_wait])
def test_a_parked_task_holds_no_lease_and_waits_for_its_db_timer(
    store: Store, tenant: str, park: Park
) -> None:
    """Invariant 6: a parked task holds no lease and is not claimable until its DB timer is due."""
    before = store.db_now()
    task_id = park(store, tenant)
    row = store.get(task_id)
    assert row.status in (S.RETRY_WAIT, S.APPROVAL_WAIT)
    assert row.lease_owner is None and row.lease_expires_at is None
    assert row.next_attempt_at is not None
    assert row.next_attempt_at >= before + timedelta(seconds=600)
    assert store.claim(task_id, OTHER, 30.0) is None
    make_due(store, task_id)
    lease = claim(store, task_id, OTHER)
    assert lease.task.status is row.status


def test_retry_sweeper_dispatches_only_what_is_due(store: Store, tenant: str) -> None:
    """Invariants 6 and 10: the retry sweeper dispatches due timers only, and each once."""
    due = [retry_wait(store, tenant) for _ in range(3)]
    later = [retry_wait(store, tenant) for _ in range(2)]
    for task_id in due:
        make_due(store, task_id)
    publisher = RecordingPublisher()
    sweepers = Sweepers(store, publisher, TEST_SETTINGS, LostBroker())
    assert sweepers.retry() == 3
    assert sorted(d.task_id for d in publisher.published) == sorted(due)
    assert sweepers.retry() == 0  # dispatched since it fell due: not again
    for task_id in later:
        assert store.claim(task_id, OTHER, 30.0) is None


def test_leaving_a_parked_state_clears_its_timer(store: Store, tenant: str) -> None:
    """Invariant 6: leaving a parked state clears its timer."""
    task_id = retry_wait(store, tenant, wake_in_s=-1.0)
    lease = claim(store, task_id)
    result = store.transition(Guard.lease(lease), to(S.RUNNING, "retrying", keep_lease=True))
    assert result.task.next_attempt_at is None


def test_decide_approval_wakes_the_task(store: Store, tenant: str) -> None:
    """Invariant 6: a grant wakes the parked task (a message, and a due timer)."""
    task_id = approval_wait(store, tenant)
    assert store.claim(task_id, OTHER, 30.0) is None
    decision = store.decide_approval("apr_1", "usr_lead", grant=True, tenant_id=tenant)
    assert decision.approval.status == "granted" and decision.approval.approver == "usr_lead"
    assert decision.dispatch is not None and decision.dispatch.task_id == task_id
    assert event_types(store, task_id)[-1] == "approval_granted"
    row = store.get(task_id)
    assert row.status is S.APPROVAL_WAIT and row.version == 3  # a decision is not a transition
    lease = claim(store, task_id, OTHER)
    assert lease.task.status is S.APPROVAL_WAIT


def test_a_denial_wakes_the_task_too(store: Store, tenant: str) -> None:
    """Invariant 6: a denial wakes the parked task to re-plan."""
    task_id = approval_wait(store, tenant)
    decision = store.decide_approval("apr_1", "usr_lead", grant=False, note="no")
    assert decision.approval.status == "denied" and decision.dispatch is not None
    assert event_types(store, task_id)[-1] == "approval_denied"
    claim(store, task_id, OTHER)


@pytest.mark.parametrize("park", [retry_wait, approval_wait])
def test_request_cancel_wakes_a_parked_task(store: Store, tenant: str, park: Park) -> None:
    """Invariant 6: a cancel request wakes a parked task to honour it now."""
    task_id = park(store, tenant)
    before = store.get(task_id)
    result = store.request_cancel(task_id, tenant)
    assert result.accepted and result.dispatch is not None
    row = store.get(task_id)
    assert row.cancel_requested_at is not None
    assert (row.status, row.version) == (before.status, before.version)  # a flag, not a status
    assert event_types(store, task_id)[-1] == "cancel_requested"
    lease = claim(store, task_id, OTHER)
    done = store.transition(Guard.lease(lease), to(S.CANCELLED, "cancelled"))
    assert done.task.status is S.CANCELLED


def test_request_cancel_on_a_running_task_sets_the_flag_only(store: Store, tenant: str) -> None:
    """DESIGN.md cancellation: a flag honoured at the next step boundary, set once."""
    lease = running(store, tenant)
    result = store.request_cancel(lease.task_id)
    assert result.accepted and result.dispatch is None  # its worker honours it at the boundary
    row = store.get(lease.task_id)
    assert row.lease_owner == lease.owner and row.cancel_requested
    first_at = row.cancel_requested_at
    again = store.request_cancel(lease.task_id)
    assert again.accepted and store.get(lease.task_id).cancel_requested_at == first_at


@pytest.mark.parametrize("end", [S.COMPLETED, S.FAILED, S.CANCELLED, S.ESCALATED])
def test_cancel_on_a_terminal_task_is_refused(store: Store, tenant: str, end: Status) -> None:
    """DESIGN.md cancellation: a finished task cannot be cancelled; nothing is written."""
    lease = running(store, tenant)
    if end is S.COMPLETED:
        lease = (
            store.transition(Guard.lease(lease), to(S.VERIFYING, "drafted", keep_lease=True)).lease
            or lease
        )
    store.transition(Guard.lease(lease), to(end, "done"))
    before = store.get(lease.task_id)
    events = n_events(store, lease.task_id)
    result = store.request_cancel(lease.task_id, tenant)
    assert not result.accepted and result.dispatch is None
    assert store.get(lease.task_id) == before
    assert n_events(store, lease.task_id) == events


def test_cancel_is_scoped_by_tenant(store: Store, tenant: str) -> None:
    """Invariant 7: another tenant's task is RecordNotFound for cancel too."""
    task = new_task(store, tenant)
    with pytest.raises(RecordNotFound):
        store.request_cancel(task.id, tenant + "x")
    assert not store.get(task.id).cancel_requested
