"""`Store`: the only code that talks to the database. Each method is one short transaction."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import (
    Connection,
    Select,
    bindparam,
    case,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from agent_jobs.core.contracts import (
    EffectView,
    EventView,
    TaskRequest,
)
from agent_jobs.core.errors import IdempotencyConflict, RecordNotFound, StaleTransition
from agent_jobs.core.hashing import payload_hash
from agent_jobs.core.patch import Patch
from agent_jobs.core.states import PARKED, TERMINAL, Status
from agent_jobs.core.text import to_json
from agent_jobs.store import prepared, sweeps
from agent_jobs.store.approvals import ApprovalStore
from agent_jobs.store.archive import ArchiveStore
from agent_jobs.store.ids import new_id, new_trace_id
from agent_jobs.store.maintenance import MaintenanceStore
from agent_jobs.store.ops import OpsStore
from agent_jobs.store.releases import ReleaseStore
from agent_jobs.store.rows import (
    CommitResult,
    CreateResult,
    Dispatch,
    Lease,
    PendingEvent,
    TaskRow,
    effect_from_row,
    event_from_row,
    task_from_row,
)
from agent_jobs.store.schema import (
    columns_sql,
    effects,
    task_events,
    tasks,
)
from agent_jobs.store.submissions import SubmissionStore
from agent_jobs.store.types import commits_without_flush, db_now, db_now_plus
from agent_jobs.store.writes import (
    append_event,
    append_pending,
    apply_patch,
    apply_patch_lean,
    insert_ignore,
    single_statement,
)

_TERMINAL = [s.value for s in TERMINAL]
_NOT_TERMINAL = text("tasks.status NOT IN (" + ", ".join(f"'{s}'" for s in sorted(_TERMINAL)) + ")")

_CLAIMABLE = (
    _NOT_TERMINAL
    # A held task has no message on purpose; a stray duplicate must not run it past the gate.
    & tasks.c.held_since.is_(None)
    & or_(tasks.c.lease_expires_at.is_(None), tasks.c.lease_expires_at < db_now())
    & or_(tasks.c.next_attempt_at.is_(None), tasks.c.next_attempt_at <= db_now())
)
_CLAIMABLE_ROW = select(tasks).where((tasks.c.id == bindparam("p_id")) & _CLAIMABLE)
# Built once: the claim runs for every step, and building the expression costs more than
# running it. Claimable = not terminal, lease free or lapsed, timer (if any) due.
# Both claims commit without waiting for the disk (`commits_without_flush`): a claim is a lease,
# and the next synchronous commit (the step's) flushes it anyway; this saves a WAL flush a step.
_CLAIM = (
    update(tasks)
    .where((tasks.c.id == bindparam("p_id")) & _CLAIMABLE & commits_without_flush())
    .values(
        lease_owner=bindparam("p_owner"),
        lease_expires_at=db_now_plus(bindparam("p_ttl")),
        lease_epoch=tasks.c.lease_epoch + 1,
    )
    .returning(tasks)
)
# The claim of a row just read (`peek_claimable`): guarded on what the read saw — version, event
# count and lease epoch (every write a step must see bumps one of them: a transition the version,
# a cancel or a decided approval the event count) — so the row itself need not come back.
_CLAIM_READ = (
    update(tasks)
    .where(
        (tasks.c.id == bindparam("p_id"))
        & (tasks.c.version == bindparam("p_version"))
        & (tasks.c.event_seq == bindparam("p_seq"))
        & (tasks.c.lease_epoch == bindparam("p_epoch"))
        & _CLAIMABLE
        & commits_without_flush()
    )
    .values(
        lease_owner=bindparam("p_owner"),
        lease_expires_at=db_now_plus(bindparam("p_ttl")),
        lease_epoch=tasks.c.lease_epoch + 1,
    )
    .returning(tasks.c.lease_epoch, tasks.c.lease_expires_at)
)
_PARKED = [s.value for s in PARKED]
# The same two, prepared once per connection on Postgres (see `prepared`).
_CLAIMABLE_ROW_PREPARED = prepared.from_clause(
    "aj_claimable_row", _CLAIMABLE_ROW, {"p_id": "varchar"}, tuple(tasks.c)
)
_CLAIM_PREPARED = prepared.from_clause(
    "aj_claim",
    _CLAIM,
    {"p_id": "varchar", "p_owner": "varchar", "p_ttl": "double precision"},
    tuple(tasks.c),
)

_CLAIM_READ_PREPARED = prepared.from_clause(
    "aj_claim_read",
    _CLAIM_READ,
    {
        "p_id": "varchar",
        "p_version": "integer",
        "p_seq": "integer",
        "p_epoch": "integer",
        "p_owner": "varchar",
        "p_ttl": "double precision",
    },
    (tasks.c.lease_epoch, tasks.c.lease_expires_at),
)

# A new task on Postgres: the row, its "created" event and its first dispatch record in one
# statement on an autocommit connection (one round trip where BEGIN, two INSERTs and COMMIT
# took four, and no SQLAlchemy Core compilation of the two INSERTs: about 0.3 ms of CPU each).
# `ON CONFLICT DO NOTHING` returns no row when the key is taken; the event is written only
# with the row it reads. SQLite, which has no INSERT in a WITH, keeps its transaction.
_PG_CREATE = prepared.from_text(
    "aj_create",
    f"""
WITH t AS (
  INSERT INTO tasks (id, tenant_id, idempotency_key, payload_hash, workflow, requester, input,
                     pinned, status, version, lease_epoch, dispatched_at, attempts, state,
                     event_seq, trace_id, created_at, updated_at)
  VALUES (:c_id, :c_tenant, :c_key, :c_hash, :c_workflow, :c_requester,
          CAST(:c_input AS jsonb), CAST(:c_pinned AS jsonb), '{Status.RECEIVED.value}', 1, 0,
          now(), 0, CAST(:c_state AS json), 1, :c_trace, now(), now())
  ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
  RETURNING {columns_sql(tasks)}
), e AS (
  INSERT INTO task_events (task_id, seq, type, from_status, to_status, data, trace_id, at)
  SELECT id, 1, 'created', NULL, status, CAST(:c_data AS jsonb), trace_id, now() FROM t
)
SELECT * FROM t
""",
    {
        "c_id": "varchar",
        "c_tenant": "varchar",
        "c_key": "varchar",
        "c_hash": "varchar",
        "c_workflow": "varchar",
        "c_requester": "varchar",
        "c_input": "jsonb",
        "c_pinned": "jsonb",
        "c_state": "json",
        "c_trace": "varchar",
        "c_data": "jsonb",
    },
    tuple(tasks.c),
)


# Errors that mean "the database cannot be reached or cannot serve now" (connection refused or
# lost, pool exhausted, lock timeouts): callers answer "try again" (503, a retry), not a bug.
UNAVAILABLE: tuple[type[Exception], ...] = (OperationalError, InterfaceError, PoolTimeout)


@dataclass(frozen=True)
class CancelResult:
    task: TaskRow
    accepted: bool
    dispatch: Dispatch | None


class Store(ApprovalStore, SubmissionStore, MaintenanceStore, ReleaseStore, OpsStore, ArchiveStore):
    """Tasks, events, effects, approvals, submissions and dead letters, on Postgres or SQLite.

    This class holds the task and effect queries; the others come from the classes it is made of
    (`base.py`, `approvals.py`, `submissions.py`, `maintenance.py`).
    """

    # -- tasks ---------------------------------------------------------------------------------

    def create_or_get(
        self,
        tenant_id: str,
        idempotency_key: str,
        request: TaskRequest,
        *,
        requester: str,
        pinned: dict[str, Any] | None = None,
        state: dict[str, Any] | None = None,
    ) -> CreateResult:
        """Create a task, or return the one this (tenant, key) already names.

        The task row, its "created" event and its first dispatch record are one transaction. The
        same key with a different payload raises `IdempotencyConflict`: guessing would be wrong.
        """
        phash = payload_hash(request.model_dump(mode="json"))
        task_id = new_id("tsk")
        if self.dialect == "postgresql":
            return self._create_pg(
                task_id, tenant_id, idempotency_key, phash, request, requester, pinned, state
            )
        with self.tx() as conn:
            stmt = (
                insert_ignore(self.dialect, tasks)
                .values(
                    id=task_id,
                    tenant_id=tenant_id,
                    idempotency_key=idempotency_key,
                    payload_hash=phash,
                    workflow=request.workflow,
                    requester=requester,
                    input=request.input,
                    pinned=pinned or {},
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
                    state=state or {},
                    outcome=None,
                    event_seq=1,
                    trace_id=new_trace_id(),
                    created_at=db_now(),
                    updated_at=db_now(),
                )
                .on_conflict_do_nothing(index_elements=["tenant_id", "idempotency_key"])
                .returning(tasks)
            )
            row = conn.execute(stmt).first()
            if row is not None:
                task = task_from_row(row)
                conn.execute(
                    insert(task_events).values(
                        task_id=task.id,
                        seq=1,
                        type="created",
                        from_status=None,
                        to_status=Status.RECEIVED.value,
                        data={"workflow": request.workflow, "requester": requester},
                        trace_id=task.trace_id,
                        at=db_now(),
                    )
                )
                return CreateResult(task, created=True)
            return _existing(conn, tenant_id, idempotency_key, phash)

    def _create_pg(  # noqa: PLR0917 - create_or_get's arguments, passed on
        self,
        task_id: str,
        tenant_id: str,
        idempotency_key: str,
        phash: str,
        request: TaskRequest,
        requester: str,
        pinned: dict[str, Any] | None,
        state: dict[str, Any] | None,
    ) -> CreateResult:
        values = {
            "c_id": task_id,
            "c_tenant": tenant_id,
            "c_key": idempotency_key,
            "c_hash": phash,
            "c_workflow": request.workflow,
            "c_requester": requester,
            "c_input": to_json(request.input),
            "c_pinned": to_json(pinned or {}),
            "c_state": to_json(state or {}),
            "c_trace": new_trace_id(),
            "c_data": to_json({"workflow": request.workflow, "requester": requester}),
        }
        with self.autocommit() as conn:
            row = prepared.execute(conn, _PG_CREATE, values).first()
            if row is not None:
                return CreateResult(task_from_row(row), created=True)
            # The key is taken: the conflicting insert has committed (ON CONFLICT waited for
            # it), so this read sees its row.
            return _existing(conn, tenant_id, idempotency_key, phash)

    def get(self, task_id: str, tenant_id: str | None = None) -> TaskRow:
        """The task, or `RecordNotFound`; with a tenant, another tenant's task is also not
        found."""
        cond = tasks.c.id == task_id
        if tenant_id is not None:
            cond = cond & (tasks.c.tenant_id == tenant_id)
        with self.engine.connect() as conn:
            row = conn.execute(select(tasks).where(cond)).first()
        if row is None:
            raise RecordNotFound(f"task {task_id} not found")
        return task_from_row(row)

    def get_by_key(self, tenant_id: str, idempotency_key: str) -> TaskRow:
        """The tenant's task created with `idempotency_key`, or `RecordNotFound` — how a sender that
        submitted without reading the answer (a Celery-native sender) learns its task id."""
        with self.engine.connect() as conn:
            row = conn.execute(_by_key(tenant_id, idempotency_key)).first()
        if row is None:
            raise RecordNotFound(f"no task with idempotency key {idempotency_key!r}")
        return task_from_row(row)

    def list_tasks(
        self, tenant_id: str, *, status: Status | None = None, limit: int = 100
    ) -> list[TaskRow]:
        cond = tasks.c.tenant_id == tenant_id
        if status is not None:
            cond = cond & (tasks.c.status == status.value)
        q = select(tasks).where(cond).order_by(tasks.c.created_at.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [task_from_row(r) for r in conn.execute(q)]

    def claim(self, task_id: str, owner: str, ttl_s: float) -> Lease | None:
        """Take the lease if the task is claimable: not terminal, lease free or lapsed, timer due.

        The expiry comes from the database clock. Returns None when another worker owns it, it
        is parked, or it is terminal: the caller acks and drops the message.
        """
        with self.tx() as conn:
            return self.claim_in(conn, task_id, owner, ttl_s)

    def peek_claimable(self, conn: Connection, task_id: str) -> TaskRow | None:
        """Inside `conn`'s transaction: the task if it is claimable (as `claim` defines it),
        without locking it. A quick step then commits with compare-and-set in the same
        transaction, which fences any concurrent claimer or duplicate; any other step takes the
        lease with `claim_in`."""
        row = prepared.execute(conn, _CLAIMABLE_ROW_PREPARED, {"p_id": task_id}).first()
        return task_from_row(row) if row is not None else None

    def claim_read(self, conn: Connection, task: TaskRow, owner: str, ttl_s: float) -> Lease | None:
        """`claim_in` for `task` as `peek_claimable` just read it on `conn`: when nothing moved
        the row since, the lease is taken without sending the row back (its state can be
        kilobytes); otherwise the full claim, which reads it afresh."""
        row = prepared.execute(
            conn,
            _CLAIM_READ_PREPARED,
            {
                "p_id": task.id,
                "p_version": task.version,
                "p_seq": task.event_seq,
                "p_epoch": task.lease_epoch,
                "p_owner": owner,
                "p_ttl": ttl_s,
            },
        ).first()
        if row is None:
            return self.claim_in(conn, task.id, owner, ttl_s)
        epoch, expires = int(row._mapping["lease_epoch"]), row._mapping["lease_expires_at"]
        claimed = replace(task, lease_owner=owner, lease_epoch=epoch, lease_expires_at=expires)
        return Lease(task=claimed, owner=owner, epoch=epoch, expires_at=expires)

    def claim_in(self, conn: Connection, task_id: str, owner: str, ttl_s: float) -> Lease | None:
        """`claim`, inside the caller's transaction."""
        values = {"p_id": task_id, "p_owner": owner, "p_ttl": ttl_s}
        row = prepared.execute(conn, _CLAIM_PREPARED, values).first()
        if row is None:
            return None
        task = task_from_row(row)
        assert task.lease_expires_at is not None
        return Lease(
            task=task, owner=owner, epoch=task.lease_epoch, expires_at=task.lease_expires_at
        )

    @contextmanager
    def step_conn(self) -> Iterator[Connection]:
        """The connection one step reads, claims and commits on.

        On Postgres it autocommits: each of the step's statements (the read, then the claim or
        the compare-and-set that writes the row and its event) is atomic by itself, and the
        compare-and-set fences whatever happened between them, so a transaction around them
        would only add two round trips (BEGIN, COMMIT) to every step. On SQLite it is one
        transaction, as before (the write lock taken at BEGIN orders the embedded workers)."""
        with self.autocommit() as conn:
            yield conn

    @contextmanager
    def _commit_conn(
        self, patch: Patch, conn: Connection | None = None, *, lean: bool = False
    ) -> Iterator[Connection]:
        """Where a commit of `patch` runs. On Postgres a patch that writes only the row and its
        events is one statement, atomic by itself: on an autocommit connection (`conn`, the
        step's, if it has one); anything more gets a transaction of its own. On SQLite, the
        step's own transaction, or a new one."""
        if self.dialect == "postgresql" and single_statement(patch, lean=lean):
            if conn is not None:
                yield conn
            else:
                with self.autocommit() as fresh:
                    yield fresh
        elif self.dialect != "postgresql" and conn is not None:
            yield conn
        else:
            with self.tx() as tx:
                yield tx

    def commit_read(
        self, conn: Connection, task: TaskRow, patch: Patch, *, actor: str
    ) -> Dispatch | None:
        """Apply a transition to a task read by `peek_claimable` on `conn` (a `step_conn`), if
        nobody moved it since (compare-and-set on version, lease epoch and owner as read).
        Returns the dispatch to publish after the commit; `StaleTransition` if the CAS lost."""
        owner, epoch = task.lease_owner, task.lease_epoch
        with self._commit_conn(patch, conn, lean=True) as c:
            return apply_patch_lean(c, task, owner=owner, epoch=epoch, patch=patch, actor=actor)

    def commit_quick(
        self, conn: Connection, task: TaskRow, patch: Patch, *, actor: str, unheld: bool = False
    ) -> tuple[TaskRow, Dispatch | None]:
        """`commit_read`, returning the row as the commit left it (the next quick step starts
        from it: see `Orchestrator.run_step`). With `unheld` — this step started from such a
        row, not from `peek_claimable` — the compare-and-set also requires that the gate does
        not hold the task and that no cancel was requested since `task` was written: what
        version, epoch and owner do not already pin (the caller then reads the row again)."""
        owner, epoch = task.lease_owner, task.lease_epoch
        with self._commit_conn(patch, conn) as c:
            return apply_patch(
                c, task, owner=owner, epoch=epoch, patch=patch, lease_ttl_s=0.0, actor=actor,
                unheld=unheld,
            )  # fmt: skip

    def renew(self, lease: Lease, ttl_s: float) -> Lease:
        """Heartbeat: push the expiry out. `StaleTransition` if the lease was lost."""
        stmt = (
            update(tasks)
            .where(
                (tasks.c.id == lease.task_id)
                & (tasks.c.lease_epoch == lease.epoch)
                & (tasks.c.lease_owner == lease.owner)
            )
            .values(lease_expires_at=db_now_plus(ttl_s))
            .returning(tasks.c.lease_expires_at)
        )
        with self.tx() as conn:
            expires = conn.execute(stmt).scalar_one_or_none()
        if expires is None:
            raise StaleTransition(lease.task_id, lease.version, lease.epoch)
        return Lease(task=lease.task, owner=lease.owner, epoch=lease.epoch, expires_at=expires)

    def commit(
        self,
        lease: Lease,
        patch: Patch,
        *,
        lease_ttl_s: float = 30.0,
        events: Sequence[PendingEvent] = (),
    ) -> CommitResult:
        """Apply one transition under `lease` (invariant 1), with the events the step recorded
        before it (`events`, written first, in the same transaction). See `writes.apply_patch`."""
        with self.tx() as conn:
            task, dispatch = apply_patch(
                conn,
                lease.task,
                owner=lease.owner,
                epoch=lease.epoch,
                patch=patch,
                lease_ttl_s=lease_ttl_s,
                events=events,
            )
        new_lease = None
        if patch.keep_lease:
            assert task.lease_expires_at is not None
            new_lease = Lease(
                task=task, owner=lease.owner, epoch=lease.epoch, expires_at=task.lease_expires_at
            )
        return CommitResult(task=task, lease=new_lease, dispatch=dispatch)

    def commit_lean(
        self, lease: Lease, patch: Patch, *, events: Sequence[PendingEvent] = ()
    ) -> Dispatch | None:
        """`commit` for a step that gives its lease back and needs no new row, only the
        dispatch to publish. On Postgres a patch that writes the row and its events alone (the
        held ones and the transition's) is one statement on an autocommit connection (atomic by
        itself: no BEGIN, no COMMIT round trip); anything more gets its transaction."""
        assert not patch.keep_lease, "a kept lease needs the new row: use commit()"
        owner, epoch, task = lease.owner, lease.epoch, lease.task
        with self._commit_conn(patch, lean=True) as conn:
            return apply_patch_lean(
                conn, task, owner=owner, epoch=epoch, patch=patch, events=events
            )

    def release(self, lease: Lease) -> bool:
        """Give the lease back without a transition (the step could not run)."""
        stmt = (
            update(tasks)
            .where(
                (tasks.c.id == lease.task_id)
                & (tasks.c.lease_epoch == lease.epoch)
                & (tasks.c.lease_owner == lease.owner)
            )
            .values(lease_owner=None, lease_expires_at=None)
        )
        with self.tx() as conn:
            return conn.execute(stmt).rowcount == 1

    def append_event(self, task_id: str, type_: str, data: dict[str, Any]) -> None:
        """One event that changes no status, written now (an audit record that must outlive
        this worker, a late result): on Postgres one statement on an autocommit connection."""
        with self.autocommit() as conn:  # SQLite: one transaction around its two statements
            append_event(conn, task_id, type_, data)

    def append_events(self, task_id: str, events: Sequence[PendingEvent]) -> None:
        """Held events of a step that ends without a commit of its own, in one transaction."""
        if events:
            with self.tx() as conn:
                append_pending(conn, task_id, events)

    def events(
        self, task_id: str, tenant_id: str | None = None, after_seq: int = 0
    ) -> list[EventView]:
        self.get(task_id, tenant_id)  # scope check: another tenant's task is RecordNotFound
        q = (
            select(task_events)
            .where((task_events.c.task_id == task_id) & (task_events.c.seq > after_seq))
            .order_by(task_events.c.seq)
        )
        with self.engine.connect() as conn:
            return [event_from_row(r) for r in conn.execute(q)]

    def request_cancel(self, task_id: str, tenant_id: str | None = None) -> CancelResult:
        """Set the cancel flag (not a status write); a parked task is woken to honour it now."""
        cond = (tasks.c.id == task_id) & tasks.c.status.not_in(_TERMINAL)
        if tenant_id is not None:
            cond = cond & (tasks.c.tenant_id == tenant_id)
        parked = tasks.c.status.in_(_PARKED) & tasks.c.lease_owner.is_(None)
        with self.tx() as conn:
            row = conn.execute(
                update(tasks)
                .where(cond)
                .values(
                    cancel_requested_at=func.coalesce(tasks.c.cancel_requested_at, db_now()),
                    next_attempt_at=case((parked, db_now()), else_=tasks.c.next_attempt_at),
                    dispatched_at=case((parked, db_now()), else_=tasks.c.dispatched_at),
                )
                .returning(tasks)
            ).first()
            if row is not None:
                append_event(conn, task_id, "cancel_requested", {})
        if row is None:
            # Read after the transaction: on SQLite a second connection inside it would wait on
            # this one's write lock until the busy timeout.
            task = self.get(task_id, tenant_id)  # RecordNotFound, or terminal: nothing to cancel
            return CancelResult(task, accepted=False, dispatch=None)
        task = task_from_row(row)
        woke = task.status in PARKED and task.lease_owner is None
        return CancelResult(
            task, accepted=True, dispatch=Dispatch(task.id, task.tenant_id) if woke else None
        )

    # -- effects -------------------------------------------------------------------------------

    def effects(self, task_id: str) -> list[EffectView]:
        q = select(effects).where(effects.c.task_id == task_id).order_by(effects.c.created_at)
        with self.engine.connect() as conn:
            return [effect_from_row(r) for r in conn.execute(q)]

    def effect(self, task_id: str, idempotency_key: str) -> EffectView | None:
        q = select(effects).where(
            (effects.c.task_id == task_id) & (effects.c.idempotency_key == idempotency_key)
        )
        with self.engine.connect() as conn:
            row = conn.execute(q).first()
        return effect_from_row(row) if row is not None else None

    def count_in_status(self, task_ids: list[str], status: Status) -> int:
        q = (
            select(func.count())
            .select_from(tasks)
            .where(tasks.c.id.in_(task_ids) & (tasks.c.status == status.value))
        )
        with self.engine.connect() as conn:
            return int(conn.execute(q).scalar_one())

    def consumable_tenants(self) -> list[str]:
        """Tenants whose queues a worker must consume: runnable work not held at the gate, or
        parked work whose timer is due. (Parked tasks waiting on a person need no consumer.)"""
        with self.engine.connect() as conn:
            return list(conn.execute(sweeps.consumable_tenants_query()).scalars())


def _by_key(tenant_id: str, idempotency_key: str) -> Select[Any]:
    return select(tasks).where(
        (tasks.c.tenant_id == tenant_id) & (tasks.c.idempotency_key == idempotency_key)
    )


def _existing(conn: Connection, tenant_id: str, idempotency_key: str, phash: str) -> CreateResult:
    """The task a repeated key names, read on `conn`; the same key with another payload is a
    conflict."""
    task = task_from_row(conn.execute(_by_key(tenant_id, idempotency_key)).one())
    if task.payload_hash != phash:
        raise IdempotencyConflict(tenant_id, idempotency_key)
    return CreateResult(task, created=False)
