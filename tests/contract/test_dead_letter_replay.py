"""Dead-letter replay: a FAILED, dead-lettered task resumes from its checkpoint, once.

The one transition out of a terminal status is a store operation of its own (not the step write
path): guarded on FAILED and on the dead letter still being there, with attempts reset and a
`dead_letter_replayed` event, on SQLite and Postgres alike.
"""

from __future__ import annotations

import threading
from typing import Any

from agent_jobs.core.patch import Patch
from agent_jobs.core.states import Status
from agent_jobs.store import Store
from agent_jobs.store.guard import Guard
from agent_jobs.store.schema import dead_letter_replays, dead_letters
from tests.contract.support import claim, count, event_types, n_events, new_task, running

S = Status


def dead_lettered(store: Store, tenant: str) -> str:
    """A task whose RUNNING step failed five times: FAILED with a dead letter, its state kept."""
    lease = running(store, tenant)
    store.transition(
        Guard.lease(lease), Patch(to=S.RUNNING, event="progress", state={"checkpoint": 7})
    )
    lease = claim(store, lease.task_id)
    store.transition(
        Guard.lease(lease),
        Patch(
            to=S.FAILED,
            event="dead_lettered",
            data={"reason": "boom", "attempts": 5, "step": "RUNNING"},
            attempts=5,
            last_error="RuntimeError: boom",
            dead_letter="5 consecutive failed attempts; last: RuntimeError: boom",
            outcome={"reason": "gave up", "dead_letter": True},
        ),
    )
    task = store.get(lease.task_id)
    assert task.status is S.FAILED and count(store, dead_letters, task_id=task.id) == 1
    return task.id


def test_replay_resumes_from_the_checkpoint_with_attempts_reset(store: Store, tenant: str) -> None:
    task_id = dead_lettered(store, tenant)
    result = store.replay_dead_letter(task_id, actor="oncall", why="provider fixed")
    assert result.replayed and result.resumed_as == "RUNNING"
    assert result.dispatch is not None and result.dispatch.task_id == task_id
    task = store.get(task_id)
    assert task.status is S.RUNNING
    assert task.attempts == 0 and task.outcome is None and task.last_error is None
    assert task.state.get("checkpoint") == 7  # the checkpoint, not a fresh start
    events = store.events(task_id)
    last = events[-1]
    assert last.type == "dead_letter_replayed"
    assert last.from_status is S.FAILED and last.to_status is S.RUNNING
    assert last.data["by"] == "oncall" and last.data["why"] == "provider fixed"
    assert count(store, dead_letters, task_id=task_id) == 0
    assert count(store, dead_letter_replays, task_id=task_id) == 1
    assert store.claim(task_id, "worker-z:1", 30.0) is not None  # runnable again


def test_a_second_replay_of_the_same_dead_letter_does_nothing(store: Store, tenant: str) -> None:
    task_id = dead_lettered(store, tenant)
    assert store.replay_dead_letter(task_id, actor="a", why="x").replayed
    before = (store.get(task_id).version, n_events(store, task_id))
    again = store.replay_dead_letter(task_id, actor="b", why="y")
    assert not again.replayed and again.reason == "already replayed" and again.dispatch is None
    assert (store.get(task_id).version, n_events(store, task_id)) == before


def test_two_replays_at_once_resume_the_task_once(store: Store, tenant: str) -> None:
    task_id = dead_lettered(store, tenant)
    results: list[Any] = []
    barrier = threading.Barrier(4)

    def go() -> None:
        barrier.wait()
        try:
            results.append(store.replay_dead_letter(task_id, actor="x", why="race"))
        except Exception as exc:  # SQLite may refuse a concurrent writer: also "not replayed"
            results.append(exc)

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    replayed = [r for r in results if not isinstance(r, Exception) and r.replayed]
    assert len(replayed) == 1
    assert event_types(store, task_id).count("dead_letter_replayed") == 1
    assert count(store, dead_letter_replays, task_id=task_id) == 1


def test_only_a_dead_lettered_failed_task_is_replayed(store: Store, tenant: str) -> None:
    task = new_task(store, tenant)
    result = store.replay_dead_letter(task.id, actor="a", why="x")
    assert not result.replayed and result.reason == "no dead letter for this task"
    assert store.get(task.id).status is S.RECEIVED


def test_a_replayed_task_that_fails_again_is_dead_lettered_and_replayed_again(
    store: Store, tenant: str
) -> None:
    task_id = dead_lettered(store, tenant)
    assert store.replay_dead_letter(task_id, actor="a", why="first").replayed
    lease = claim(store, task_id)
    store.transition(
        Guard.lease(lease),
        Patch(to=S.FAILED, event="dead_lettered", data={"step": "RUNNING"}, attempts=5,
              dead_letter="again"),
    )  # fmt: skip
    assert count(store, dead_letters, task_id=task_id) == 1
    second = store.replay_dead_letter(task_id, actor="a", why="second")
    assert second.replayed
    assert count(store, dead_letter_replays, task_id=task_id) == 2


def test_a_task_whose_start_failed_resumes_at_its_start(store: Store, tenant: str) -> None:
    task = new_task(store, tenant)
    lease = claim(store, task.id)
    failed = Patch(to=S.FAILED, event="dead_lettered", data={"step": "RECEIVED"}, dead_letter="x")
    store.transition(Guard.lease(lease), failed)
    result = store.replay_dead_letter(task.id, actor="a", why="input check fixed")
    assert result.resumed_as == "RECEIVED" and store.get(task.id).status is S.RECEIVED


def test_replay_by_filter_lists_dead_letters_oldest_first(store: Store, tenant: str) -> None:
    first = dead_lettered(store, tenant)
    second = dead_lettered(store, tenant)
    assert store.dead_letter_ids(tenant_id=tenant) == [first, second]
    assert store.dead_letter_ids(tenant_id=tenant, workflow="example") == [first, second]
    assert store.dead_letter_ids(tenant_id=tenant, workflow="other") == []
