"""Invariant 2, fenced leases: a claim takes the owner, a new epoch and an expiry from the database
clock; a zombie's late commit fails on the epoch. Runs on SQLite and Postgres."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from agent_jobs.core.errors import StaleTransition
from agent_jobs.orchestrator.steps import worker_lost
from agent_jobs.store import Lease, Store
from agent_jobs.store.guard import Guard
from agent_jobs.store.schema import tasks
from agent_jobs.testing import TEST_SETTINGS
from tests.contract.support import (
    OTHER,
    OWNER,
    S,
    claim,
    event_types,
    expire_lease,
    n_events,
    new_task,
    running,
    shift,
    to,
)


def test_claim_sets_owner_new_epoch_and_expiry_from_the_db_clock(store: Store, tenant: str) -> None:
    """Invariant 2: a claim sets the owner, a new epoch and an expiry from the DB clock."""
    task = new_task(store, tenant)
    before = store.db_now()
    lease = claim(store, task.id, OWNER, ttl_s=90.0)
    after = store.db_now()
    row = store.get(task.id)
    assert (row.lease_owner, row.lease_epoch) == (OWNER, task.lease_epoch + 1)
    assert (lease.owner, lease.epoch) == (OWNER, row.lease_epoch)
    assert lease.expires_at == row.lease_expires_at
    # The expiry is the database's now + ttl (bracketed by two readings of that clock).
    assert before + timedelta(seconds=90) <= lease.expires_at <= after + timedelta(seconds=90)
    # A claim is not a transition: same version, same status, no event.
    assert (row.version, row.status, row.event_seq) == (1, S.RECEIVED, 1)


def test_a_live_lease_cannot_be_claimed_again(store: Store, tenant: str) -> None:
    """Invariant 2: a live lease cannot be claimed, not even under the same owner name."""
    task = new_task(store, tenant)
    claim(store, task.id, OWNER)
    assert store.claim(task.id, OTHER, 30.0) is None
    assert store.claim(task.id, OWNER, 30.0) is None  # not even by the same owner name
    assert store.get(task.id).lease_epoch == 1


def test_racing_claims_one_winner(store: Store, tenant: str) -> None:
    """Invariant 2: ten racing claims, one lease."""
    task = new_task(store, tenant)
    gate = threading.Barrier(10)

    def take(i: int) -> Lease | None:
        gate.wait()
        return store.claim(task.id, f"w{i}", 30.0)

    with ThreadPoolExecutor(max_workers=10) as pool:
        leases = [x for x in pool.map(take, range(10)) if x is not None]
    assert len(leases) == 1
    row = store.get(task.id)
    assert (row.lease_owner, row.lease_epoch) == (leases[0].owner, 1)


def test_after_the_lease_lapses_the_zombie_is_fenced_off(store: Store, tenant: str) -> None:
    """Invariant 2: after a lapse the old owner's late commit fails; the new owner's succeeds."""
    zombie = running(store, tenant, OWNER)
    expire_lease(store, zombie.task_id)
    heir = claim(store, zombie.task_id, OTHER)
    assert heir.epoch == zombie.epoch + 1
    assert heir.version == zombie.version  # a claim does not bump the version
    events = n_events(store, zombie.task_id)
    with pytest.raises(StaleTransition):
        store.transition(Guard.lease(zombie), to(S.VERIFYING, "late_draft"))
    assert n_events(store, zombie.task_id) == events
    assert store.get(zombie.task_id).lease_owner == OTHER
    done = store.transition(Guard.lease(heir), to(S.VERIFYING, "draft"))
    assert done.task.status is S.VERIFYING and done.task.version == zombie.version + 1


def test_the_epoch_alone_fences_a_zombie_with_the_same_owner_name(
    store: Store, tenant: str
) -> None:
    """Invariant 2: owner names are host:pid, so the same process can re-claim after its own
    lease lapsed (a stuck thread): owner and version match, only the epoch tells the zombie
    apart."""
    zombie = running(store, tenant, OWNER)
    expire_lease(store, zombie.task_id)
    heir = claim(store, zombie.task_id, OWNER)
    assert (heir.owner, heir.version, heir.epoch) == (OWNER, zombie.version, zombie.epoch + 1)
    with pytest.raises(StaleTransition):
        store.transition(Guard.lease(zombie), to(S.VERIFYING, "late_draft"))
    with pytest.raises(StaleTransition):
        store.renew(zombie, 30.0)
    assert not store.release(zombie)
    assert store.get(zombie.task_id).lease_owner == OWNER
    assert store.transition(Guard.lease(heir), to(S.VERIFYING, "draft")).task.status is S.VERIFYING


def test_renew_pushes_the_expiry_out_from_the_db_clock(store: Store, tenant: str) -> None:
    """Invariant 2: a heartbeat moves the expiry by the DB clock, nothing else."""
    lease = running(store, tenant)
    shift(store, tasks, lease.task_id, lease_expires_at=5.0)
    before = store.db_now()
    renewed = store.renew(lease, 120.0)
    assert renewed.expires_at >= before + timedelta(seconds=120)
    assert store.get(lease.task_id).lease_expires_at == renewed.expires_at
    assert (renewed.epoch, renewed.owner, renewed.version) == (
        lease.epoch,
        lease.owner,
        lease.version,
    )


def test_renew_after_losing_the_lease_raises(store: Store, tenant: str) -> None:
    """Invariant 2: renewing a lease another worker took raises."""
    lease = running(store, tenant, OWNER)
    expire_lease(store, lease.task_id)
    claim(store, lease.task_id, OTHER)
    with pytest.raises(StaleTransition):
        store.renew(lease, 30.0)
    assert store.get(lease.task_id).lease_owner == OTHER


def test_renew_after_the_sweeper_took_the_lease_raises(store: Store, tenant: str) -> None:
    """Invariants 2 and 10: once the sweeper took a lapsed lease, the old owner can neither
    renew nor commit."""
    lease = running(store, tenant, OWNER)
    expire_lease(store, lease.task_id)
    store.sweep_expired_leases(100, lambda t: worker_lost(t, TEST_SETTINGS, 0.5))
    assert "lease_expired" in event_types(store, lease.task_id)
    with pytest.raises(StaleTransition):
        store.renew(lease, 30.0)
    with pytest.raises(StaleTransition):
        store.transition(Guard.lease(lease), to(S.VERIFYING, "late_draft"))


def test_release_gives_the_lease_back_without_a_transition(store: Store, tenant: str) -> None:
    """Invariant 2: a release is no transition, works once, and the next claim fences the
    releaser."""
    task = new_task(store, tenant)
    lease = claim(store, task.id, OWNER)
    assert store.release(lease)
    row = store.get(task.id)
    assert row.lease_owner is None and row.lease_expires_at is None
    assert (row.version, row.event_seq) == (1, 1)
    assert not store.release(lease)  # only once
    again = claim(store, task.id, OTHER)
    assert again.epoch == lease.epoch + 1
    with pytest.raises(StaleTransition):
        store.transition(Guard.lease(lease), to(S.RUNNING, "late"))


def test_terminal_and_parked_tasks_are_not_claimed(store: Store, tenant: str) -> None:
    """Invariant 2: terminal tasks are never claimed, whatever their lease columns say."""
    lease = running(store, tenant)
    store.transition(Guard.lease(lease), to(S.FAILED, "failed"))
    assert store.claim(lease.task_id, OTHER, 30.0) is None
    # Even a stray lease timestamp on a terminal row does not make it claimable.
    shift(store, tasks, lease.task_id, lease_expires_at=-10.0)
    assert store.claim(lease.task_id, OTHER, 30.0) is None


def test_claiming_a_row_just_read_gives_the_same_lease_as_a_full_claim(
    store: Store, tenant: str
) -> None:
    """`claim(..., seen=)` (the step's claim after its read) returns what a plain claim would:
    the row as read with the new owner, epoch and expiry, which is the row as it now is."""
    task = new_task(store, tenant)
    with store.step_conn() as conn:
        seen = store.peek_claimable(conn, task.id)
        assert seen is not None
        lease = store.claim(seen.id, OWNER, 60.0, conn=conn, seen=seen)
    assert lease is not None
    assert lease.task == store.get(task.id)
    assert (lease.owner, lease.epoch) == (OWNER, task.lease_epoch + 1)


def test_claiming_a_row_that_moved_since_the_read_reads_it_afresh(
    store: Store, tenant: str
) -> None:
    """A cancel between the read and the claim (no transition: the flag and its event) must be
    seen by the step: the claim then returns the row as it is, not as it was read."""
    task = new_task(store, tenant)
    with store.step_conn() as conn:
        seen = store.peek_claimable(conn, task.id)
    assert seen is not None and not seen.cancel_requested
    store.request_cancel(task.id)
    with store.step_conn() as conn:
        lease = store.claim(seen.id, OWNER, 60.0, conn=conn, seen=seen)
    assert lease is not None and lease.task.cancel_requested
    assert lease.task == store.get(task.id)


def test_claiming_a_row_someone_else_claimed_since_the_read_fails(
    store: Store, tenant: str
) -> None:
    task = new_task(store, tenant)
    with store.step_conn() as conn:
        seen = store.peek_claimable(conn, task.id)
    assert seen is not None
    assert claim(store, task.id, OTHER) is not None
    with store.step_conn() as conn:
        assert store.claim(seen.id, OWNER, 60.0, conn=conn, seen=seen) is None
