"""Invariant 8 at the store level: the approver is never the requester (code and database), an
approval is decided once and only before it expires, and tenants are walls (invariant 7).
Runs on SQLite and Postgres."""

from __future__ import annotations

import pytest
from sqlalchemy import update
from sqlalchemy.exc import IntegrityError

from agent_jobs.core.errors import ApprovalError, RecordNotFound
from agent_jobs.store import Store
from agent_jobs.store.guard import Guard
from agent_jobs.store.schema import approvals
from tests.contract.support import action, n_events, park_for_approval, running, shift

REQUESTER = "agent:planner"


def parked(store: Store, tenant: str, approval_id: str = "apr_1") -> str:
    lease = running(store, tenant)
    store.transition(
        Guard.lease(lease), park_for_approval(action(), approval_id, requester=REQUESTER)
    )
    return lease.task_id


def test_the_request_binds_one_action_and_policy(store: Store, tenant: str) -> None:
    """Invariant 8: the grant stores the action hash (tool, version, args) and policy version."""
    task_id = parked(store, tenant)
    view = store.approval("apr_1", tenant)
    assert (view.task_id, view.tenant_id, view.status) == (task_id, tenant, "pending")
    assert view.action_hash == action().action_hash
    assert (view.tool, view.tool_version, view.args) == ("refunds.create", "2", action().args)
    assert view.policy_version == "refund-policy@7" and view.requester == REQUESTER
    assert view.expires_at > view.created_at and view.approver is None


def test_self_approval_is_refused(store: Store, tenant: str) -> None:
    """Invariant 8: the approver is not the requester; nothing is decided or woken."""
    task_id = parked(store, tenant)
    events = n_events(store, task_id)
    with pytest.raises(ApprovalError, match="requester"):
        store.decide_approval("apr_1", REQUESTER, grant=True)
    view = store.approval("apr_1")
    assert view.status == "pending" and view.approver is None
    assert n_events(store, task_id) == events
    assert store.get(task_id).next_attempt_at is not None  # not woken


def test_the_database_refuses_self_approval_too(store: Store, tenant: str) -> None:
    """Invariant 8: the check constraint holds even for a write that bypasses `decide_approval`."""
    parked(store, tenant)
    with pytest.raises(IntegrityError), store.tx() as conn:
        conn.execute(
            update(approvals)
            .where(approvals.c.id == "apr_1")
            .values(status="granted", approver=REQUESTER)
        )
    assert store.approval("apr_1").status == "pending"


def test_an_expired_approval_cannot_be_decided(store: Store, tenant: str) -> None:
    """Invariant 8: a grant expires; a decision after the expiry is refused."""
    task_id = parked(store, tenant)
    shift(store, approvals, "apr_1", expires_at=-1.0)
    events = n_events(store, task_id)
    with pytest.raises(ApprovalError, match="expired"):
        store.decide_approval("apr_1", "usr_lead", grant=True)
    assert store.approval("apr_1").status == "pending"
    assert n_events(store, task_id) == events


@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize("second", [True, False])
def test_an_approval_is_decided_once(store: Store, tenant: str, first: bool, second: bool) -> None:
    """Invariant 8: decided once; a second decision (either way) is refused."""
    parked(store, tenant)
    store.decide_approval("apr_1", "usr_lead", grant=first)
    with pytest.raises(ApprovalError, match="already"):
        store.decide_approval("apr_1", "usr_other", grant=second)
    view = store.approval("apr_1")
    assert view.status == ("granted" if first else "denied") and view.approver == "usr_lead"


def test_another_tenants_approval_is_not_found(store: Store, tenant: str) -> None:
    """Invariant 7: another tenant's approval is RecordNotFound, never refused as forbidden."""
    parked(store, tenant)
    with pytest.raises(RecordNotFound):
        store.approval("apr_1", tenant + "x")
    with pytest.raises(RecordNotFound):
        store.decide_approval("apr_1", "usr_lead", grant=True, tenant_id=tenant + "x")
    assert store.approval("apr_1").status == "pending"
    assert store.list_approvals(tenant + "x") == []
    assert [a.approval_id for a in store.list_approvals(tenant, status="pending")] == ["apr_1"]


def test_an_unknown_approval_is_not_found(store: Store, tenant: str) -> None:
    """Invariant 7: an unknown approval is RecordNotFound, like another tenant's."""
    with pytest.raises(RecordNotFound):
        store.decide_approval("apr_nope", "usr_lead", grant=True, tenant_id=tenant)


def test_approval_expiry_sweep_closes_it_and_wakes_the_task(store: Store, tenant: str) -> None:
    """Invariants 6 and 8: the expiry sweep closes the grant and wakes the task, once."""
    task_id = parked(store, tenant)
    shift(store, approvals, "apr_1", expires_at=-1.0)
    woke = store.sweep_expired_approvals(100)
    assert [d.task_id for d in woke] == [task_id]
    assert store.approval("apr_1").status == "expired"
    assert store.sweep_expired_approvals(100) == []
    with pytest.raises(ApprovalError):
        store.decide_approval("apr_1", "usr_lead", grant=True)
