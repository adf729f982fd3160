"""Invariant 10: sweepers are idempotent, safe to run twice at once, and cost what is due (partial
indexes); invariant 5: the broker-lost mark re-dispatches what the broker forgot.
Runs on SQLite and Postgres (the EXPLAIN checks read each backend's own plan format)."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import pytest
from sqlalchemy import (
    ColumnElement,
    Connection,
    String,
    cast,
    event,
    insert,
    literal,
    literal_column,
    null,
    select,
)

from agent_jobs.core.states import Status
from agent_jobs.orchestrator.steps import lease_lost, worker_lost
from agent_jobs.orchestrator.sweepers import KINDS, Sweepers
from agent_jobs.store import Store
from agent_jobs.store import sweeps as sweep_sql
from agent_jobs.store.backend import Backend
from agent_jobs.store.guard import Guard
from agent_jobs.store.schema import approvals, effects, tasks
from agent_jobs.store.types import db_now_plus
from agent_jobs.testing import TEST_SETTINGS, LostBroker, RecordingPublisher
from tests.contract.support import (
    OTHER,
    S,
    action,
    claim,
    new_task,
    running,
    runtime_state,
    shift,
    to,
)


def lost_lease_patch(task: Any) -> Any:
    return lease_lost(task, by="sweeper")


def worker_lost_patch(task: Any) -> Any:
    return worker_lost(task, TEST_SETTINGS, 0.5)


PER_KIND = 150  # due tasks of each of the seven kinds below: 1,050 in all
# Many small batches: the sweepers interleave. A lapsed lease's retry is not due within the test.
SETTINGS = TEST_SETTINGS.with_overrides(sweep_batch=25, retry_base_s=60.0, retry_max_s=300.0)


@dataclass
class Seeded:
    due: dict[str, list[str]]
    not_due: list[str]

    def kind_of(self, task_id: str) -> str:
        return next((k for k, ids in self.due.items() if task_id in ids), "not_due")

    @property
    def all_due(self) -> list[str]:
        return [task_id for ids in self.due.values() for task_id in ids]


def _task(tenant: str, now: datetime, status: Status, **kw: Any) -> dict[str, Any]:
    task_id = f"tsk_{uuid.uuid4().hex}"
    row: dict[str, Any] = {
        "id": task_id,
        "tenant_id": tenant,
        "idempotency_key": task_id,
        "payload_hash": "sha256:" + "0" * 64,
        "workflow": "example@1",
        "requester": "svc:seed",
        "input": {},
        "pinned": {},
        "status": status.value,
        "version": 3,
        "lease_owner": None,
        "lease_expires_at": None,
        "lease_epoch": 1,
        "next_attempt_at": None,
        "dispatched_at": now - timedelta(hours=1),
        "attempts": 0,
        "cancel_requested_at": None,
        "state": {},
        "outcome": None,
        "event_seq": 3,
        "trace_id": uuid.uuid4().hex,
        "created_at": now - timedelta(hours=2),
        "updated_at": now - timedelta(hours=1),
    }
    row.update(kw)
    return row


def seed(store: Store, tenant: str, per_kind: int, finished: int = 0) -> Seeded:
    """Rows as the orchestrator leaves them, with their clocks already run out (written in SQL,
    relative to the database's now): no sleeping."""
    now = store.db_now()
    past, future = now - timedelta(seconds=30), now + timedelta(hours=1)
    act = action()
    rows: dict[str, list[dict[str, Any]]] = {
        # A worker died holding the lease of a RUNNING task.
        "lease": [
            _task(tenant, now, S.RUNNING, lease_owner="dead:1", lease_expires_at=past)
            for _ in range(per_kind)
        ],
        # ...or of an EXECUTING one, whose call may have been sent. These lapsed first, so both
        # sweepers reach them first: without row locks they would fight over the same rows.
        "lease_effect": [
            _task(
                tenant,
                now,
                S.EXECUTING,
                lease_owner="dead:1",
                lease_expires_at=past - timedelta(seconds=30),
                state=runtime_state(act),
            )
            for _ in range(per_kind)
        ],
        # Committed, then the worker died before publishing (or the broker lost the message).
        "dispatch": [
            _task(tenant, now, status)
            for i in range(per_kind)
            for status in [(S.RECEIVED, S.RUNNING, S.VERIFYING)[i % 3]]
        ],
        "retry": [_task(tenant, now, S.RETRY_WAIT, next_attempt_at=past) for _ in range(per_kind)],
        "unknown": [
            _task(tenant, now, S.EXEC_UNKNOWN, next_attempt_at=past, state=runtime_state(act))
            for _ in range(per_kind)
        ],
        # Parked for a human who never answered: approval and timer ran out together.
        "approval": [
            _task(tenant, now, S.APPROVAL_WAIT, next_attempt_at=past) for _ in range(per_kind)
        ],
        # Woken by a decision whose step message was lost with the broker... long ago.
        "approval_woken": [
            _task(
                tenant,
                now,
                S.APPROVAL_WAIT,
                next_attempt_at=now - timedelta(hours=2),
                dispatched_at=now - timedelta(hours=2),
            )
            for _ in range(per_kind)
        ],
    }
    quiet = [
        _task(tenant, now, S.RUNNING, lease_owner="alive:1", lease_expires_at=future),
        _task(tenant, now, S.EXECUTING, lease_owner="alive:1", lease_expires_at=future),
        _task(tenant, now, S.RUNNING, dispatched_at=now - timedelta(seconds=5)),
        _task(tenant, now, S.RETRY_WAIT, next_attempt_at=future),
        _task(tenant, now, S.EXEC_UNKNOWN, next_attempt_at=future),
        _task(tenant, now, S.APPROVAL_WAIT, next_attempt_at=future),
        _task(tenant, now, S.COMPLETED),
        _task(tenant, now, S.FAILED, lease_expires_at=None),
    ]
    done = [_task(tenant, now, S.COMPLETED, dispatched_at=None) for _ in range(finished)]
    effect_rows = [
        _effect(r["id"], act.idempotency_key, act.tool, act.action_hash, now)
        for r in rows["lease_effect"] + rows["unknown"]
    ]
    approval_rows = [
        _approval(r["id"], tenant, now, expires_at=past, status="pending") for r in rows["approval"]
    ]
    approval_rows.append(_approval(quiet[5]["id"], tenant, now, expires_at=future))
    approval_rows += [_approval(r["id"], tenant, now, expires_at=past, status="used") for r in done]
    with store.tx() as conn:
        everything = [r for rs in rows.values() for r in rs] + quiet + done
        for i in range(0, len(everything), 2000):
            conn.execute(insert(tasks), everything[i : i + 2000])
        conn.execute(insert(effects), effect_rows)
        for i in range(0, len(approval_rows), 2000):
            conn.execute(insert(approvals), approval_rows[i : i + 2000])
    return Seeded(
        due={kind: [r["id"] for r in rs] for kind, rs in rows.items()},
        not_due=[r["id"] for r in quiet],
    )


def _effect(task_id: str, key: str, tool: str, ahash: str, now: datetime) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "idempotency_key": key,
        "tool": tool,
        "tool_version": "2",
        "action_hash": ahash,
        "status": "intent",
        "attempts": 1,
        "result": None,
        "created_at": now,
        "updated_at": now,
    }


def _approval(
    task_id: str, tenant: str, now: datetime, *, expires_at: datetime, status: str = "pending"
) -> dict[str, Any]:
    act = action()
    return {
        "id": f"apr_{uuid.uuid4().hex}",
        "task_id": task_id,
        "tenant_id": tenant,
        "tool": act.tool,
        "tool_version": act.tool_version,
        "args": act.args,
        "action_hash": act.action_hash,
        "policy_version": "refund-policy@7",
        "requester": "agent:planner",
        "approver": None,
        "status": status,
        "reason": "seeded",
        "created_at": now - timedelta(hours=1),
        "expires_at": expires_at,
        "decided_at": None,
        "used_at": None,
    }


def url_of(store: Store) -> str:
    return store.engine.url.render_as_string(hide_password=False)


@pytest.fixture
def twin(store: Store) -> Iterator[Store]:
    """A second Store on the same database: another beat process, with its own pool."""
    other = Store.from_url(url_of(store))
    yield other
    other.dispose()


def run_concurrently(*jobs: Callable[[], object]) -> None:
    gate = threading.Barrier(len(jobs))
    errors: list[BaseException] = []

    def run(job: Callable[[], object]) -> None:
        gate.wait()
        try:
            job()
        except BaseException as exc:  # re-raised in the test thread below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def published(*publishers: RecordingPublisher) -> Counter[str]:
    return Counter(d.task_id for p in publishers for d in p.published)


@pytest.mark.parametrize("mode", ["all_at_once", "kind_by_kind"])
def test_two_sweepers_at_once_dispatch_every_due_task_exactly_once(
    store: Store, twin: Store, tenant: str, mode: str
) -> None:
    """Invariant 10: two beats by mistake. Together they publish each due task once, and
    nothing else; the row locks (SKIP LOCKED on Postgres, the single writer on SQLite) split
    the work."""
    seeded = seed(store, tenant, PER_KIND)
    pub_a, pub_b = RecordingPublisher(), RecordingPublisher()
    a = Sweepers(store, pub_a, SETTINGS, LostBroker())
    b = Sweepers(twin, pub_b, SETTINGS, LostBroker())
    if mode == "all_at_once":
        run_concurrently(a.all, b.all)
    else:
        for kind in KINDS:
            run_concurrently(partial(a.run, kind), partial(b.run, kind))
    counts = published(pub_a, pub_b)
    twice = Counter(seeded.kind_of(t) for t, n in counts.items() if n > 1)
    assert not twice, f"tasks published more than once, by kind: {dict(twice)}"
    # A lapsed lease off EXECUTING is a failed attempt waiting out its backoff: not published.
    assert set(counts) == set(seeded.all_due) - set(seeded.due["lease"])
    assert not set(counts) & set(seeded.not_due)
    # Both did some of the work on Postgres (on SQLite one may win every lock race).
    if store.backend.name == "postgresql":
        assert pub_a.published and pub_b.published
    # Every EXECUTING task with a lapsed lease went to EXEC_UNKNOWN exactly once (invariant 4).
    for task_id in seeded.due["lease_effect"]:
        row = store.get(task_id)
        assert (row.status, row.version) == (S.EXEC_UNKNOWN, 4)
        assert [e.type for e in store.events(task_id)] == ["lease_lost_during_effect"]
    for task_id in seeded.due["lease"]:  # each counted once, whichever sweeper took it
        row = store.get(task_id)
        assert (row.status, row.version, row.attempts) == (S.RETRY_WAIT, 4, 1)
        assert row.lease_owner is None and row.next_attempt_at is not None
    for task_id in seeded.due["lease"][:10]:
        assert [e.type for e in store.events(task_id)] == ["lease_expired"]
    for task_id in seeded.due["approval"][:10]:
        assert [e.type for e in store.events(task_id)] == ["approval_expired"]
    # Idempotent: a second round, by either or both at once, finds nothing.
    pub_a.published.clear()
    pub_b.published.clear()
    run_concurrently(a.all, b.all)
    assert a.all().total == 0 and b.all().total == 0
    assert not pub_a.published and not pub_b.published


def test_the_broker_lost_mark_redispatches_what_was_sent_before_it(
    store: Store, twin: Store, tenant: str
) -> None:
    """Invariant 5: messages published within the grace period are trusted, until the broker is
    found to have lost them; then everything dispatched before that instant goes out again —
    once — and the mark, kept in the database, tells every other sweeper process too."""
    sent = [new_task(store, tenant).id for _ in range(4)]
    for task_id in sent:  # dispatched a few seconds ago: well inside the 60 s grace period
        shift(store, tasks, task_id, dispatched_at=-5.0)
    leased = running(store, tenant)  # owned by a live worker: not the broker's business
    retry = running(store, tenant)
    store.transition(Guard.lease(retry), to(S.RETRY_WAIT, "transient_error", wake_in_s=600.0))
    shift(store, tasks, retry.task_id, next_attempt_at=-10.0, dispatched_at=-5.0)
    pub_a, pub_b = RecordingPublisher(), RecordingPublisher()
    probe = LostBroker()
    a = Sweepers(store, pub_a, SETTINGS, probe)
    b = Sweepers(twin, pub_b, SETTINGS, LostBroker())
    assert a.dispatch() == 0 and a.retry() == 0 and b.dispatch() == 0

    probe.lost = True
    assert a.retry() == 1  # this sweep noticed the loss and recorded the mark
    assert [d.task_id for d in pub_a.published] == [retry.task_id]
    after = new_task(store, tenant).id  # dispatched after the loss: its message is fine
    assert b.dispatch() == len(sent)  # another process honours the mark from the database
    assert sorted(d.task_id for d in pub_b.published) == sorted(sent)
    assert after not in published(pub_a, pub_b) and leased.task_id not in published(pub_a, pub_b)
    assert a.dispatch() == 0 and b.dispatch() == 0 and a.retry() == 0


def test_lease_sweep_of_an_owned_task_is_fenced_against_the_old_owner(
    store: Store, tenant: str
) -> None:
    """Invariants 2 and 10: the lease sweeper frees the task without a new epoch; the next
    claim mints one."""
    lease = running(store, tenant)
    shift(store, tasks, lease.task_id, lease_expires_at=-1.0)
    out = store.sweep_expired_leases(10, worker_lost_patch)
    assert out == []  # a failed attempt: parked until its backoff is over
    row = store.get(lease.task_id)
    assert row.lease_owner is None and row.lease_epoch == lease.epoch
    assert (row.status, row.attempts) == (S.RETRY_WAIT, 1)
    shift(store, tasks, lease.task_id, next_attempt_at=-1.0)  # its backoff is over
    assert claim(store, lease.task_id, OTHER).epoch == lease.epoch + 1


# -- cost grows with what is due: each sweeper query reads its partial index ----------------

SWEEP_QUERIES: dict[str, tuple[str, Callable[[Backend, Connection, datetime], object]]] = {
    "lease": (
        "ix_tasks_lease_expiry",
        lambda b, c, cut: sweep_sql.expired_leases(b, c, 50, worker_lost_patch),
    ),
    "dispatch": ("ix_tasks_dispatch", lambda b, c, cut: sweep_sql.lost_dispatch(b, c, 50, cut)),
    "retry": (
        "ix_tasks_retry_due",
        lambda b, c, cut: sweep_sql.due_timers(b, c, Status.RETRY_WAIT, 50, cut),
    ),
    "unknown": (
        "ix_tasks_unknown_due",
        lambda b, c, cut: sweep_sql.due_timers(b, c, Status.EXEC_UNKNOWN, 50, cut),
    ),
    "approval_due": (
        "ix_tasks_approval_due",
        lambda b, c, cut: sweep_sql.due_timers(b, c, Status.APPROVAL_WAIT, 50, cut),
    ),
    "approvals": (
        "ix_approvals_open_expiry",
        lambda b, c, cut: sweep_sql.expired_approvals(b, c, 50),
    ),
}


def first_statement(
    store: Store, run: Callable[[Backend, Connection, datetime], object], cutoff: datetime
) -> tuple[str, Any]:
    """The sweeper's selecting statement, as sent to the database (run, then rolled back)."""
    seen: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, *args: Any) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "UPDATE")):
            seen.append((statement, parameters))

    with store.engine.connect() as conn:
        event.listen(store.engine, "before_cursor_execute", capture)
        try:
            run(store.backend, conn, cutoff)
        finally:
            event.remove(store.engine, "before_cursor_execute", capture)
            conn.rollback()
    return seen[0]


def plan(store: Store, statement: str, parameters: Any) -> str:
    with store.engine.connect() as conn:
        if store.backend.name == "postgresql":
            rows = conn.exec_driver_sql("EXPLAIN " + statement, parameters).all()
            text = "\n".join(r[0] for r in rows)
        else:
            rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, parameters).all()
            text = "\n".join(str(r[-1]) for r in rows)
        conn.rollback()
    return text


def bulk(
    conn: Connection, tenant: str, prefix: str, n: int, status: Status, **times: float | None
) -> None:
    """Insert `n` tasks in one INSERT ... SELECT over a recursive counter (fast on both
    backends); `times` sets timestamp columns to the database's now plus that many seconds."""
    series = select(literal(1).label("i")).cte("series", recursive=True)
    series = series.union_all(select(series.c.i + 1).where(series.c.i < n))
    ident = literal(prefix) + cast(series.c.i, String)
    empty: ColumnElement[Any] = literal_column(
        "'{}'::jsonb" if conn.dialect.name == "postgresql" else "'{}'"
    )
    stamps = {"dispatched_at": -3600.0, "created_at": -7200.0, "updated_at": -3600.0, **times}
    values: dict[str, Any] = {
        "id": ident,
        "tenant_id": literal(tenant),
        "idempotency_key": ident,
        "payload_hash": literal("sha256:0"),
        "workflow": literal("example@1"),
        "requester": literal("svc:seed"),
        "input": empty,
        "pinned": empty,
        "status": literal(status.value),
        "version": literal(3),
        "lease_owner": literal("alive:1") if times.get("lease_expires_at") else null(),
        "lease_expires_at": null(),
        "lease_epoch": literal(1),
        "next_attempt_at": null(),
        "attempts": literal(0),
        "cancel_requested_at": null(),
        "state": empty,
        "outcome": null(),
        "event_seq": literal(3),
        "trace_id": literal("0" * 32),
    }
    for column, seconds in stamps.items():
        values[column] = null() if seconds is None else db_now_plus(seconds)
    conn.execute(
        insert(tasks).from_select(list(values), select(*values.values()).select_from(series))
    )


def bulk_approvals(conn: Connection, prefix: str, status: str, expires_in_s: float) -> None:
    """One approval per task whose id starts with `prefix`."""
    act = action()
    source = select(
        literal("apr_") + tasks.c.id,
        tasks.c.id,
        tasks.c.tenant_id,
        literal(act.tool),
        literal(act.tool_version),
        tasks.c.input,
        literal(act.action_hash),
        literal("refund-policy@7"),
        literal("agent:planner"),
        literal("agent:planner"),  # requester_principal
        literal(status),
        literal("seeded"),
        db_now_plus(-3600.0),
        db_now_plus(expires_in_s),
    ).where(tasks.c.id.like(prefix + "%"))
    conn.execute(
        insert(approvals).from_select(
            [
                "id",
                "task_id",
                "tenant_id",
                "tool",
                "tool_version",
                "args",
                "action_hash",
                "policy_version",
                "requester",
                "requester_principal",
                "status",
                "reason",
                "created_at",
                "expires_at",
            ],
            source,
        )
    )


def test_every_sweeper_query_reads_its_partial_index(store: Store, tenant: str) -> None:
    """Invariant 10: 20k finished rows, 7k live ones that are not due, a handful due: each
    sweeper's plan must go through the partial index of what it looks for (a sweep costs what
    is due, not what the table holds, nor what is merely active), not scan the table or the
    active-tenant index."""
    with store.tx() as conn:
        bulk(conn, tenant, "tsk_done_", 20_000, S.COMPLETED, dispatched_at=None)
        bulk_approvals(conn, "tsk_done_", "used", -3600.0)
        bulk(conn, tenant, "tsk_live_", 2_000, S.RUNNING, lease_expires_at=600.0)
        bulk(conn, tenant, "tsk_sent_", 1_000, S.RUNNING, dispatched_at=-1.0)
        bulk(conn, tenant, "tsk_retry_", 2_000, S.RETRY_WAIT, next_attempt_at=600.0)
        bulk(conn, tenant, "tsk_unknown_", 1_000, S.EXEC_UNKNOWN, next_attempt_at=600.0)
        bulk(conn, tenant, "tsk_human_", 1_000, S.APPROVAL_WAIT, next_attempt_at=600.0)
        bulk_approvals(conn, "tsk_human_", "pending", 600.0)
    seed(store, tenant, per_kind=5)
    with store.tx() as conn:
        conn.exec_driver_sql("ANALYZE")
    assert store.list_tasks(tenant, limit=1)  # the seeding really wrote rows
    cutoff = store.db_now() - timedelta(seconds=60)
    failures = []
    for name, (index, run) in SWEEP_QUERIES.items():
        statement, parameters = first_statement(store, run, cutoff)
        text = plan(store, statement, parameters)
        if index not in text:
            failures.append(f"{name}: expected {index}\n{text}")
        if " WHERE " not in index_definition(store, index).upper():
            failures.append(f"{name}: {index} is not a partial index")
    assert not failures, "\n\n".join(failures)


def index_definition(store: Store, name: str) -> str:
    query = (
        "SELECT indexdef FROM pg_indexes WHERE indexname = %(n)s"
        if store.backend.name == "postgresql"
        else "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = :n"
    )
    with store.engine.connect() as conn:
        found = conn.exec_driver_sql(query, {"n": name}).scalar_one_or_none()
        conn.rollback()
    return str(found or "")
