"""The SQLite backend: the embedded default (`make demo`, one machine, no services). The same
operations as Postgres in SQLAlchemy Core, each in the transaction its caller holds: SQLite has
no data-modifying CTEs, so what Postgres writes in one statement is several here, and its one
writer (BEGIN IMMEDIATE) orders them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, Select, Table, create_engine, event, insert, text, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.pool import NullPool
from sqlalchemy.sql.compiler import SQLCompiler

from agent_jobs.core.contracts import Action
from agent_jobs.core.identity import principal
from agent_jobs.core.patch import ApprovalRequest, ApprovalUse, EffectWrite, Patch
from agent_jobs.core.states import Status
from agent_jobs.core.text import to_json
from agent_jobs.store.backend import statements as core
from agent_jobs.store.backend.base import Backend, CasWrite, Decision, NewTask
from agent_jobs.store.engine import install_rules
from agent_jobs.store.guard import Guard
from agent_jobs.store.rows import PendingEvent, RowLike, TaskRow
from agent_jobs.store.schema import approvals, effects, task_events, tasks
from agent_jobs.store.types import db_now, db_now_plus

if TYPE_CHECKING:
    from agent_jobs.config import Settings


# SQLite has no `now()`: `strftime` gives UTC with microsecond digits in the text format
# SQLAlchemy stores, so the database's clock compares with stored times as text.
# An engine whose dialect carries `VIRTUAL_CLOCK` (the simulator's, `store.seams.use_clock`)
# reads the time from a function registered on each connection instead: the same text format.
VIRTUAL_CLOCK = "aj_virtual_clock"


@compiles(db_now, "sqlite")
def _sqlite_now(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    if getattr(compiler.dialect, VIRTUAL_CLOCK, False):
        return "aj_now(0.0)"
    return "strftime('%Y-%m-%d %H:%M:%f000', 'now')"


@compiles(db_now_plus, "sqlite")
def _sqlite_now_plus(element: db_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    (seconds,) = list(element.clauses)
    if getattr(compiler.dialect, VIRTUAL_CLOCK, False):
        return f"aj_now({compiler.process(seconds, **kw)})"
    return (
        "strftime('%Y-%m-%d %H:%M:%f000', 'now', "
        f"printf('%+.6f seconds', {compiler.process(seconds, **kw)}))"
    )


class SqliteBackend(Backend):
    name = "sqlite"

    # -- connections ---------------------------------------------------------------------------

    def make_engine(self, url: str, *, pool_size: int, cfg: Settings | None) -> Engine:
        """WAL and a busy timeout, so the embedded worker's threads and a CLI in another
        process can share one file."""
        return self.engine(url, keep_connections=False)

    def engine(self, url: str, *, keep_connections: bool) -> Engine:
        """`make_engine`'s engine; `keep_connections` pools them (the simulator's one thread:
        each returned connection is rolled back, so it holds no lock between uses)."""
        memory = url in ("sqlite://", "sqlite:///:memory:")
        kwargs: dict[str, Any] = {
            "connect_args": {"check_same_thread": False, "timeout": 30},
            "json_serializer": to_json,
            "hide_parameters": True,
        }
        if not memory and not keep_connections:
            # A pool of file connections would hold write locks across checkouts; a fresh
            # connection per use is cheap for SQLite and keeps every transaction short.
            kwargs["poolclass"] = NullPool
        elif not memory:
            kwargs["pool_size"] = 8
        engine = create_engine(url, **kwargs)

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # pysqlite's own transaction handling defers BEGIN; take control so that writes
            # start with BEGIN IMMEDIATE and two writers never deadlock upgrading a read lock.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            if not memory:
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        install_rules(engine)
        return engine

    @contextmanager
    def autocommit(self, engine: Engine) -> Iterator[Connection]:
        """One transaction: the write lock taken at BEGIN orders the embedded workers."""
        with engine.begin() as conn:
            yield conn

    @contextmanager
    def write_conn(
        self,
        engine: Engine,
        conn: Connection | None,
        guard: Guard,
        patch: Patch,
        *,
        returning: bool,
    ) -> Iterator[Connection]:
        if conn is not None:
            yield conn  # the step's own transaction
        else:
            with engine.begin() as tx:
                yield tx

    @contextmanager
    def lifted_timeouts(self, conn: Connection) -> Iterator[Connection]:
        yield conn  # no statement or lock timeouts to lift

    # -- tasks ---------------------------------------------------------------------------------

    def insert_task(self, conn: Connection, new: NewTask) -> RowLike | None:
        stmt = (
            sqlite.insert(tasks)
            .values(
                id=new.id,
                tenant_id=new.tenant_id,
                idempotency_key=new.idempotency_key,
                payload_hash=new.payload_hash,
                workflow=new.workflow,
                requester=new.requester,
                input=new.input,
                pinned=new.pinned,
                status=Status.RECEIVED.value,
                version=1,
                lease_owner=None,
                lease_expires_at=None,
                lease_epoch=0,
                next_attempt_at=None,
                dispatched_at=db_now(),
                attempts=0,
                held_since=None,
                held_for=None,
                cancel_requested_at=None,
                state=new.state,
                outcome=None,
                event_seq=1,
                trace_id=new.trace_id,
                created_at=db_now(),
                updated_at=db_now(),
            )
            .on_conflict_do_nothing(index_elements=["tenant_id", "idempotency_key"])
            .returning(tasks)
        )
        row = conn.execute(stmt).first()
        if row is not None:
            data = {"workflow": new.workflow, "requester": new.requester}
            _insert_event(
                conn, new.id, 1, "created", None, Status.RECEIVED.value, data, new.trace_id
            )
        return row

    def claimable_row(self, conn: Connection, task_id: str) -> RowLike | None:
        return conn.execute(core.CLAIMABLE_ROW, {"p_id": task_id}).first()

    def claim(self, conn: Connection, task_id: str, owner: str, ttl_s: float) -> RowLike | None:
        return conn.execute(core.CLAIM, {"p_id": task_id, "p_owner": owner, "p_ttl": ttl_s}).first()

    def claim_seen(
        self, conn: Connection, task: TaskRow, owner: str, ttl_s: float
    ) -> RowLike | None:
        values = core.claim_seen_values(task, owner, ttl_s)
        return conn.execute(core.CLAIM_SEEN, values).first()

    # -- the guarded write -----------------------------------------------------------------------

    def cas(
        self, conn: Connection, guard: Guard, patch: Patch, w: CasWrite
    ) -> tuple[RowLike | None, str | None]:
        """The guarded UPDATE, which reserves the events' numbers, then the held events and
        the transition's own, numbered as Postgres numbers them. Nothing rides."""
        task = guard.task
        values: dict[str, Any] = {
            "status": patch.to.value,
            "version": tasks.c.version + 1,
            "event_seq": tasks.c.event_seq + 1 + len(w.events),
            "updated_at": db_now(),
            "next_attempt_at": None if patch.wake_in_s is None else db_now_plus(patch.wake_in_s),
        }
        if patch.state is not None:
            values["state"] = patch.state
        if patch.attempts is not None:
            values["attempts"] = patch.attempts
        if patch.last_error is not None:
            values["last_error"] = patch.last_error
        elif patch.attempts == 0:
            values["last_error"] = None
        if patch.outcome is not None:
            values["outcome"] = patch.outcome
        if patch.replay:
            values |= {"outcome": patch.outcome, "held_since": None, "held_for": None}
        if patch.keep_lease:
            values["lease_expires_at"] = db_now_plus(w.lease_ttl_s)
        else:
            values["lease_owner"] = None
            values["lease_expires_at"] = None
        if w.dispatch:
            values["dispatched_at"] = db_now()
        owner = guard.owner
        cond = (
            (tasks.c.id == task.id)
            & (tasks.c.version == task.version)
            & (tasks.c.lease_epoch == guard.epoch)
            & (tasks.c.lease_owner.is_(None) if owner is None else tasks.c.lease_owner == owner)
        )
        if guard.seq is not None:
            cond = cond & (tasks.c.event_seq == guard.seq)
        if guard.unheld:
            cond = cond & tasks.c.held_since.is_(None)
        row = conn.execute(update(tasks).where(cond).values(**values).returning(tasks)).first()
        if row is None:
            return None, None
        seq = int(row._mapping["event_seq"])
        _insert_held(conn, task.id, seq - 1, w.events, task.status.value, task.trace_id)
        _insert_event(
            conn, task.id, seq, patch.event, task.status.value, patch.to.value, w.data,
            task.trace_id,
        )  # fmt: skip
        return row, None

    def insert_intent(self, conn: Connection, task_id: str, action: Action) -> bool:
        inserted = conn.execute(
            sqlite.insert(effects)
            .values(
                task_id=task_id,
                idempotency_key=action.idempotency_key,
                tool=action.tool,
                tool_version=action.tool_version,
                action_hash=action.action_hash,
                status="intent",
                attempts=1,
                result=None,
                created_at=db_now(),
                updated_at=db_now(),
            )
            .on_conflict_do_nothing(index_elements=["task_id", "idempotency_key"])
            .returning(effects.c.task_id)
        ).first()
        return inserted is not None

    def effect_outcome(self, conn: Connection, task_id: str, eff: EffectWrite) -> None:
        key = eff.action.idempotency_key
        conn.execute(
            update(effects)
            .where((effects.c.task_id == task_id) & (effects.c.idempotency_key == key))
            .values(status=eff.status, result=eff.result, updated_at=db_now())
        )

    def request_approval(self, conn: Connection, task: TaskRow, req: ApprovalRequest) -> None:
        conn.execute(
            insert(approvals).values(
                **core.pending_approval_values(task, req, req.approval_id, req.action, req.reason),
                created_at=db_now(),
                expires_at=db_now_plus(req.ttl_s),
                decided_at=None,
                used_at=None,
            )
        )

    def use_approval(self, conn: Connection, task: TaskRow, use: ApprovalUse) -> bool:
        cond = (approvals.c.id == use.approval_id) & (approvals.c.task_id == task.id)
        if use.status == "used":  # single use, unexpired, granted
            cond = (
                cond
                & (approvals.c.status == "granted")
                & approvals.c.used_at.is_(None)
                & (approvals.c.expires_at > db_now())
            )
            values: dict[str, Any] = {"status": "used", "used_at": db_now()}
        else:
            cond = cond & approvals.c.status.in_(("pending", "granted"))
            values = {"status": use.status}
        stmt = update(approvals).where(cond).values(**values).returning(approvals.c.id)
        return conn.execute(stmt).first() is not None

    def append_events(self, conn: Connection, task_id: str, events: Sequence[PendingEvent]) -> bool:
        row = conn.execute(
            update(tasks)
            .where(tasks.c.id == task_id)
            .values(event_seq=tasks.c.event_seq + len(events))
            .returning(tasks.c.event_seq, tasks.c.trace_id, tasks.c.status)
        ).first()
        if row is None:
            return False
        last_seq, trace_id, status = row
        _insert_held(conn, task_id, int(last_seq), events, status, trace_id)
        return True

    # -- approvals -------------------------------------------------------------------------------

    def approval_at_now(self, conn: Connection, approval_id: str) -> RowLike | None:
        return conn.execute(core.APPROVAL_AT_NOW, {"id": approval_id}).first()

    def decide_approval(self, conn: Connection, d: Decision) -> tuple[RowLike, str | None] | None:
        row = conn.execute(
            update(approvals)
            .where(
                (approvals.c.id == d.approval_id)
                & (approvals.c.status == "pending")
                & (approvals.c.expires_at > db_now())
                & (approvals.c.requester_principal != principal(d.approver))
            )
            .values(
                status=d.status,
                approver=d.approver,
                approver_principal=principal(d.approver),
                decided_at=db_now(),
            )
            .returning(approvals)
        ).first()
        if row is None:
            return None
        task_id = row._mapping["task_id"]
        woke = conn.execute(
            update(tasks)
            .where((tasks.c.id == task_id) & (tasks.c.status == Status.APPROVAL_WAIT.value))
            .values(next_attempt_at=db_now(), dispatched_at=db_now())
            .returning(tasks.c.tenant_id)
        ).scalar()
        event_ = PendingEvent(f"approval_{d.status}", d.data, time.monotonic())
        if not self.append_events(conn, task_id, [event_]):
            raise LookupError(task_id)
        return row, woke

    # -- statements the store builds ---------------------------------------------------------------

    def insert_ignore(self, table: Table) -> Any:
        return sqlite.insert(table)

    def skip_locked(self, q: Select[Any]) -> Select[Any]:
        return q  # one writer at a time: nothing to skip

    # -- administration ----------------------------------------------------------------------------

    def truncate(self, conn: Connection, tables: Sequence[Table]) -> None:
        for table in reversed(tables):
            conn.execute(table.delete())

    def analyze(self, engine: Engine) -> None:
        with engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")

    # -- benchmark data ----------------------------------------------------------------------------

    def seed_finished(self, conn: Connection, start: int, count: int) -> None:
        conn.execute(text(_SEED_FINISHED), {"start": start, "stop": start + count - 1})

    def seed_history(self, conn: Connection, values: dict[str, Any]) -> None:
        raise ValueError("seeding history needs Postgres (generate_series)")


# A recursive CTE counts where Postgres has generate_series.
_SEED_FINISHED = f"""
    WITH RECURSIVE g(n) AS (SELECT :start UNION ALL SELECT n + 1 FROM g WHERE n < :stop)
    INSERT INTO tasks ({core.SEED_COLUMNS})
    SELECT 'tsk_fin_' || n, 'bench-t' || (n % 50), 'fin-' || n, 'sha256:x', 'noop@1', 'bench',
           '{{}}', '{{}}', 'COMPLETED', 4, NULL, NULL, 1, NULL,
           '2026-01-01 00:00:00.000000', 0, NULL, '{{}}', '{{}}', 4, hex(n),
           '2026-01-01 00:00:00.000000', '2026-01-01 00:00:00.000000'
    FROM g
"""


def _insert_held(  # noqa: PLR0917 - the rows' shared columns
    conn: Connection,
    task_id: str,
    last_seq: int,
    events: Sequence[PendingEvent],
    from_status: str,
    trace_id: str,
) -> None:
    """`events`, numbered up to `last_seq` (reserved on the row by the caller), each dated when
    it happened."""
    now = time.monotonic()
    first = last_seq - len(events) + 1
    for i, e in enumerate(events):
        _insert_event(
            conn, task_id, first + i, e.type, from_status, None, e.data, trace_id,
            ago_s=max(0.0, now - e.at),
        )  # fmt: skip


def _insert_event(  # noqa: PLR0917 - one row's columns, in the table's order
    conn: Connection,
    task_id: str,
    seq: int,
    type_: str,
    from_status: str | None,
    to_status: str | None,
    data: dict[str, Any],
    trace_id: str,
    *,
    ago_s: float = 0.0,
) -> None:
    """One `task_events` row, numbered by the caller, dated `ago_s` before the database's
    clock."""
    conn.execute(
        insert(task_events).values(
            task_id=task_id,
            seq=seq,
            type=type_,
            from_status=from_status,
            to_status=to_status,
            data=data,
            trace_id=trace_id,
            at=db_now_plus(-ago_s) if ago_s else db_now(),
        )
    )
