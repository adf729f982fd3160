"""Invariant 1, one write path: every status change is one compare-and-set on (version, lease epoch,
owner) plus one event, in one transaction. Runs on SQLite and Postgres."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from agent_jobs.core.errors import IllegalTransition, StaleTransition
from agent_jobs.core.states import Status
from agent_jobs.store import CommitResult, Store
from agent_jobs.store.guard import Guard
from agent_jobs.store.schema import dead_letters
from tests.contract.support import (
    S,
    claim,
    count,
    failing_statement,
    n_events,
    new_task,
    running,
    to,
)


def test_two_commits_from_the_same_version_second_is_stale(store: Store, tenant: str) -> None:
    """Invariant 1: same owner, same epoch, same version: only the version guard tells the
    two commits apart; the second raises and leaves no event."""
    lease = running(store, tenant)
    first = store.transition(Guard.lease(lease), to(S.RUNNING, "read_step", keep_lease=True))
    assert first.task.version == lease.version + 1
    events = n_events(store, lease.task_id)
    with pytest.raises(StaleTransition) as info:
        store.transition(Guard.lease(lease), to(S.VERIFYING, "drafted", keep_lease=True))
    assert (info.value.version, info.value.lease_epoch) == (lease.version, lease.epoch)
    after = store.get(lease.task_id)
    assert after.status is S.RUNNING and after.version == first.task.version
    assert after.event_seq == first.task.event_seq
    assert n_events(store, lease.task_id) == events


def test_racing_commits_from_one_version_exactly_one_wins(store: Store, tenant: str) -> None:
    """Invariant 1: eight threads commit from one version; one wins, one event is written."""
    lease = running(store, tenant)
    gate = threading.Barrier(8)
    targets = [S.RUNNING, S.VERIFYING, S.RETRY_WAIT, S.EXECUTING] * 2

    def commit(target: Status) -> CommitResult | StaleTransition:
        gate.wait()
        try:
            return store.transition(Guard.lease(lease), to(target, "race", keep_lease=True))
        except StaleTransition as exc:
            return exc

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(commit, targets))
    wins = [r for r in results if isinstance(r, CommitResult)]
    assert len(wins) == 1
    after = store.get(lease.task_id)
    assert after.version == lease.version + 1 and after.status is wins[0].task.status
    last = store.events(lease.task_id)[-1]
    assert (last.from_status, last.to_status) == (S.RUNNING, after.status)
    assert n_events(store, lease.task_id) == 3  # created, started, the one winner


def test_every_commit_appends_exactly_one_event_with_from_and_to(store: Store, tenant: str) -> None:
    """Invariant 1: every accepted commit bumps the version and appends exactly one event
    with its from/to."""
    task = new_task(store, tenant)
    lease = claim(store, task.id)
    path = [S.RUNNING, S.RUNNING, S.VERIFYING, S.RUNNING, S.VERIFYING, S.COMPLETED]
    frm = S.RECEIVED
    for i, target in enumerate(path):
        keep = target is not S.COMPLETED
        result = store.transition(
            Guard.lease(lease), to(target, f"e{i}", data={"i": i}, keep_lease=keep)
        )
        assert result.task.version == 2 + i
        assert result.task.event_seq == 2 + i
        events = store.events(task.id)
        assert len(events) == 2 + i
        last = events[-1]
        assert (last.seq, last.type, last.from_status, last.to_status) == (
            2 + i,
            f"e{i}",
            frm,
            target,
        )
        assert last.data == {"i": i, "by": lease.owner}
        frm = target
        if result.lease is not None:
            lease = result.lease
    assert [e.seq for e in store.events(task.id)] == list(range(1, len(path) + 2))


def test_an_illegal_transition_is_refused_before_any_write(store: Store, tenant: str) -> None:
    """Invariant 1: the transition table is checked before the database is touched."""
    task = new_task(store, tenant)
    lease = claim(store, task.id)
    with failing_statement(store, "UPDATE tasks"), pytest.raises(IllegalTransition):
        # The guard runs first: had it touched the database, the injected failure would show.
        store.transition(Guard.lease(lease), to(S.COMPLETED, "skip_ahead"))
    after = store.get(task.id)
    assert after == lease.task
    assert n_events(store, task.id) == 1
    # The lease is untouched: the worker can still make a legal move.
    assert store.transition(Guard.lease(lease), to(S.RUNNING, "started")).task.status is S.RUNNING


def test_a_stale_lease_with_an_illegal_move_changes_nothing(store: Store, tenant: str) -> None:
    """Invariant 1: an illegal move from a stale snapshot changes nothing."""
    lease = running(store, tenant)
    store.transition(Guard.lease(lease), to(S.VERIFYING, "drafted", keep_lease=True))
    snapshot = store.get(lease.task_id)
    for target in (S.COMPLETED, S.RECEIVED):  # illegal from the lease's RUNNING snapshot
        with pytest.raises(IllegalTransition):
            store.transition(Guard.lease(lease), to(target, "zombie"))
    assert store.get(lease.task_id) == snapshot


def test_a_failed_event_append_rolls_the_status_back(store: Store, tenant: str) -> None:
    """Invariant 1: the UPDATE and the event are one transaction: no status change without
    its event."""
    lease = running(store, tenant)
    before = store.get(lease.task_id)
    with failing_statement(store, "INSERT INTO task_events"), pytest.raises(RuntimeError):
        store.transition(Guard.lease(lease), to(S.VERIFYING, "drafted"))
    assert store.get(lease.task_id) == before
    assert (
        store.transition(Guard.lease(lease), to(S.VERIFYING, "drafted")).task.status is S.VERIFYING
    )


def test_a_dead_letter_moves_with_its_status(store: Store, tenant: str) -> None:
    """Invariant 1: records that move with the status (a dead letter) share its transaction."""
    lease = running(store, tenant)
    with failing_statement(store, "INSERT INTO dead_letters"), pytest.raises(RuntimeError):
        store.transition(
            Guard.lease(lease), to(S.FAILED, "dead_letter", attempts=5, dead_letter="gave up")
        )
    assert store.get(lease.task_id).status is S.RUNNING
    assert count(store, dead_letters, task_id=lease.task_id) == 0
    done = store.transition(
        Guard.lease(lease), to(S.FAILED, "dead_letter", attempts=5, dead_letter="gave up")
    )
    assert done.task.status is S.FAILED and done.task.lease_owner is None
    (letter,) = store.dead_letters(tenant)
    assert (letter.task_id, letter.attempts, letter.reason) == (lease.task_id, 5, "gave up")


def test_terminal_commit_releases_the_lease_and_nothing_follows(store: Store, tenant: str) -> None:
    """Invariants 1 and 2: a terminal commit releases the lease; a terminal task is never
    claimed."""
    lease = running(store, tenant)
    done = store.transition(
        Guard.lease(lease), to(S.CANCELLED, "cancelled", outcome={"why": "asked"})
    )
    assert done.dispatch is None and done.lease is None
    assert done.task.lease_owner is None and done.task.lease_expires_at is None
    assert done.task.outcome == {"why": "asked"}
    assert store.claim(lease.task_id, "worker-c", 30.0) is None
