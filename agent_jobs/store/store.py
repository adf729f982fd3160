"""`Store`: the only code that talks to the database. Each method is one short transaction."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, Select, case, func, select, update

from agent_jobs.core.contracts import EffectView, EventView, TaskRequest
from agent_jobs.core.errors import IdempotencyConflict, RecordNotFound, StaleTransition
from agent_jobs.core.hashing import payload_hash
from agent_jobs.core.patch import Patch
from agent_jobs.core.states import PARKED, TERMINAL, Status
from agent_jobs.store import sweeps, transition, webhook_outbox
from agent_jobs.store.approvals import ApprovalStore
from agent_jobs.store.archive import ArchiveStore
from agent_jobs.store.backend import NewTask
from agent_jobs.store.base import UNAVAILABLE as _UNAVAILABLE
from agent_jobs.store.dead_letters import DeadLetterStore
from agent_jobs.store.guard import Guard
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
from agent_jobs.store.schema import effects, task_events, tasks
from agent_jobs.store.submissions import SubmissionStore
from agent_jobs.store.types import db_now, db_now_plus

_TERMINAL = [s.value for s in TERMINAL]
_PARKED = [s.value for s in PARKED]
# Where the API and the CLI import it from; defined in `base`, which the sweepers' code uses too.
UNAVAILABLE = _UNAVAILABLE


@dataclass(frozen=True)
class CancelResult:
    task: TaskRow
    accepted: bool
    dispatch: Dispatch | None


class Store(
    ApprovalStore,
    SubmissionStore,
    MaintenanceStore,
    ReleaseStore,
    OpsStore,
    DeadLetterStore,
    ArchiveStore,
):
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
        new = NewTask(
            id=new_id("tsk"),
            tenant_id=tenant_id,
            idempotency_key=idempotency_key,
            payload_hash=payload_hash(request.model_dump(mode="json")),
            workflow=request.workflow,
            requester=requester,
            input=request.input,
            pinned=pinned or {},
            state=state or {},
            trace_id=new_trace_id(),
        )
        with self.autocommit() as conn:
            row = self.backend.insert_task(conn, new)
            if row is not None:
                return CreateResult(task_from_row(row), created=True)
            # The key is taken: the conflicting insert has committed (its unique index made
            # this one wait for it), so this read sees its row.
            return _existing(conn, tenant_id, idempotency_key, new.payload_hash)

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

    def claim(
        self,
        task_id: str,
        owner: str,
        ttl_s: float,
        *,
        conn: Connection | None = None,
        seen: TaskRow | None = None,
    ) -> Lease | None:
        """Take the lease if the task is claimable: not terminal, not held, lease free or
        lapsed, timer due. The expiry comes from the database clock. None when another worker
        owns it, it is parked, held or terminal: the caller acks and drops the message.

        On `conn` (a `step_conn`) when given. With `seen`, the row as `peek_claimable` just read
        it on `conn`: when nothing moved the row since, the lease is taken without sending the
        row back (its state can be kilobytes); otherwise the plain claim reads it afresh."""
        if conn is None:
            with self.tx() as fresh:
                return self.claim(task_id, owner, ttl_s, conn=fresh, seen=seen)
        if seen is not None:
            got = self.backend.claim_seen(conn, seen, owner, ttl_s)
            if got is not None:
                m = got._mapping
                epoch, expires = int(m["lease_epoch"]), m["lease_expires_at"]
                claimed = replace(
                    seen, lease_owner=owner, lease_epoch=epoch, lease_expires_at=expires
                )
                return Lease(task=claimed, owner=owner, epoch=epoch, expires_at=expires)
        row = self.backend.claim(conn, task_id, owner, ttl_s)
        if row is None:
            return None
        task = task_from_row(row)
        assert task.lease_expires_at is not None
        return Lease(
            task=task, owner=owner, epoch=task.lease_epoch, expires_at=task.lease_expires_at
        )

    def peek_claimable(self, conn: Connection, task_id: str) -> TaskRow | None:
        """Inside `conn`'s transaction: the task if it is claimable (as `claim` defines it),
        without locking it. A quick step then commits with compare-and-set on what it read,
        which fences any concurrent claimer or duplicate; any other step takes the lease with
        `claim(..., seen=...)`."""
        row = self.backend.claimable_row(conn, task_id)
        return task_from_row(row) if row is not None else None

    @contextmanager
    def step_conn(self) -> Iterator[Connection]:
        """The connection one step reads, claims and commits on (`autocommit`).

        On Postgres each of the step's statements (the read, then the claim or the
        compare-and-set that writes the row and its event) is atomic by itself, and the
        compare-and-set fences whatever happened between them, so a transaction around them
        would only add two round trips (BEGIN, COMMIT) to every step. On SQLite it is one
        transaction (the write lock taken at BEGIN orders the embedded workers)."""
        with self.autocommit() as conn:
            yield conn

    def transition(
        self,
        guard: Guard,
        patch: Patch,
        *,
        conn: Connection | None = None,
        actor: str | None = None,
        events: Sequence[PendingEvent] = (),
        lease_ttl_s: float = 30.0,
        returning: bool = True,
    ) -> CommitResult:
        """The one guarded write (invariant 1): apply `patch` to the row `guard` names if it is
        still that row, with the events the step recorded before it (`events`, written first)
        and every record that moves with the status. `StaleTransition` if the guard no longer
        holds. See `transition.apply`.

        The store picks where it runs: on `conn` (the step's) or a fresh connection when the
        write is one statement, else a transaction of its own (`Backend.write_conn`). Without
        `returning` the new row is not sent back (`CommitResult.task` is None): most steps need
        only the dispatch. A kept lease (`Patch.keep_lease`) needs the row."""
        assert returning or not patch.keep_lease, "a kept lease needs the new row back"
        # A transition that causes a webhook event for a tenant with an endpoint writes its
        # outbox rows too: one transaction (`webhook_outbox.atomic`). Any other, as before.
        planned = webhook_outbox.plan(self.engine, guard.task, patch, conn)
        where = (
            self.backend.write_conn(self.engine, conn, guard, patch, returning=returning)
            if planned is None
            else webhook_outbox.atomic(self.engine, conn)
        )
        with where as c:
            task, dispatch = transition.apply(
                self.backend, c, guard, patch, actor=actor, events=events,
                lease_ttl_s=lease_ttl_s, returning=returning,
                outbox=planned or webhook_outbox.NOTHING,
            )  # fmt: skip
        webhook_outbox.committed(planned)
        lease = None
        if patch.keep_lease:
            assert task is not None and task.lease_expires_at is not None
            assert guard.owner is not None, "only a lease's holder keeps it"
            lease = Lease(
                task=task, owner=guard.owner, epoch=guard.epoch, expires_at=task.lease_expires_at
            )
        return CommitResult(task=task, lease=lease, dispatch=dispatch)

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

    def release_step(self, lease: Lease) -> Dispatch | None:
        """Give the lease back after a step that made no transition (it found nothing to do,
        or its grant went stale), and say whether the task needs a step message now.

        Whatever woke the task while the lease was held (an approval decided, a cancel asked
        for) appended an event and published a step whose claim found the lease held and was
        dropped; the task would wait out the dispatch grace. So when the event count moved
        since the claim and the task is due (not terminal, not held, no timer pending), the
        release records a dispatch in its transaction and returns it to be published."""
        fence = (
            (tasks.c.id == lease.task_id)
            & (tasks.c.lease_epoch == lease.epoch)
            & (tasks.c.lease_owner == lease.owner)
        )
        # The row's columns come back and are judged here: SQLite (3.40) evaluates
        # `held_since IS NULL` in a RETURNING clause wrongly (false for a NULL).
        released = (
            update(tasks)
            .where(fence)
            .values(lease_owner=None, lease_expires_at=None)
            .returning(
                tasks.c.tenant_id,
                tasks.c.status,
                tasks.c.event_seq,
                tasks.c.held_since,
                tasks.c.next_attempt_at,
                db_now().label("aj_now"),
            )
        )
        with self.tx() as conn:
            row = conn.execute(released).first()
            woken = (
                row is not None
                and row.event_seq != lease.task.event_seq
                and Status(row.status) not in TERMINAL
                and row.held_since is None
                and (row.next_attempt_at is None or row.next_attempt_at <= row.aj_now)
            )
            if not woken:
                return None
            assert row is not None
            conn.execute(
                update(tasks).where(tasks.c.id == lease.task_id).values(dispatched_at=db_now())
            )
        return Dispatch(lease.task_id, row.tenant_id)

    def append_event(self, task_id: str, type_: str, data: dict[str, Any]) -> None:
        """One event that changes no status, written now (an audit record that must outlive
        this worker, a late result): on Postgres one statement on an autocommit connection."""
        with self.autocommit() as conn:  # SQLite: one transaction around its two statements
            transition.append_event(self.backend, conn, task_id, type_, data)

    def append_events(self, task_id: str, events: Sequence[PendingEvent]) -> None:
        """Held events of a step that ends without a commit of its own, in one transaction."""
        if events:
            with self.tx() as conn:
                if not self.backend.append_events(conn, task_id, events):
                    raise LookupError(task_id)

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
                transition.append_event(self.backend, conn, task_id, "cancel_requested", {})
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
