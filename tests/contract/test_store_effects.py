"""Invariant 3 (intent before effect) and invariant 4 (unknown is a state) at the store level.
Runs on SQLite and Postgres."""

from __future__ import annotations

import pytest

from agent_jobs.core.errors import ApprovalError, EffectKeyConflict, StaleTransition
from agent_jobs.core.patch import EffectWrite
from agent_jobs.orchestrator.sweepers import Sweepers
from agent_jobs.store import Store
from agent_jobs.store.guard import Guard
from agent_jobs.store.schema import approvals, tasks
from agent_jobs.testing import TEST_SETTINGS, LostBroker, RecordingPublisher
from tests.contract.support import (
    OTHER,
    S,
    action,
    claim,
    event_types,
    executing,
    expire_lease,
    intent,
    n_effects,
    n_events,
    park_for_approval,
    running,
    shift,
    to,
)


def sweepers(store: Store) -> tuple[Sweepers, RecordingPublisher]:
    publisher = RecordingPublisher()
    return Sweepers(store, publisher, TEST_SETTINGS, LostBroker()), publisher


def granted_approval(store: Store, tenant: str, approval_id: str = "apr_1") -> str:
    """A task parked in APPROVAL_WAIT whose approval was granted, its lease back in hand."""
    lease = running(store, tenant)
    store.transition(Guard.lease(lease), park_for_approval(action(), approval_id))
    store.decide_approval(approval_id, "usr_lead", grant=True)
    return lease.task_id


def test_executing_commit_writes_the_intent_in_the_same_transaction(
    store: Store, tenant: str
) -> None:
    """Invariant 3: the EXECUTING commit writes the effect intent with its key, and keeps
    the lease for the call."""
    act = action()
    lease = running(store, tenant)
    result = store.transition(Guard.lease(lease), intent(act))
    assert result.task.status is S.EXECUTING
    assert result.lease is not None and result.task.lease_owner == lease.owner  # call under it
    assert result.dispatch is None  # the worker keeps the task: no step message
    (eff,) = store.effects(lease.task_id)
    assert (eff.idempotency_key, eff.tool, eff.action_hash, eff.status, eff.attempts) == (
        act.idempotency_key,
        act.tool,
        act.action_hash,
        "intent",
        1,
    )
    # After the call, the outcome lands with the next transition.
    done = store.transition(
        Guard.lease(result.lease),
        to(S.VERIFYING, "effect_ok", effect=EffectWrite(act, "committed", {"refund": "rf_1"})),
    )
    assert done.task.status is S.VERIFYING
    assert store.effect(lease.task_id, act.idempotency_key) is not None
    (eff,) = store.effects(lease.task_id)
    assert (eff.status, eff.result) == ("committed", {"refund": "rf_1"})


def test_a_stale_intent_writes_neither_status_nor_effect(store: Store, tenant: str) -> None:
    """Invariant 3: a commit that fails writes neither the status nor the intent."""
    zombie = running(store, tenant)
    expire_lease(store, zombie.task_id)
    claim(store, zombie.task_id, OTHER)
    with pytest.raises(StaleTransition):
        store.transition(Guard.lease(zombie), intent(action()))
    assert n_effects(store, zombie.task_id) == 0
    assert store.get(zombie.task_id).status is S.RUNNING


def test_an_intent_key_reused_for_another_action_writes_nothing(store: Store, tenant: str) -> None:
    """Invariant 3: a retry after "reconcile found nothing" must present the very same
    action under its key; a different one is refused and the transition does not land either."""
    lease = executing(store, tenant, action(1200))
    unknown = store.transition(
        Guard.lease(lease),
        to(S.EXEC_UNKNOWN, "timeout", effect=EffectWrite(action(1200), "unknown")),
    )
    again = claim(store, lease.task_id)
    before = store.get(lease.task_id)
    with pytest.raises(ValueError, match="different action"):
        store.transition(Guard.lease(again), intent(action(9999)))  # same key, different amount
    assert store.get(lease.task_id) == before
    (eff,) = store.effects(lease.task_id)
    assert (eff.status, eff.action_hash, eff.attempts) == ("unknown", action(1200).action_hash, 1)
    # The same action again reuses the row and its key.
    retried = store.transition(Guard.lease(again), intent(action(1200)))
    assert retried.task.version == unknown.task.version + 1
    (eff,) = store.effects(lease.task_id)
    assert (eff.status, eff.attempts) == ("intent", 2)


def test_an_intent_never_reopens_a_committed_effect(store: Store, tenant: str) -> None:
    """Invariant 3: once an effect is committed under its key, a new intent under that key is
    refused (it would reset the recorded effect to `intent` and send it again); neither the
    transition nor any change to the effect lands."""
    lease = executing(store, tenant, action(1200))
    store.transition(
        Guard.lease(lease),
        to(S.RUNNING, "effect_ok", effect=EffectWrite(action(1200), "committed", {"id": 1})),
    )
    again = claim(store, lease.task_id)
    before = store.get(lease.task_id)
    with pytest.raises(EffectKeyConflict, match="already committed"):
        store.transition(Guard.lease(again), intent(action(1200)))
    assert store.get(lease.task_id) == before
    (eff,) = store.effects(lease.task_id)
    assert (eff.status, eff.attempts, eff.result) == ("committed", 1, {"id": 1})


def test_the_approval_is_consumed_in_the_intents_transaction(store: Store, tenant: str) -> None:
    """Invariants 3 and 8: the grant is consumed in the intent's transaction."""
    task_id = granted_approval(store, tenant)
    lease = claim(store, task_id)
    result = store.transition(Guard.lease(lease), intent(action(), approval_id="apr_1"))
    assert result.task.status is S.EXECUTING
    approval = store.approval("apr_1")
    assert approval.status == "used" and approval.used_at is not None
    assert n_effects(store, task_id) == 1


def test_a_second_consumption_fails_and_rolls_back_its_intent(store: Store, tenant: str) -> None:
    """Single use (invariant 8), checked by the database in the intent's transaction: when the
    grant is gone, neither the status, nor the event, nor the intent lands."""
    task_id = granted_approval(store, tenant)
    lease = claim(store, task_id)
    first = store.transition(Guard.lease(lease), intent(action(), approval_id="apr_1"))
    assert first.lease is not None
    # Back through reconcile to EXECUTING, presenting the (now used) grant again, under a
    # different key so the intent would be a fresh row.
    store.transition(
        Guard.lease(first.lease),
        to(S.EXEC_UNKNOWN, "timeout", effect=EffectWrite(action(), "unknown")),
    )
    again = claim(store, task_id)
    events = n_events(store, task_id)
    second = action(key="refund:req-1:pay_1:b")
    with pytest.raises(ApprovalError):
        store.transition(Guard.lease(again), intent(second, approval_id="apr_1"))
    assert store.get(task_id) == again.task  # as claimed: no status, version or event moved
    assert store.effect(task_id, second.idempotency_key) is None
    assert n_events(store, task_id) == events
    assert store.approval("apr_1").status == "used"


@pytest.mark.parametrize("spoil", ["expired", "denied", "pending", "other_task"])
def test_an_unusable_grant_rolls_back_the_intent(store: Store, tenant: str, spoil: str) -> None:
    """Invariants 3 and 8: an expired, denied, undecided or foreign grant rolls the intent back."""
    lease = running(store, tenant)
    store.transition(Guard.lease(lease), park_for_approval(action(), "apr_1"))
    if spoil == "expired":
        store.decide_approval("apr_1", "usr_lead", grant=True)
        shift(store, approvals, "apr_1", expires_at=-1.0)
    elif spoil == "denied":
        store.decide_approval("apr_1", "usr_lead", grant=False)
    elif spoil == "other_task":
        # A grant for another task cannot be spent here.
        other = running(store, tenant)
        store.transition(Guard.lease(other), park_for_approval(action(), "apr_2"))
        store.decide_approval("apr_2", "usr_lead", grant=True)
        store.decide_approval("apr_1", "usr_lead", grant=True)
    shift(store, tasks, lease.task_id, next_attempt_at=-1.0)  # its timer is due
    again = claim(store, lease.task_id)
    approval_id = "apr_2" if spoil == "other_task" else "apr_1"
    with pytest.raises(ApprovalError):
        store.transition(Guard.lease(again), intent(action(), approval_id=approval_id))
    assert store.get(lease.task_id).status is S.APPROVAL_WAIT
    assert n_effects(store, lease.task_id) == 0


def test_lapsed_lease_during_effect_becomes_exec_unknown(store: Store, tenant: str) -> None:
    """Invariant 4: the call may have been sent, so the lease sweeper moves the task to
    EXEC_UNKNOWN (effect `unknown`, event `lease_lost_during_effect`), never FAILED."""
    act = action()
    lease = executing(store, tenant, act)
    expire_lease(store, lease.task_id)
    sweep, publisher = sweepers(store)
    assert sweep.lease() == 1
    row = store.get(lease.task_id)
    assert row.status is S.EXEC_UNKNOWN  # never FAILED: the call may have landed
    assert row.version == lease.version + 1
    assert row.lease_owner is None and row.lease_expires_at is None
    (eff,) = store.effects(lease.task_id)
    assert eff.status == "unknown" and eff.idempotency_key == act.idempotency_key
    last = store.events(lease.task_id)[-1]
    assert (last.type, last.from_status, last.to_status) == (
        "lease_lost_during_effect",
        S.EXECUTING,
        S.EXEC_UNKNOWN,
    )
    assert last.data["by"] == "sweeper" and last.data["owner"] == lease.owner
    assert last.data["idempotency_key"] == act.idempotency_key
    assert [d.task_id for d in publisher.published] == [lease.task_id]
    # The zombie that was calling the tool cannot record an outcome over the unknown.
    with pytest.raises(StaleTransition):
        store.transition(
            Guard.lease(lease), to(S.VERIFYING, "effect_ok", effect=EffectWrite(act, "committed"))
        )
    assert sweep.lease() == 0
    assert event_types(store, lease.task_id).count("lease_lost_during_effect") == 1


def test_a_live_executing_lease_is_left_alone(store: Store, tenant: str) -> None:
    """Invariant 4: a live EXECUTING lease is not the sweeper's business."""
    lease = executing(store, tenant)
    sweep, publisher = sweepers(store)
    assert sweep.lease() == 0 and not publisher.published
    assert store.get(lease.task_id).status is S.EXECUTING
