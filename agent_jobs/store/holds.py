"""Tasks held at the dispatch gate: runnable, deliberately without a step message.

A tenant at its concurrency cap or out of its fair share, or a step deferred because the global
model-call cap was saturated, is held here instead of waiting in a queue, where it would occupy a
worker's prefetch or spin through requeues. The gate's pump releases them, oldest first.

A step its workflow deferred (`DEFERRED`: a resource of its own was busy) has no pump: the
sweeper lets it try again, and it backs off (`core.holds.deferred_wait_s`) so that a resource
busy for an hour costs about one try a minute, not one every sweep.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, func, select, update

from agent_jobs.config import settings
from agent_jobs.core.holds import HoldReason, deferred_wait_s
from agent_jobs.store.backend import Backend
from agent_jobs.store.rows import Dispatch, Lease
from agent_jobs.store.schema import tasks
from agent_jobs.store.types import db_now

_HELD = tasks.c.held_since.is_not(None)
# A deferred step may go this much before its wait is over: the sweeper comes by every sweep
# interval anyway, and a step held 59.99 s of a 60 s wait should not wait a whole interval more.
_EARLY_S = 1.0


def hold(
    conn: Connection, task_id: str, reason: str, lease: Lease | None, terminal: list[str]
) -> bool:
    cond = (tasks.c.id == task_id) & tasks.c.status.not_in(terminal)
    values: dict[str, Any] = {"held_since": db_now(), "held_for": reason}
    if lease is not None:
        # A step deferred mid-way gives its lease back in the same statement.
        cond = cond & (tasks.c.lease_epoch == lease.epoch) & (tasks.c.lease_owner == lease.owner)
        values.update(lease_owner=None, lease_expires_at=None)
    else:
        cond = cond & tasks.c.lease_owner.is_(None)
    return conn.execute(update(tasks).where(cond).values(**values)).rowcount == 1


def take_held(
    backend: Backend, conn: Connection, reason: str, tenant_id: str | None, limit: int
) -> list[Dispatch]:
    """Release up to `limit` held tasks, oldest first, recording their dispatch (the caller
    publishes them). SKIP LOCKED: two pumps at once never release the same task."""
    cond = _HELD & (tasks.c.held_for == reason)
    if tenant_id is not None:
        cond = cond & (tasks.c.tenant_id == tenant_id)
    # Two statements, not `UPDATE ... WHERE id IN (SELECT ... LIMIT n)`: Postgres may run that
    # sub-select more than once and release more than `limit` tasks, which the pump would then
    # never send. The rows picked here stay locked until this transaction ends.
    if reason == HoldReason.DEFERRED:
        picked = _due_deferred(backend, conn, cond, limit)
    else:
        ids = backend.skip_locked(
            select(tasks.c.id).where(cond).order_by(tasks.c.held_since).limit(limit)
        )
        picked = list(conn.execute(ids).scalars())
    if not picked:
        return []
    stmt = (
        update(tasks)
        .where(tasks.c.id.in_(picked) & cond)
        .values(held_since=None, held_for=None, dispatched_at=db_now())
        .returning(tasks.c.id, tasks.c.tenant_id)
    )
    return [Dispatch(r[0], r[1]) for r in conn.execute(stmt)]


def _due_deferred(backend: Backend, conn: Connection, cond: Any, limit: int) -> list[str]:
    """The deferred steps whose wait is over, oldest hold first. A step's streak is from its
    last transition (`updated_at`, which neither a hold nor a claim moves) to its latest hold;
    it waits as long again. Decided here, not in SQL: interval arithmetic is each dialect's
    own. The oldest holds are read first, so the `limit` read are the likeliest to be due."""
    q = backend.skip_locked(
        select(tasks.c.id, tasks.c.held_since, tasks.c.updated_at, db_now())
        .where(cond)
        .order_by(tasks.c.held_since)
        .limit(limit)
    )
    max_s = settings().held_poll_max_s
    return [
        task_id
        for task_id, held_since, updated_at, now in conn.execute(q)
        if (now - held_since).total_seconds() + _EARLY_S
        >= deferred_wait_s((held_since - updated_at).total_seconds(), max_s)
    ]


def held_tenants(conn: Connection, reason: str) -> list[str]:
    q = select(tasks.c.tenant_id).where(_HELD & (tasks.c.held_for == reason)).distinct()
    return list(conn.execute(q).scalars())


def held_ages(conn: Connection, reason: str | None = None) -> dict[str, tuple[int, float]]:
    """tenant -> (tasks held, seconds the oldest has waited): part of a tenant's queue age."""
    cond = _HELD if reason is None else _HELD & (tasks.c.held_for == reason)
    q = (
        select(tasks.c.tenant_id, func.count(), func.min(tasks.c.held_since), db_now())
        .where(cond)
        .group_by(tasks.c.tenant_id)
    )
    return {t: (int(n), (now - oldest).total_seconds()) for t, n, oldest, now in conn.execute(q)}
