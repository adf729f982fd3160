"""A sweeper that meets a row it cannot move dead-letters that row, with the reason, and goes on
with the rest (defect D6 of issue 29): one bad row must not stop lease recovery, re-dispatch or
pruning for every other task. Every sweeper that handles rows one by one, on SQLite and
Postgres; the retention sweeper's one DELETE of old rejected submissions has no row to refuse.

Each test puts one poison row among good ones, runs the sweeper once, and checks that the sweep
returned, the good rows moved, the poison row is dead-lettered with its reason (through the one
guarded write where its status may legally change, without a status write where it may not),
and that the next sweep does not meet it again.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert, select, update

from agent_jobs.core.holds import HoldReason
from agent_jobs.core.states import Status
from agent_jobs.orchestrator import sweepers as sweepers_module
from agent_jobs.orchestrator.ports import NullObserver
from agent_jobs.orchestrator.sweepers import Sweepers
from agent_jobs.store import Dispatch, Store
from agent_jobs.store.dead_letters import SET_ASIDE_EVENT
from agent_jobs.store.schema import approvals, dead_letters, tasks
from agent_jobs.testing import TEST_SETTINGS, LostBroker, RecordingPublisher
from tests.contract.support import count, event_types

S = Status
# A lapsed lease's retry is not due within the test; finished tasks older than a day are pruned.
SETTINGS = TEST_SETTINGS.with_overrides(
    retry_base_s=3600.0, retry_max_s=7200.0, task_retention_days=1.0
)
GOOD = 3


class Refusing(RecordingPublisher):
    """A broker (or gate) that refuses one task's step message: a tenant it cannot route."""

    def __init__(self, refused: str) -> None:
        super().__init__()
        self.refused = refused

    def publish(self, dispatch: Dispatch) -> None:
        if dispatch.task_id == self.refused:
            raise ValueError(f"no queue for tenant of {dispatch.task_id}")
        super().publish(dispatch)


class Counting(NullObserver):
    def __init__(self) -> None:
        self.dead_letters = 0

    def dead_letter(self, workflow: str) -> None:
        self.dead_letters += 1


def _row(tenant: str, now: datetime, status: Status, **kw: Any) -> dict[str, Any]:
    task_id = f"tsk_{uuid.uuid4().hex}"
    row: dict[str, Any] = {
        "id": task_id, "tenant_id": tenant, "idempotency_key": task_id,
        "payload_hash": "sha256:" + "0" * 64, "workflow": "example@1", "requester": "svc:seed",
        "input": {}, "pinned": {}, "status": status.value, "version": 3, "lease_owner": None,
        "lease_expires_at": None, "lease_epoch": 1, "next_attempt_at": None,
        "dispatched_at": now - timedelta(hours=1), "attempts": 0, "cancel_requested_at": None,
        "state": {}, "outcome": None, "event_seq": 3, "trace_id": uuid.uuid4().hex,
        "created_at": now - timedelta(hours=2), "updated_at": now - timedelta(hours=1),
    }  # fmt: skip
    row.update(kw)
    return row


def _seed(store: Store, rows: list[dict[str, Any]]) -> list[str]:
    with store.tx() as conn:
        conn.execute(insert(tasks), rows)
    return [r["id"] for r in rows]


def _sweepers(store: Store, publisher: RecordingPublisher) -> tuple[Sweepers, Counting]:
    observer = Counting()
    return Sweepers(store, publisher, SETTINGS, LostBroker(), observer), observer


def _letter(store: Store, task_id: str) -> str:
    with store.engine.connect() as conn:
        reason = conn.execute(
            select(dead_letters.c.reason).where(dead_letters.c.task_id == task_id)
        ).scalar_one()
    return str(reason)


def _published(publisher: RecordingPublisher) -> set[str]:
    return {d.task_id for d in publisher.queue}


# -- the lease sweeper: rows that cannot take their patch -----------------------------------


def test_lease_sweeper_dead_letters_a_terminal_row_with_a_lapsed_lease_and_goes_on(
    store: Store, tenant: str
) -> None:
    """The row `agent-jobs bench sweep` met: FAILED (dead-lettered before) with a lapsed lease.
    Its failed attempt would be FAILED -> ESCALATED, which the table refuses: no status write;
    the dead letter says why, the lease is cleared, and the next sweep does not meet it."""
    now = store.db_now()
    past = now - timedelta(seconds=30)
    good = _seed(store, [
        _row(tenant, now, S.RUNNING, lease_owner="dead:1", lease_expires_at=past)
        for _ in range(GOOD)
    ])  # fmt: skip
    (poison,) = _seed(store, [
        _row(tenant, now, S.FAILED, attempts=5, lease_owner="dead:1", lease_expires_at=past)
    ])  # fmt: skip
    with store.tx() as conn:
        conn.execute(insert(dead_letters).values(
            task_id=poison, tenant_id=tenant, workflow="example@1", reason="gave up", attempts=5,
            at=now,
        ))  # fmt: skip
    sweepers, observer = _sweepers(store, RecordingPublisher())

    assert sweepers.lease() == GOOD + 1
    for task_id in good:
        moved = store.get(task_id)
        assert (moved.status, moved.attempts, moved.lease_owner) == (S.RETRY_WAIT, 1, None)
    row = store.get(poison)
    assert row.status is S.FAILED and row.version == 3, "no status write"
    assert row.lease_owner is None and row.lease_expires_at is None
    reason = _letter(store, poison)
    assert reason.startswith("the lease sweeper could not move this row: IllegalTransition")
    assert reason.endswith("; before: gave up")  # the first letter's reason kept
    assert event_types(store, poison)[-1] == SET_ASIDE_EVENT
    assert observer.dead_letters == 1
    assert sweepers.lease() == 0  # not met again


def test_lease_sweeper_dead_letters_a_row_whose_patch_cannot_be_built(
    store: Store, tenant: str
) -> None:
    """A corrupt checkpoint (its runtime record is not an object): building the failed attempt
    raises. The row may move, so it does, through the guarded write: FAILED, dead-lettered."""
    now = store.db_now()
    past = now - timedelta(seconds=30)
    good = _seed(store, [
        _row(tenant, now, S.RUNNING, lease_owner="dead:1", lease_expires_at=past)
        for _ in range(GOOD)
    ])  # fmt: skip
    (poison,) = _seed(store, [
        _row(tenant, now, S.RUNNING, lease_owner="dead:1", lease_expires_at=past,
             state={"runtime": ["not", "an", "object"]}),
    ])  # fmt: skip
    sweepers, observer = _sweepers(store, RecordingPublisher())

    assert sweepers.lease() == GOOD + 1
    assert {store.get(t).status for t in good} == {S.RETRY_WAIT}
    row = store.get(poison)
    assert (row.status, row.version, row.lease_owner) == (S.FAILED, 4, None)
    assert _letter(store, poison).startswith("the lease sweeper could not move this row: ")
    assert row.last_error is not None and "lease sweeper" in row.last_error
    dead = [e for e in store.events(poison) if e.type == "dead_lettered"]
    assert [(e.from_status, e.to_status, e.data["step"]) for e in dead] == [
        ("RUNNING", "FAILED", "RUNNING")  # a replay resumes it in RUNNING
    ]
    assert observer.dead_letters == 1
    assert sweepers.lease() == 0


# -- sweepers that publish what they took: a row whose message is refused -------------------


def _due_rows(kind: str, tenant: str, now: datetime, n: int) -> list[dict[str, Any]]:
    past = now - timedelta(seconds=30)
    if kind == "dispatch":
        return [_row(tenant, now, S.RUNNING) for _ in range(n)]
    if kind == "retry":
        return [_row(tenant, now, S.RETRY_WAIT, next_attempt_at=past) for _ in range(n)]
    if kind == "unknown":
        return [_row(tenant, now, S.EXEC_UNKNOWN, next_attempt_at=past) for _ in range(n)]
    if kind == "approvals":
        return [_row(tenant, now, S.APPROVAL_WAIT, next_attempt_at=past) for _ in range(n)]
    assert kind == "held"
    # Deferred right at its last transition and held 30 s since: due under the deferred
    # backoff (it waits as long as it has been deferring, at least 2 s).
    return [
        _row(
            tenant,
            now,
            S.RUNNING,
            held_since=past,
            updated_at=past,
            held_for=HoldReason.DEFERRED.value,
        )
        for _ in range(n)
    ]


# Where each kind's poison row goes: the table's way out for its status.
_SET_ASIDE_TO = {
    "dispatch": S.FAILED, "retry": S.FAILED, "unknown": S.ESCALATED, "approvals": S.FAILED,
    "held": S.FAILED,
}  # fmt: skip


@pytest.mark.parametrize("kind", list(_SET_ASIDE_TO))
def test_a_row_whose_step_message_is_refused_is_dead_lettered_and_the_rest_go_out(
    store: Store, tenant: str, kind: str
) -> None:
    now = store.db_now()
    *good, poison = _seed(store, _due_rows(kind, tenant, now, GOOD + 1))
    publisher = Refusing(poison)
    sweepers, observer = _sweepers(store, publisher)

    assert sweepers.run(kind) == GOOD + 1
    assert _published(publisher) == set(good)
    assert {store.get(t).status for t in good} == {S(_due_rows(kind, tenant, now, 1)[0]["status"])}
    row = store.get(poison)
    assert row.status is _SET_ASIDE_TO[kind] and row.lease_owner is None
    assert _letter(store, poison) == (
        f"the {kind} sweeper could not move this row: its step message could not be "
        f"published: ValueError: no queue for tenant of {poison}"
    )
    assert observer.dead_letters == 1
    # Not met again: its status left what this sweeper takes.
    publisher.queue.clear()
    _due_again(store, good)
    sweepers.run(kind)
    assert poison not in _published(publisher)


def _due_again(store: Store, task_ids: list[str]) -> None:
    """Make the good rows due again (their dispatch an hour old), as a later sweep finds them."""
    an_hour_ago = store.db_now() - timedelta(hours=1)
    with store.tx() as conn:
        conn.execute(
            update(tasks).where(tasks.c.id.in_(task_ids)).values(dispatched_at=an_hour_ago)
        )


def test_when_no_message_goes_out_the_broker_is_at_fault_and_no_row_is_dead_lettered(
    store: Store, tenant: str
) -> None:
    """A broker that refuses every message is not a poison row: the rows keep their dispatch
    record (the sweeper repeats them after the grace) and nothing is dead-lettered."""
    now = store.db_now()
    ids = _seed(store, _due_rows("dispatch", tenant, now, GOOD))

    class Down(RecordingPublisher):
        def publish(self, dispatch: Dispatch) -> None:
            raise RuntimeError("broker refuses everything")

    sweepers, observer = _sweepers(store, Down())
    assert sweepers.dispatch() == GOOD
    assert {store.get(t).status for t in ids} == {S.RUNNING}
    assert count(store, dead_letters) == 0 and observer.dead_letters == 0


def test_expired_approvals_sweeper_dead_letters_a_row_whose_wake_up_is_refused(
    store: Store, tenant: str
) -> None:
    """The approvals sweeper's other half: approvals past their expiry wake their tasks."""
    now = store.db_now()
    rows = [_row(tenant, now, S.APPROVAL_WAIT, next_attempt_at=now + timedelta(hours=1))
            for _ in range(GOOD + 1)]  # fmt: skip
    *good, poison = _seed(store, rows)
    with store.tx() as conn:
        for task_id in [*good, poison]:
            conn.execute(insert(approvals).values(
                id=f"apr_{task_id}", task_id=task_id, tenant_id=tenant, tool="t", tool_version="1",
                args={}, action_hash="sha256:x", policy_version="P@1", requester="svc",
                requester_principal="svc", status="pending", reason="r",
                created_at=now - timedelta(hours=1), expires_at=now - timedelta(seconds=1),
            ))  # fmt: skip
    publisher = Refusing(poison)
    sweepers, observer = _sweepers(store, publisher)

    sweepers.approvals()
    assert _published(publisher) == set(good)
    assert store.get(poison).status is S.FAILED
    assert "step message could not be published" in _letter(store, poison)
    assert observer.dead_letters == 1


# -- the archive sweeper: a task whose record the writer refuses -----------------------------


def test_archive_sweeper_keeps_and_dead_letters_a_task_it_cannot_archive(
    store: Store, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = store.db_now()
    old = now - timedelta(days=3)
    rows = [_row(tenant, now, S.COMPLETED, created_at=old, updated_at=old)
            for _ in range(GOOD + 1)]  # fmt: skip
    *good, poison = _seed(store, rows)
    archived: list[str] = []

    def write(records: list[dict[str, Any]]) -> None:
        if any(r["task"]["id"] == poison for r in records):
            raise TypeError("cannot encode this task's record")
        archived.extend(r["task"]["id"] for r in records)

    monkeypatch.setattr(sweepers_module, "writer_for", lambda directory: write)
    sweepers, observer = _sweepers(store, RecordingPublisher())

    assert sweepers.archive() == GOOD
    assert sorted(archived) == sorted(good)
    assert count(store, tasks, tenant_id=tenant) == 1  # only the poison row is left
    row = store.get(poison)
    assert row.status is S.COMPLETED and row.updated_at > old  # retention restarted
    assert _letter(store, poison) == (
        "the archive sweeper could not move this row: its archive record was refused: "
        "TypeError: cannot encode this task's record"
    )
    assert event_types(store, poison)[-1] == SET_ASIDE_EVENT
    assert observer.dead_letters == 1
    assert sweepers.archive() == 0  # not met again


def test_archive_sweeper_raises_when_the_writer_refuses_everything(
    store: Store, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that takes nothing (a full disk) is not a poison row: nothing is deleted and
    nothing dead-lettered; the sweep fails as before and runs again later."""
    now = store.db_now()
    old = now - timedelta(days=3)
    _seed(store, [_row(tenant, now, S.COMPLETED, created_at=old, updated_at=old)
                  for _ in range(GOOD)])  # fmt: skip

    def write(records: list[dict[str, Any]]) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr(sweepers_module, "writer_for", lambda directory: write)
    sweepers, observer = _sweepers(store, RecordingPublisher())
    with pytest.raises(OSError, match="no space"):
        sweepers.archive()
    assert count(store, tasks, tenant_id=tenant) == GOOD
    assert count(store, dead_letters) == 0 and observer.dead_letters == 0
