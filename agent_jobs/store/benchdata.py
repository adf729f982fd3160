"""Data for benchmarks: the hand-built floor the transitions benchmark compares against, bulk
seeding of finished and due tasks for the sweep benchmark, and of finished tasks with their
events (history) for the history benchmark. Not used by the runtime."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import (
    Column,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    bindparam,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy import Table as _Table

from agent_jobs.core.states import Status
from agent_jobs.store.engine import lifted_timeouts
from agent_jobs.store.store import Store
from agent_jobs.store.types import UTCDateTime, db_now

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


_SEED_COLUMNS = (
    "id, tenant_id, idempotency_key, payload_hash, workflow, requester, input, pinned, status, "
    "version, lease_owner, lease_expires_at, lease_epoch, next_attempt_at, dispatched_at, attempts, "
    "cancel_requested_at, state, outcome, event_seq, trace_id, created_at, updated_at"
)


def seed_finished(store: Store, start: int, count: int) -> None:
    """Insert `count` COMPLETED tasks in bulk (Postgres: generate_series; SQLite: a CTE)."""
    if store.dialect == "postgresql":
        sql = f"""
            INSERT INTO tasks ({_SEED_COLUMNS})
            SELECT 'tsk_fin_' || g, 'bench-t' || (g % 50), 'fin-' || g, 'sha256:x', 'noop@1', 'bench',
                   '{{}}'::jsonb, '{{}}'::jsonb, 'COMPLETED', 4, NULL, NULL, 1, NULL,
                   now() - interval '1 day', 0, NULL, '{{}}'::jsonb, '{{}}'::jsonb, 4,
                   md5(g::text), now() - interval '1 day', now() - interval '1 day'
            FROM generate_series(:start, :stop) AS g
        """
    else:
        sql = f"""
            WITH RECURSIVE g(n) AS (SELECT :start UNION ALL SELECT n + 1 FROM g WHERE n < :stop)
            INSERT INTO tasks ({_SEED_COLUMNS})
            SELECT 'tsk_fin_' || n, 'bench-t' || (n % 50), 'fin-' || n, 'sha256:x', 'noop@1', 'bench',
                   '{{}}', '{{}}', 'COMPLETED', 4, NULL, NULL, 1, NULL,
                   '2026-01-01 00:00:00.000000', 0, NULL, '{{}}', '{{}}', 4, hex(n),
                   '2026-01-01 00:00:00.000000', '2026-01-01 00:00:00.000000'
            FROM g
        """
    # Bulk seeding is long by design: no statement timeout.
    with store.engine.begin() as conn, lifted_timeouts(conn):
        conn.execute(text(sql), {"start": start, "stop": start + count - 1})


DUE_KINDS = ("lease", "dispatch", "retry", "unknown", "approvals")


def seed_due(store: Store, per_kind: int) -> None:
    """`per_kind` tasks that each sweeper will find due (tasks `tsk_due_<kind>_<n>`)."""
    rows = []
    for kind in DUE_KINDS:
        status = {
            "lease": Status.RUNNING, "dispatch": Status.RUNNING, "retry": Status.RETRY_WAIT,
            "unknown": Status.EXEC_UNKNOWN, "approvals": Status.APPROVAL_WAIT,
        }[kind]  # fmt: skip
        for n in range(per_kind):
            rows.append(f"('tsk_due_{kind}_{n}', '{status.value}')")
    values = ", ".join(rows)
    now = "now()" if store.dialect == "postgresql" else "strftime('%Y-%m-%d %H:%M:%f000', 'now')"
    json = "'{}'::jsonb" if store.dialect == "postgresql" else "'{}'"
    sql = f"""
        INSERT INTO tasks ({_SEED_COLUMNS})
        SELECT v.id, 'bench-due', v.id, 'sha256:x', 'noop@1', 'bench', {json}, {json}, v.status,
               2, NULL, NULL, 1, NULL, NULL, 0, NULL, {json}, NULL, 2, 'x', {now}, {now}
        FROM (VALUES {values}) AS v(id, status)
    """
    if store.dialect != "postgresql":
        sql = (
            sql.replace("AS v(id, status)", "AS v")
            .replace("v.id", "v.column1")
            .replace("v.status", "v.column2")
        )
    with store.engine.begin() as conn:
        conn.execute(text(sql))
        if per_kind:
            approvals_sql = f"""
                INSERT INTO approvals (id, task_id, tenant_id, tool, tool_version, args, action_hash,
                    policy_version, requester, requester_principal, approver, status, reason,
                    created_at, expires_at, decided_at, used_at)
                SELECT 'apr_' || id, id, 'bench-due', 't', '1', {json}, 'sha256:x', 'P@1', 'bench',
                       'bench', NULL, 'pending', 'bench', {now}, {now}, NULL, NULL
                FROM tasks WHERE id LIKE 'tsk_due_approvals_%'
            """
            conn.execute(text(approvals_sql))
    make_due(store)


def make_due(store: Store) -> None:
    """Rewrite the due tasks' timestamps so that every sweeper finds them due again."""

    def past(seconds: int) -> str:
        if store.dialect == "postgresql":
            return f"now() - interval '{seconds} seconds'"
        return f"strftime('%Y-%m-%d %H:%M:%f000', 'now', '-{seconds} seconds')"

    statements = [
        f"UPDATE tasks SET lease_owner = 'dead', lease_expires_at = {past(10)} "
        "WHERE id LIKE 'tsk_due_lease_%'",
        f"UPDATE tasks SET lease_owner = NULL, lease_expires_at = NULL, dispatched_at = {past(3600)} "
        "WHERE id LIKE 'tsk_due_dispatch_%'",
        f"UPDATE tasks SET next_attempt_at = {past(1)}, dispatched_at = {past(3600)} "
        "WHERE id LIKE 'tsk_due_retry_%' OR id LIKE 'tsk_due_unknown_%' OR id LIKE 'tsk_due_approvals_%'",
        f"UPDATE approvals SET status = 'pending', expires_at = {past(1)} WHERE id LIKE 'apr_tsk_due_%'",
    ]
    with store.engine.begin() as conn:
        for sql in statements:
            conn.execute(text(sql))


HISTORY_REQUESTER = "history"  # marks seeded history, so a bench can tell it from its own tasks
HISTORY_TENANTS = 50
HISTORY_DAYS = 20  # inside the default 30-day retention: what the archive sweeper has not pruned


def _history_id(g: str, created: str) -> str:
    """SQL for a seeded task's id, shaped like `new_id("tsk")` (milliseconds, then 20 hex
    digits): history sorts before the tasks created after it, as in production."""
    return (
        f"'tsk_' || lpad(to_hex((extract(epoch FROM {created}) * 1000)::bigint), 12, '0') "
        f"|| substr(md5({g}::text), 1, 20)"
    )


# A seeded task `g` and when it was created: spread evenly over the last HISTORY_DAYS, oldest
# first, ending an hour before `:anchor` (the seed's start).
_HISTORY_SOURCE = """
    SELECT g, :anchor - interval '1 hour' - make_interval(secs => (:total - g) * :spacing) AS c,
           CASE WHEN g % 100 < 90 THEN 'COMPLETED' WHEN g % 100 < 97 THEN 'FAILED'
                ELSE 'CANCELLED' END AS st
    FROM generate_series(:start, :stop) AS g
"""

_HISTORY_TASKS = f"""
    INSERT INTO tasks ({_SEED_COLUMNS})
    SELECT {_history_id("h.g", "h.c")}, :tenant_prefix || (h.g % :tenants), 'hist-' || h.g,
           'sha256:' || md5(h.g::text), 'noop@1', '{HISTORY_REQUESTER}',
           jsonb_build_object('steps', :events), '{{}}'::jsonb, h.st, :events, NULL, NULL, 1, NULL,
           h.c, 0, CASE WHEN h.st = 'CANCELLED' THEN h.c + interval '1 second' END,
           jsonb_build_object('left', 0), jsonb_build_object('steps', :events), :events,
           md5('trace' || h.g), h.c, h.c + interval '2 seconds'
    FROM ({_HISTORY_SOURCE}) AS h
"""

# `:events` events per task: created, started, observations, draft_ready, then the end.
_HISTORY_EVENTS = f"""
    INSERT INTO task_events (task_id, seq, type, from_status, to_status, data, trace_id, at)
    SELECT {_history_id("h.g", "h.c")}, s,
           CASE WHEN s = 1 THEN 'created' WHEN s = :events THEN lower(h.st)
                WHEN s = 2 THEN 'started' WHEN s = :events - 1 THEN 'draft_ready'
                ELSE 'observed' END,
           CASE WHEN s = 1 THEN NULL WHEN s = :events THEN 'VERIFYING'
                WHEN s = 2 THEN 'RECEIVED' ELSE 'RUNNING' END,
           CASE WHEN s = 1 THEN 'RECEIVED' WHEN s = :events THEN h.st
                WHEN s = :events - 1 THEN 'VERIFYING' ELSE 'RUNNING' END,
           CASE WHEN s > 2 AND s < :events - 1 THEN '{{"note": "noop"}}'::jsonb
                ELSE '{{}}'::jsonb END,
           md5('trace' || h.g), h.c + make_interval(secs => s * 0.2)
    FROM ({_HISTORY_SOURCE}) AS h CROSS JOIN generate_series(1, :events) AS s
"""


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
    if store.dialect != "postgresql":
        raise ValueError("seed_history needs Postgres")
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
        with store.engine.begin() as conn, lifted_timeouts(conn):
            conn.execute(text(_HISTORY_TASKS), values)
            conn.execute(text(_HISTORY_EVENTS), values)
        done += n
        if on_batch is not None:
            on_batch(done, done * (1 + events_per_task))
