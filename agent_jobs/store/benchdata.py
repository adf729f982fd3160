"""Data for benchmarks: the hand-built floor the transitions benchmark compares against, bulk
seeding of finished and due tasks for the sweep benchmark, and of finished tasks with their
events (history) for the history benchmark. Not used by the runtime."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    Column,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    bindparam,
    delete,
    func,
    insert,
    literal,
    select,
    text,
    update,
)
from sqlalchemy import Table as _Table

from agent_jobs.core.states import Status
from agent_jobs.store.backend.postgres_seed import HISTORY_DAYS
from agent_jobs.store.schema import approvals, tasks
from agent_jobs.store.store import Store
from agent_jobs.store.types import JsonType, UTCDateTime, db_now, db_now_plus

floor_metadata = MetaData()
floor_chains = _Table(
    "bench_floor_chains",
    floor_metadata,
    Column("id", String(40), primary_key=True),
    Column("tenant_id", String(63), nullable=False),
    Column("version", Integer, nullable=False),
    Column("remaining", Integer, nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
)
floor_events = _Table(
    "bench_floor_events",
    floor_metadata,
    Column("chain_id", String(40), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("at", UTCDateTime(), nullable=False),
    PrimaryKeyConstraint("chain_id", "seq"),
)


# Built once, like the runtime's own hot-path statements: the floor must be as lean as ours.
_FLOOR_SELECT = select(
    floor_chains.c.version, floor_chains.c.remaining, floor_chains.c.tenant_id
).where(floor_chains.c.id == bindparam("p_id"))
_FLOOR_CAS = (
    update(floor_chains)
    .where(
        (floor_chains.c.id == bindparam("p_id"))
        & (floor_chains.c.version == bindparam("p_version"))
    )
    .values(
        version=floor_chains.c.version + 1,
        remaining=floor_chains.c.remaining - 1,
        updated_at=db_now(),
    )
)
_FLOOR_EVENT = insert(floor_events).values(
    chain_id=bindparam("p_id"), seq=bindparam("p_seq"), at=db_now()
)


class Floor:
    """A plain Celery task chain that does what a transition must do at the least: one SELECT,
    one compare-and-set UPDATE and one event INSERT in a transaction, then the next publish."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def setup(self) -> None:
        floor_metadata.create_all(self.store.engine)
        with self.store.engine.begin() as conn:
            conn.execute(floor_events.delete())
            conn.execute(floor_chains.delete())

    def create(self, chains: list[tuple[str, str]], hops: int) -> None:
        with self.store.engine.begin() as conn:
            now = conn.execute(select(db_now())).scalar_one()
            conn.execute(
                insert(floor_chains),
                [
                    {"id": c, "tenant_id": t, "version": 0, "remaining": hops, "updated_at": now}
                    for c, t in chains
                ],
            )

    def hop(self, chain_id: str) -> tuple[str, int] | None:
        """One hop; returns (tenant, remaining) or None if the CAS lost (a duplicate delivery)."""
        with self.store.engine.begin() as conn:
            row = conn.execute(_FLOOR_SELECT, {"p_id": chain_id}).first()
            if row is None:
                return None
            version, remaining, tenant = row
            done = conn.execute(_FLOOR_CAS, {"p_id": chain_id, "p_version": version}).rowcount
            if not done:
                return None
            conn.execute(_FLOOR_EVENT, {"p_id": chain_id, "p_seq": version + 1})
        return str(tenant), int(remaining) - 1

    def hops_done(self) -> int:
        with self.store.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(floor_events)).scalar_one())


def seed_finished(store: Store, start: int, count: int) -> None:
    """Insert `count` COMPLETED tasks in bulk (`tsk_fin_<start>` on), by the backend's own
    bulk insert. Long by design: no statement timeout."""
    with store.engine.begin() as conn, store.backend.lifted_timeouts(conn):
        store.backend.seed_finished(conn, start, count)


DUE_KINDS = ("lease", "dispatch", "retry", "unknown", "approvals")
DUE_TENANT = "bench-due"


def seed_due(store: Store, per_kind: int) -> None:
    """`per_kind` tasks that each sweeper will find due (tasks `tsk_due_<kind>_<n>`), as
    seeded: called again before every timed sweep, it puts them back, whatever the sweeps
    before did to them.

    Re-seeded, not only made due again: a sweep moves some of them (a lapsed lease is a failed
    attempt: RUNNING, then RETRY_WAIT, and after `max_attempts` sweeps FAILED). Rewriting only
    their clocks gave a FAILED task a lapsed lease, which no runtime path leaves (a terminal
    commit releases the lease), and the lease sweeper met a row it could not move."""
    status_of = {
        "lease": Status.RUNNING, "dispatch": Status.RUNNING, "retry": Status.RETRY_WAIT,
        "unknown": Status.EXEC_UNKNOWN, "approvals": Status.APPROVAL_WAIT,
    }  # fmt: skip
    rows: list[dict[str, Any]] = [
        {
            "id": f"tsk_due_{kind}_{n}", "tenant_id": DUE_TENANT, "idempotency_key": f"tsk_due_{kind}_{n}",
            "payload_hash": "sha256:x", "workflow": "noop@1", "requester": "bench", "input": {},
            "pinned": {}, "status": status_of[kind].value, "version": 2, "lease_epoch": 1,
            "attempts": 0, "state": {}, "event_seq": 2, "trace_id": "x",
        }
        for kind in DUE_KINDS
        for n in range(per_kind)
    ]  # fmt: skip
    with store.engine.begin() as conn:
        # Their events, approvals and dead letters go with them (the foreign keys cascade).
        conn.execute(delete(tasks).where(tasks.c.tenant_id == DUE_TENANT))
        if not rows:
            return
        conn.execute(insert(tasks).values(created_at=db_now(), updated_at=db_now()), rows)
        picked = select(
            literal("apr_") + tasks.c.id, tasks.c.id, literal(DUE_TENANT), literal("t"),
            literal("1"), literal({}, JsonType), literal("sha256:x"), literal("P@1"),
            literal("bench"), literal("bench"), literal("pending"), literal("bench"),
            db_now(), db_now_plus(-1),
        ).where(tasks.c.id.like("tsk_due_approvals_%"))  # fmt: skip
        names = [
            "id", "task_id", "tenant_id", "tool", "tool_version", "args", "action_hash",
            "policy_version", "requester", "requester_principal", "status", "reason",
            "created_at", "expires_at",
        ]  # fmt: skip
        conn.execute(insert(approvals).from_select(names, picked))
        # Their clocks run out: each sweeper finds its kind due.
        due = tasks.c.id.like
        conn.execute(
            update(tasks)
            .where(due("tsk_due_lease_%"))
            .values(lease_owner="dead", lease_expires_at=db_now_plus(-10))
        )
        conn.execute(
            update(tasks).where(due("tsk_due_dispatch_%")).values(dispatched_at=db_now_plus(-3600))
        )
        conn.execute(
            update(tasks)
            .where(due("tsk_due_retry_%") | due("tsk_due_unknown_%") | due("tsk_due_approvals_%"))
            .values(next_attempt_at=db_now_plus(-1), dispatched_at=db_now_plus(-3600))
        )


HISTORY_TENANTS = 50


def seed_history(
    store: Store,
    tasks: int,
    events_per_task: int,
    *,
    tenants: int = HISTORY_TENANTS,
    tenant_prefix: str = "bench",
    batch_rows: int = 1_000_000,
    on_batch: Callable[[int, int], None] | None = None,
) -> None:
    """Insert `tasks` finished tasks (90% COMPLETED, 7% FAILED, 3% CANCELLED) over the tenants
    `<tenant_prefix>0..<tenants - 1>`, each with `events_per_task` events: the history that
    production holds before the archive sweeper prunes it. Postgres only (generate_series).

    One transaction per batch of about `batch_rows` rows (tasks and events), with every index
    and foreign key in place, as production writes them; `on_batch(tasks_done, rows_done)` after
    each. Run ANALYZE (or VACUUM ANALYZE) afterwards."""
    if events_per_task < 1:
        raise ValueError("every task has at least its 'created' event")
    per_batch = max(1, batch_rows // (1 + events_per_task))
    with store.engine.connect() as conn:
        anchor = conn.execute(text("SELECT now()")).scalar_one()
    spacing = HISTORY_DAYS * 86400 / max(1, tasks)
    done = 0
    while done < tasks:
        n = min(per_batch, tasks - done)
        values = {
            "anchor": anchor, "total": tasks, "spacing": spacing, "start": done,
            "stop": done + n - 1, "tenants": tenants, "tenant_prefix": tenant_prefix,
            "events": events_per_task,
        }  # fmt: skip
        with store.engine.begin() as conn, store.backend.lifted_timeouts(conn):
            store.backend.seed_history(conn, values)
        done += n
        if on_batch is not None:
            on_batch(done, done * (1 + events_per_task))
