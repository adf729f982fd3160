"""Sweeper queries. Each selects only what is due through a partial index (invariant 10) and
locks what it takes with SKIP LOCKED, so two sweepers at once split the work instead of doing it
twice. On SQLite the single writer serialises them; each statement re-checks its predicate.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Column, ColumnElement, Connection, Select, bindparam, or_, select, update

from agent_jobs.core.errors import StaleTransition
from agent_jobs.core.patch import Patch
from agent_jobs.core.states import PARKED, RUNNABLE, Status
from agent_jobs.store.backend import Backend
from agent_jobs.store.base import UNAVAILABLE
from agent_jobs.store.dead_letters import set_aside
from agent_jobs.store.guard import Guard
from agent_jobs.store.rows import Dispatch, TaskRow, task_from_row
from agent_jobs.store.schema import approvals, tasks
from agent_jobs.store.transition import append_event, apply
from agent_jobs.store.types import db_now

_DISPATCHABLE = [Status.RECEIVED.value, Status.RUNNING.value, Status.VERIFYING.value]
_ACTIVE = sorted(s.value for s in RUNNABLE | PARKED)  # the order of the index predicate


def _in_literal(column: Column[Any], values: list[str]) -> ColumnElement[bool]:
    """`column IN ('A', 'B')` with the values written into the SQL, in the order of the partial
    index's predicate: SQLite uses a partial index only when the query repeats its predicate
    term for term, and an IN list of bound parameters never matches."""
    return column.in_(bindparam(None, values, expanding=True, literal_execute=True))


# What makes a row due for the lease sweeper, taken away from a row it had to set aside.
_LEASE_CLEARED: dict[str, Any] = {"lease_owner": None, "lease_expires_at": None}


def expired_leases(
    backend: Backend,
    conn: Connection,
    limit: int,
    lost_lease: Callable[[TaskRow], Patch],
    set_aside_row: Callable[[TaskRow, str], None] = lambda task, reason: None,
) -> list[Dispatch]:
    """Leases that lapsed: each task takes the patch `lost_lease` gives for it, through the CAS
    write path fenced by the lapsed lease's owner and epoch — an EXECUTING task goes to
    EXEC_UNKNOWN (its call may have been sent), any other records a failed attempt, its worker
    lost (`orchestrator.steps.worker_lost`), and waits out its backoff.

    A row that cannot take its patch (building it raised, the transition table refuses it, the
    database refused the write as invalid) is dead-lettered with the reason (its lease cleared:
    `dead_letters.set_aside`) and reported to `set_aside_row`; the sweep goes on with the
    others. Each row is written in a savepoint, so a refused write rolls back only its own row.
    A database that cannot serve now (`UNAVAILABLE`: a lost connection, a lock or statement
    timeout, a deadlock) is no fault of the row: that still ends the sweep, to be run again."""
    q = backend.skip_locked(
        select(tasks)
        .where(tasks.c.lease_expires_at < db_now())
        .order_by(tasks.c.lease_expires_at)
        .limit(limit)
    )
    out: list[Dispatch] = []
    for row in conn.execute(q).all():
        task = task_from_row(row)
        try:
            with conn.begin_nested():
                _, dispatch = apply(
                    backend, conn, Guard.seen(task), lost_lease(task), actor="sweeper",
                    returning=False,
                )  # fmt: skip
        except UNAVAILABLE:
            raise  # the database, not the row: the whole sweep is tried again later
        except StaleTransition:
            continue  # moved meanwhile (its holder committed after all): nothing to do
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
            set_aside(backend, conn, task, "lease", reason, undue=_LEASE_CLEARED)
            set_aside_row(task, reason)
            continue
        if dispatch is not None:
            out.append(dispatch)
    return out


def lost_dispatch(
    backend: Backend, conn: Connection, limit: int, cutoff: datetime
) -> list[Dispatch]:
    """Runnable tasks with no lease whose last step message is older than `cutoff`: the broker
    lost it, or a worker died between commit and publish."""
    cond = (
        _in_literal(tasks.c.status, _DISPATCHABLE)
        & tasks.c.lease_owner.is_(None)
        # Held tasks have no message on purpose (queue/gate.py): not lost.
        & tasks.c.held_since.is_(None)
        & or_(tasks.c.dispatched_at.is_(None), tasks.c.dispatched_at < cutoff)
    )
    ids = backend.skip_locked(
        select(tasks.c.id).where(cond).order_by(tasks.c.created_at).limit(limit)
    )
    stmt = (
        update(tasks)
        .where(tasks.c.id.in_(ids.scalar_subquery()) & cond)
        .values(dispatched_at=db_now())
        .returning(tasks.c.id, tasks.c.tenant_id)
    )
    return [Dispatch(r[0], r[1]) for r in conn.execute(stmt)]


def due_timers(
    backend: Backend, conn: Connection, status: Status, limit: int, cutoff: datetime
) -> list[Dispatch]:
    """Parked (or reconcile-backoff) tasks whose timer is due and that were not dispatched since
    it fell due — or whose dispatch since is older than `cutoff` (lost)."""
    assert status in (Status.RETRY_WAIT, Status.APPROVAL_WAIT, Status.EXEC_UNKNOWN)
    cond = (
        (tasks.c.status == status.value)
        & tasks.c.lease_owner.is_(None)
        & or_(tasks.c.next_attempt_at.is_(None), tasks.c.next_attempt_at <= db_now())
        & or_(
            tasks.c.dispatched_at.is_(None),
            tasks.c.dispatched_at < tasks.c.next_attempt_at,
            tasks.c.dispatched_at < cutoff,
        )
    )
    ids = backend.skip_locked(
        select(tasks.c.id).where(cond).order_by(tasks.c.next_attempt_at).limit(limit)
    )
    stmt = (
        update(tasks)
        .where(tasks.c.id.in_(ids.scalar_subquery()) & cond)
        .values(dispatched_at=db_now())
        .returning(tasks.c.id, tasks.c.tenant_id)
    )
    return [Dispatch(r[0], r[1]) for r in conn.execute(stmt)]


def expired_approvals(backend: Backend, conn: Connection, limit: int) -> list[Dispatch]:
    """Pending or granted-but-unused approvals past their expiry become `expired`, and their
    task (parked in APPROVAL_WAIT) is woken to re-plan."""
    cond = _in_literal(approvals.c.status, ["pending", "granted"]) & (
        approvals.c.expires_at <= db_now()
    )
    ids = backend.skip_locked(
        select(approvals.c.id).where(cond).order_by(approvals.c.expires_at).limit(limit)
    )
    rows = conn.execute(
        update(approvals)
        .where(approvals.c.id.in_(ids.scalar_subquery()) & cond)
        .values(status="expired")
        .returning(approvals.c.id, approvals.c.task_id)
    ).all()
    out: list[Dispatch] = []
    for approval_id, task_id in rows:
        append_event(backend, conn, task_id, "approval_expired", {"approval_id": approval_id})
        woke = conn.execute(
            update(tasks)
            .where(
                (tasks.c.id == task_id)
                & (tasks.c.status == Status.APPROVAL_WAIT.value)
                & tasks.c.lease_owner.is_(None)
                # Its timer (the same expiry) may have fallen due and been dispatched already by
                # a concurrent `due_timers` sweep: one step message is enough.
                & or_(
                    tasks.c.next_attempt_at.is_(None),
                    tasks.c.next_attempt_at > db_now(),
                    tasks.c.dispatched_at.is_(None),
                    tasks.c.dispatched_at < tasks.c.next_attempt_at,
                )
            )
            .values(next_attempt_at=db_now(), dispatched_at=db_now())
            .returning(tasks.c.id, tasks.c.tenant_id)
        ).first()
        if woke is not None:
            out.append(Dispatch(woke[0], woke[1]))
    return out


def consumable_tenants_query() -> Select[Any]:
    runnable = tasks.c.status.in_([s.value for s in RUNNABLE]) & tasks.c.held_since.is_(None)
    due = tasks.c.status.in_([s.value for s in PARKED]) & (tasks.c.next_attempt_at <= db_now())
    return (
        # The literal status list repeats ix_tasks_active_tenant's predicate (SQLite needs it).
        select(tasks.c.tenant_id)
        .where(_in_literal(tasks.c.status, _ACTIVE) & (runnable | due))
        .distinct()
    )
