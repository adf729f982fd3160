"""`last_error` as every commit form writes it, the same on SQLite and Postgres: a patch's own
error is written even when it resets `attempts` to 0; a reset without one clears it; a patch
that says nothing about either keeps it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agent_jobs.core.patch import Patch
from agent_jobs.core.states import Status
from agent_jobs.store import Lease, Store
from agent_jobs.store.guard import Guard
from tests.contract.support import claim, running

S = Status
Commit = Callable[[Store, Lease, Patch], None]


def _commit(store: Store, lease: Lease, patch: Patch) -> None:
    store.transition(Guard.lease(lease), patch)


def _lean(store: Store, lease: Lease, patch: Patch) -> None:
    store.transition(Guard.lease(lease), patch, returning=False)


def _quick(store: Store, lease: Lease, patch: Patch) -> None:
    with store.tx() as conn:
        store.transition(Guard.seen(lease.task), patch, conn=conn, actor="test")


@pytest.mark.parametrize("commit", [_commit, _lean, _quick], ids=["commit", "lean", "quick"])
def test_last_error_is_written_alike_by_every_commit(
    store: Store, tenant: str, commit: Commit
) -> None:
    lease = running(store, tenant)
    store.transition(
        Guard.lease(lease), Patch(S.RUNNING, "failed_once", attempts=2, last_error="Boom: first")
    )
    commit(
        store,
        claim(store, lease.task_id),
        Patch(S.RUNNING, "restart", attempts=0, last_error="Why: kept"),
    )
    assert store.get(lease.task_id).last_error == "Why: kept"
    commit(store, claim(store, lease.task_id), Patch(S.RUNNING, "progress"))
    assert store.get(lease.task_id).last_error == "Why: kept", "a patch silent on both keeps it"
    commit(store, claim(store, lease.task_id), Patch(S.RUNNING, "progress", attempts=0))
    after = store.get(lease.task_id)
    assert after.attempts == 0 and after.last_error is None, "a reset without an error clears it"
