"""A step whose worker process dies (`os._exit`, the OOM killer) is a failed attempt, on both
backends (issue 25).

The death is simulated by `WorkerCrashed`, a `BaseException` no step code catches: the step
stops where it is, its lease (if any) still held, nothing committed, as when the process
vanishes. A lease that lapses off EXECUTING is counted by the lease sweeper (`WorkerLost`), waits
out the retry backoff instead of being dispatched again at once, and after `max_attempts` the
task is FAILED with a dead letter. A quick step has no lease: its message, redelivered, runs
under one (`claim=True`, what the step task does with a redelivered message), so its next death
is counted the same way. A lease lost in EXECUTING is still EXEC_UNKNOWN, not an attempt.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from agent_jobs.core.states import Status
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.orchestrator.steps import WORKER_LOST
from agent_jobs.queue.tasks import redelivered
from agent_jobs.store import Dispatch
from agent_jobs.testing import TEST_SETTINGS, Harness, WorkerCrashed
from tests.contract.test_step_failures import Scripted, events, raises, run

S = Status
DIES = raises(WorkerCrashed("the process was killed"))


class QuickScripted(Scripted):
    """Every step quick: computed and committed without a lease."""

    def quick(self, inp: wf.StepInput) -> bool:
        return True


def _dies_then_swept(h: Harness, task_id: str, *, attempt: int) -> None:
    """The leased step runs and its worker dies; the lease lapses; the sweeper counts it."""
    with pytest.raises(WorkerCrashed):
        h.run_until_idle()
    held = h.store.get(task_id)
    assert held.lease_owner is not None, "a dead worker's lease is still held"
    h.expire_lease(task_id)
    assert h.sweepers.lease() == 1
    row = h.store.get(task_id)
    assert (row.attempts, row.last_error, row.lease_owner) == (attempt, WORKER_LOST, None)
    if attempt < TEST_SETTINGS.max_attempts:
        assert row.status is S.RETRY_WAIT and row.next_attempt_at is not None
        assert not h.publisher.queue, "waits out its backoff: nothing published at once"
        h.make_due(task_id)
        assert h.sweepers.retry() == 1


def _dead_lettered(h: Harness, tenant: str, task_id: str) -> None:
    final = h.store.get(task_id)
    assert final.status is S.FAILED
    assert final.attempts == TEST_SETTINGS.max_attempts
    assert final.outcome is not None and final.outcome["dead_letter"] is True
    [letter] = h.store.dead_letters(tenant)
    assert letter.task_id == task_id and letter.attempts == TEST_SETTINGS.max_attempts
    assert "WorkerLost" in letter.reason
    types = events(h.store, task_id)
    assert types.count("lease_expired") == TEST_SETTINGS.max_attempts - 1
    assert types[-1] == "dead_lettered"


def test_a_leased_step_that_kills_its_worker_is_counted_then_dead_lettered(
    store: Any, tenant: str
) -> None:
    h, task = run(store, tenant, Scripted(decide=DIES))
    for attempt in range(1, TEST_SETTINGS.max_attempts + 1):
        _dies_then_swept(h, task.id, attempt=attempt)
    _dead_lettered(h, tenant, task.id)


def test_a_quick_step_that_kills_its_worker_runs_leased_when_redelivered_and_is_bounded(
    store: Any, tenant: str
) -> None:
    h, task = run(store, tenant, QuickScripted(decide=DIES))
    for attempt in range(1, TEST_SETTINGS.max_attempts + 1):
        with pytest.raises(WorkerCrashed):
            h.run_until_idle()  # the quick step dies: no lease, nothing to sweep
        assert h.store.get(task.id).lease_owner is None
        assert h.sweepers.lease() == 0
        # Celery puts the message back, flagged redelivered: the step task claims at once.
        h.publisher.publish(Dispatch(task.id, task.tenant_id, claim=True))
        _dies_then_swept(h, task.id, attempt=attempt)
    _dead_lettered(h, tenant, task.id)


def test_a_lease_lost_during_an_effect_is_unknown_not_an_attempt(store: Any, tenant: str) -> None:
    """Intent before effect: the worker died after the intent, so the outcome is unknown and
    reconciled by key; that alone is not counted as a crash (unless it repeats)."""
    h, task = run(store, tenant, Scripted(execute=DIES))
    with pytest.raises(WorkerCrashed):
        h.run_until_idle()
    assert h.store.get(task.id).status is S.EXECUTING
    h.expire_lease(task.id)
    assert h.sweepers.lease() == 1
    row = h.store.get(task.id)
    assert (row.status, row.attempts) == (S.EXEC_UNKNOWN, 0)


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        ({"redelivered": True}, True),
        ({"redelivered": False}, False),
        ({"exchange": "", "routing_key": "q"}, False),
        ({}, False),
        (None, False),
    ],
)
def test_a_redelivered_message_is_recognised(info: Any, expected: bool) -> None:
    assert redelivered(SimpleNamespace(delivery_info=info)) is expected
    assert redelivered(object()) is False  # a step called directly, outside a worker
