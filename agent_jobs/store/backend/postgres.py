"""The Postgres backend: production. Every statement it runs is named in `postgres_sql` and
prepared by that name once per connection; a step's read, claim and commit run on an autocommit
connection, each one statement, so a step costs its statements' round trips and no BEGIN or
COMMIT around them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, Select, Table, create_engine, text
from sqlalchemy.dialects import postgresql

from agent_jobs.core.contracts import Action
from agent_jobs.core.identity import principal
from agent_jobs.core.patch import ApprovalRequest, ApprovalUse, EffectWrite, Patch
from agent_jobs.core.states import Status
from agent_jobs.core.text import to_json
from agent_jobs.store.backend import postgres_seed as seed
from agent_jobs.store.backend import postgres_sql as sql
from agent_jobs.store.backend import prepared
from agent_jobs.store.backend import statements as core
from agent_jobs.store.backend.base import Backend, CasWrite, Decision, NewTask
from agent_jobs.store.backend.prepared import Prepared
from agent_jobs.store.engine import install_rules, normalize_pg_url
from agent_jobs.store.guard import Guard
from agent_jobs.store.rows import PendingEvent, RowLike, TaskRow

if TYPE_CHECKING:
    from agent_jobs.config import Settings

# What rides in the compare-and-set's own statement (`rides`): the intent's
# forms run in a transaction, which the caller's checks (`transition.check_intent`) roll back.
INTENT_RIDES = frozenset({"intent", "intent_used"})


class PostgresBackend(Backend):
    name = "postgresql"

    # -- connections ---------------------------------------------------------------------------

    def make_engine(self, url: str, *, pool_size: int, cfg: Settings | None) -> Engine:
        if cfg is None:
            from agent_jobs.config import settings  # noqa: PLC0415 - config reads the environment

            cfg = settings()
        engine = create_engine(
            normalize_pg_url(url),
            pool_size=pool_size,
            max_overflow=10,
            # No pre-ping: it would add a round trip to every transaction of the hot path. A
            # connection that died is discarded on its first error (and with it every pooled
            # connection older than the error: SQLAlchemy invalidates the pool on a
            # disconnect); a connection whose peer vanished without a word is found by the
            # keepalives below, within seconds, instead of hanging its caller.
            pool_pre_ping=False,
            pool_recycle=1800,
            pool_timeout=cfg.db_pool_timeout_s,
            # Errors and logs never show a statement's values (task state, approval arguments).
            hide_parameters=True,
            connect_args=pg_connect_args(cfg),
            json_serializer=to_json,
        )
        install_rules(engine)
        return engine

    @contextmanager
    def autocommit(self, engine: Engine) -> Iterator[Connection]:
        with engine.connect() as conn:
            # The driver's own switch, not SQLAlchemy's `isolation_level="AUTOCOMMIT"`: that
            # one is undone on the connection's return to the pool with a `SET` sent to the
            # server, a round trip each time. psycopg2's flag is client-side: it changes nothing
            # on the server, and with it set `rollback()` (SQLAlchemy's reset) sends nothing.
            dbapi = conn.connection.dbapi_connection
            dbapi.autocommit = True  # type: ignore[union-attr]
            try:
                yield conn
            finally:
                if conn.in_transaction():
                    conn.rollback()  # SQLAlchemy's bookkeeping only: nothing is open
                # A connection found dead was invalidated and closed: there is no flag to put
                # back, and trying would hide the error that killed it.
                if not conn.invalidated and not dbapi.closed:  # type: ignore[union-attr]
                    dbapi.autocommit = False  # type: ignore[union-attr]

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
        """A transition that `cas_form` writes in one statement (the row, its events, and what
        rides) is atomic by itself: on the step's autocommit connection, or a fresh one.
        Anything more gets a transaction of its own."""
        if cas_form(guard, patch, returning=returning).whole:
            if conn is not None:
                yield conn
            else:
                with self.autocommit(engine) as fresh:
                    yield fresh
        else:
            with engine.begin() as tx:
                yield tx

    @contextmanager
    def lifted_timeouts(self, conn: Connection) -> Iterator[Connection]:
        """Inside a transaction the change is the transaction's (a rollback undoes it); outside
        one it is committed at once, so that whoever runs on `conn` next (Alembic) finds no
        transaction of ours open. A connection left without its bounds by an error is
        discarded, never pooled."""
        own = _set_timeouts(conn, "SET statement_timeout = 0", "SET lock_timeout = 0")
        ok = False
        try:
            yield conn
            ok = True
        finally:
            if conn.invalidated:
                pass
            elif ok:
                # RESET: back to the session's defaults, the bounds set at connection start.
                _set_timeouts(conn, "RESET statement_timeout", "RESET lock_timeout")
            elif own:
                conn.invalidate()  # committed without bounds, and failed: not for the pool
            # else: the enclosing transaction's rollback undoes the SET

    # -- tasks ---------------------------------------------------------------------------------

    def insert_task(self, conn: Connection, new: NewTask) -> RowLike | None:
        """One statement: the row, its "created" event (written only with the row it reads:
        `ON CONFLICT DO NOTHING` returns none when the key is taken) and its first dispatch."""
        values = {
            "c_id": new.id,
            "c_tenant": new.tenant_id,
            "c_key": new.idempotency_key,
            "c_hash": new.payload_hash,
            "c_workflow": new.workflow,
            "c_requester": new.requester,
            "c_input": to_json(new.input),
            "c_pinned": to_json(new.pinned),
            "c_state": to_json(new.state),
            "c_trace": new.trace_id,
            "c_data": to_json({"workflow": new.workflow, "requester": new.requester}),
        }
        return prepared.execute(conn, sql.CREATE, values).first()

    def claimable_row(self, conn: Connection, task_id: str) -> RowLike | None:
        return prepared.execute(conn, sql.CLAIMABLE_ROW, {"p_id": task_id}).first()

    def claim(self, conn: Connection, task_id: str, owner: str, ttl_s: float) -> RowLike | None:
        values = {"p_id": task_id, "p_owner": owner, "p_ttl": ttl_s}
        return prepared.execute(conn, sql.CLAIM, values).first()

    def claim_seen(
        self, conn: Connection, task: TaskRow, owner: str, ttl_s: float
    ) -> RowLike | None:
        values = core.claim_seen_values(task, owner, ttl_s)
        return prepared.execute(conn, sql.CLAIM_SEEN, values).first()

    # -- the guarded write -----------------------------------------------------------------------

    def cas(
        self, conn: Connection, guard: Guard, patch: Patch, w: CasWrite
    ) -> tuple[RowLike | None, str | None]:
        task = guard.task
        form = cas_form(guard, patch, returning=w.returning)
        extra: dict[str, Any] = {}
        if form.ride is not None:
            extra = _riding(task, patch, form.ride)
        elif form.statement is sql.CAS_PINNED:
            extra = {"seq": guard.seq, "unheld": guard.unheld}
        row = prepared.execute(
            conn,
            form.statement,
            {
                "to_status": patch.to.value,
                "wake": patch.wake_in_s,
                "state": _json(patch.state),
                "attempts": patch.attempts,
                "last_error": patch.last_error,
                "outcome": _json(patch.outcome),
                "replay": patch.replay,
                "keep": patch.keep_lease,
                "ttl": w.lease_ttl_s,
                "dispatch": w.dispatch,
                "id": task.id,
                "version": task.version,
                "epoch": guard.epoch,
                "owner": guard.owner,
                "event": patch.event,
                "from_status": task.status.value,
                "data": _json(w.data),
                "k": len(w.events),
                "held": held_events(w.events),
                **extra,
            },
        ).first()
        return row, form.ride

    def insert_intent(self, conn: Connection, task_id: str, action: Action) -> bool:
        values = _effect_intent_values(task_id, action)
        return prepared.execute(conn, sql.EFFECT_INTENT, values).first() is not None

    def effect_outcome(self, conn: Connection, task_id: str, eff: EffectWrite) -> None:
        prepared.execute(conn, sql.EFFECT_OUTCOME, _effect_outcome_values(task_id, eff))

    def request_approval(self, conn: Connection, task: TaskRow, req: ApprovalRequest) -> None:
        prepared.execute(conn, sql.APPROVAL_REQUEST, _approval_request_values(task, req))

    def use_approval(self, conn: Connection, task: TaskRow, use: ApprovalUse) -> bool:
        if use.status == "used":
            stmt, values = sql.APPROVAL_USED, _approval_used_values(task.id, use)
        else:
            values = {"id": use.approval_id, "task_id": task.id, "status": use.status}
            stmt = sql.APPROVAL_CLOSED
        return prepared.execute(conn, stmt, values).first() is not None

    def append_events(self, conn: Connection, task_id: str, events: Sequence[PendingEvent]) -> bool:
        params = {"id": task_id, "k": len(events), "events": held_events(events)}
        return prepared.execute(conn, sql.EVENTS, params).first() is not None

    # -- approvals -------------------------------------------------------------------------------

    def approval_at_now(self, conn: Connection, approval_id: str) -> RowLike | None:
        return prepared.execute(conn, sql.APPROVAL_AT_NOW, {"id": approval_id}).first()

    def decide_approval(self, conn: Connection, d: Decision) -> tuple[RowLike, str | None] | None:
        values = {
            "status": d.status,
            "approver": d.approver,
            "approver_principal": principal(d.approver),
            "id": d.approval_id,
            "waiting": Status.APPROVAL_WAIT.value,
            "event": f"approval_{d.status}",
            "data": to_json(d.data),
        }
        row = prepared.execute(conn, sql.DECIDE, values).first()
        if row is None:
            return None
        m = row._mapping
        if m["aj_tenant"] is None:  # the foreign key makes this impossible; never silent
            raise LookupError(d.approval_id)
        return row, (m["aj_tenant"] if m["aj_woke"] else None)

    # -- statements the store builds ---------------------------------------------------------------

    def insert_ignore(self, table: Table) -> Any:
        return postgresql.insert(table)

    def skip_locked(self, q: Select[Any]) -> Select[Any]:
        return q.with_for_update(skip_locked=True)

    # -- administration ----------------------------------------------------------------------------

    def truncate(self, conn: Connection, tables: Sequence[Table]) -> None:
        conn.exec_driver_sql(f"TRUNCATE {', '.join(t.name for t in tables)} CASCADE")

    def analyze(self, engine: Engine) -> None:
        autocommit = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        # VACUUM over millions of rows is long by design: no statement timeout.
        with autocommit as conn, self.lifted_timeouts(conn):
            conn.exec_driver_sql("VACUUM ANALYZE tasks")

    # -- benchmark data ----------------------------------------------------------------------------

    def seed_finished(self, conn: Connection, start: int, count: int) -> None:
        conn.execute(text(seed.FINISHED), {"start": start, "stop": start + count - 1})

    def seed_history(self, conn: Connection, values: dict[str, Any]) -> None:
        conn.execute(text(seed.HISTORY_TASKS), values)
        conn.execute(text(seed.HISTORY_EVENTS), values)


@dataclass(frozen=True)
class CasForm:
    """How one transition is written: the compare-and-set's statement, which of the patch's
    records ride in it (a key of `postgres_sql.CAS_RIDING`, or None: the caller writes them in
    statements of their own, `transition.apply`), and whether that one statement is the whole
    transition (`whole`: it may run on an autocommit connection) or needs a transaction."""

    statement: Prepared
    ride: str | None
    whole: bool


def cas_form(guard: Guard, patch: Patch, *, returning: bool) -> CasForm:
    """The one choice of a transition's statement and of the transaction it runs in, made
    here for both (`write_conn` and `cas` ask the same question and get the same answer): a
    transition is one statement only when that statement writes every record the patch moves.

    A guard that pins more than version, epoch and owner (a carried row: `Guard.seq`,
    `Guard.unheld`) is written by `CAS_PINNED`, which carries no record: its records then go
    in statements of their own, so it is whole only for a patch with none."""
    records = (
        patch.effect is not None
        or patch.approval_request is not None
        or patch.approval_use is not None
        or patch.dead_letter is not None
    )
    if guard.seq is not None or guard.unheld:
        return CasForm(sql.CAS_PINNED, None, whole=not records)
    ride = rides(patch, returning=returning)
    if ride is not None:
        # Without a row back the riding statement is the whole transition; with it (the
        # intent's forms) `transition.apply` checks what the CTEs did and may roll back.
        return CasForm(sql.CAS_RIDING[ride], ride, whole=not returning)
    return CasForm(sql.CAS if returning else sql.CAS_LEAN, None, whole=not records)


def rides(patch: Patch, *, returning: bool) -> str | None:
    """Which records the compare-and-set writes in its own statement (a key of
    `postgres_sql.CAS_RIDING`), if any. Without a row back (autocommit) it carries the
    patch's one record when it writes exactly one: `"effect"` (an effect's outcome; not an
    intent, which may reuse its row) or `"approval"` (an approval asked for). With the row
    back (in a transaction, which `check_intent` can roll back) it carries an effect's
    intent, `"intent"`, with the approval it uses, `"intent_used"`."""
    eff, req, use = patch.effect, patch.approval_request, patch.approval_use
    if patch.dead_letter is not None or (req is not None and req.members):
        return None  # a group's other rows are statements of their own (`approval_groups`)
    if returning:
        if eff is None or eff.status != "intent" or req is not None:
            return None
        if use is None:
            return "intent"
        return "intent_used" if use.status == "used" else None
    if use is not None:
        return None
    if req is None and eff is not None:
        return "effect" if eff.status != "intent" else None
    if req is not None and eff is None:
        return "approval"
    return None


def pg_connect_args(cfg: Settings) -> dict[str, Any]:
    """libpq's connection parameters for the bounds in `cfg`. The statement and lock timeouts
    are the session's defaults, set at connection start (`options`), so they cost no round trip;
    `lifted_timeouts` lifts them for a migration or a benchmark's seeding."""
    options = [
        f"-c {name}={max(1, round(seconds * 1000))}"
        for name, seconds in (
            ("statement_timeout", cfg.db_statement_timeout_s),
            ("lock_timeout", cfg.db_lock_timeout_s),
        )
        if seconds > 0
    ]
    idle = max(1, cfg.db_connect_timeout_s)
    # Both at 0, no `options` at all: some poolers refuse the startup parameter (PgBouncer
    # unless `ignore_startup_parameters = options`); the server's own defaults apply.
    extra = {"options": " ".join(options)} if options else {}
    return {
        "application_name": f"agent_jobs:{os.getpid()}",
        "connect_timeout": cfg.db_connect_timeout_s,
        **extra,
        # A peer that vanished (a partition, a host that died) answers no keepalive: the
        # connection fails after about idle + 3 x interval seconds instead of hanging a caller
        # until the kernel gives up (minutes). tcp_user_timeout covers data sent and never
        # acknowledged, where keepalives do not run.
        "keepalives": 1,
        "keepalives_idle": idle,
        "keepalives_interval": max(1, idle // 3),
        "keepalives_count": 3,
        "tcp_user_timeout": 2 * idle * 1000,
    }


def _set_timeouts(conn: Connection, *statements: str) -> bool:
    """Run `statements`; commit them when no transaction was open. Whether it committed."""
    own = not conn.in_transaction()
    for statement in statements:
        conn.exec_driver_sql(statement)
    if own:
        conn.commit()
    return own


def held_events(events: Sequence[PendingEvent]) -> str:
    """`events` as the JSON array the statements read (`jsonb_to_recordset`): each one's place
    (1..n), type, data, and how many seconds ago it happened."""
    now = time.monotonic()
    return to_json(
        [
            {"n": i, "type": e.type, "data": e.data, "ago": max(0.0, now - e.at)}
            for i, e in enumerate(events, start=1)
        ]
    )


def _json(value: Any) -> str | None:
    return None if value is None else to_json(value)


def _riding(task: TaskRow, patch: Patch, ride: str) -> dict[str, Any]:
    """The parameters of the records that ride in the compare-and-set (`CAS_RIDING`)."""
    if ride == "approval":
        assert patch.approval_request is not None
        return _approval_request_values(task, patch.approval_request)
    assert patch.effect is not None
    if ride == "effect":
        return _effect_outcome_values(task.id, patch.effect)
    values = _effect_intent_values(task.id, patch.effect.action)
    if patch.approval_use is not None:
        values |= _approval_used_values(task.id, patch.approval_use)
    return values


def _effect_outcome_values(task_id: str, eff: EffectWrite) -> dict[str, Any]:
    return {
        "fx_task_id": task_id,
        "fx_status": eff.status,
        "fx_result": to_json(eff.result),
        "fx_key": eff.action.idempotency_key,
    }


def _approval_request_values(task: TaskRow, req: ApprovalRequest) -> dict[str, Any]:
    return {
        "ap_id": req.approval_id,
        "ap_task_id": task.id,
        "ap_tenant": task.tenant_id,
        "ap_tool": req.action.tool,
        "ap_tool_version": req.action.tool_version,
        "ap_args": to_json(req.action.args),
        "ap_action_hash": req.action.action_hash,
        "ap_policy_version": req.policy_version,
        "ap_requester": req.requester,
        "ap_requester_principal": principal(req.requester),
        "ap_reason": req.reason[:500],
        "ap_ttl": req.ttl_s,
    }


def _effect_intent_values(task_id: str, action: Action) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "key": action.idempotency_key,
        "tool": action.tool,
        "tool_version": action.tool_version,
        "action_hash": action.action_hash,
    }


def _approval_used_values(task_id: str, use: ApprovalUse) -> dict[str, Any]:
    return {"approval_id": use.approval_id, "task_id": task_id}
