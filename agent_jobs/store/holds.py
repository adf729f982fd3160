"""Tasks held at the dispatch gate: runnable, deliberately without a step message.

A tenant at its concurrency cap or out of its fair share, or a step deferred because the global
model-call cap was saturated, is held here instead of waiting in a queue, where it would occupy a
worker's prefetch or spin through requeues. The gate's pump releases them, oldest first.

A step its workflow deferred (`DEFERRED`: a resource of its own was busy) has no pump: the
sweeper lets it try again, and it backs off (`core.holds.deferred_wait_s`) so that a resource
busy for an hour costs about one try a minute, not one every sweep.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, and_, func, or_, select, update

from agent_jobs.config import settings
from agent_jobs.core.holds import HoldReason, deferred_wait_s
from agent_jobs.core.park import Park, ParkReason, shown_park
from agent_jobs.core.states import Status
from agent_jobs.store.backend import Backend
from agent_jobs.store.base import StoreBase
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


# -- tasks a lever parked (RETRY_WAIT, HELD_BY_OPERATOR), woken when it is turned off -----------

# Whether a lever's park should wake: (tenant, its park, its pending action's tool).
LeverWake = Callable[[str, Park, str | None], bool]
_WAITING = (
    (tasks.c.status == Status.RETRY_WAIT.value)
    & tasks.c.lease_owner.is_(None)
    & (tasks.c.next_attempt_at > db_now())
)


def wake_lever_held(
    store: StoreBase,
    tenant_id: str | None,
    wakes: LeverWake,
    *,
    batch: int = 500,
    max_batches: int = 20,
) -> list[Dispatch]:
    """Make due now the tasks a lever parked that `wakes` picks (of `tenant_id`, or of every
    tenant), recording their dispatch; the caller publishes them through the gate, each to its
    tenant's queue. A lever's park is known by its explicit reason (HELD_BY_OPERATOR), and what
    it waits for from its detail, read here: JSON paths are each dialect's own.

    The scan takes RETRY_WAIT rows whose timer is still ahead, `batch` at a time in timer order
    (keyset: a row not woken is not read twice), at most `max_batches`; a task past that bound
    wakes at its own poll, within AGENT_JOBS_HELD_POLL_MAX_S. Each batch is one transaction:
    SKIP LOCKED, and the UPDATE repeats the predicate, so a task a worker claimed or a sweeper
    made due meanwhile is left alone (one step message is enough)."""
    cond = _WAITING if tenant_id is None else _WAITING & (tasks.c.tenant_id == tenant_id)
    woken: list[Dispatch] = []
    after: tuple[Any, str] | None = None
    for _ in range(max_batches):
        page = cond
        if after is not None:
            at, last = after
            page = page & or_(
                tasks.c.next_attempt_at > at,
                and_(tasks.c.next_attempt_at == at, tasks.c.id > last),
            )
        q = store.backend.skip_locked(
            select(tasks.c.id, tasks.c.tenant_id, tasks.c.state, tasks.c.next_attempt_at)
            .where(page)
            .order_by(tasks.c.next_attempt_at, tasks.c.id)
            .limit(batch)
        )
        with store.tx() as conn:
            rows = conn.execute(q).all()
            picked = [r.id for r in rows if _lever_wakes(r.tenant_id, r.state, wakes)]
            if picked:
                stmt = (
                    update(tasks)
                    .where(tasks.c.id.in_(picked) & cond)
                    .values(next_attempt_at=db_now(), dispatched_at=db_now())
                    .returning(tasks.c.id, tasks.c.tenant_id)
                )
                order = {task_id: i for i, task_id in enumerate(picked)}
                done = sorted(conn.execute(stmt).all(), key=lambda r: order[r[0]])
                woken.extend(Dispatch(r[0], r[1]) for r in done)
        if len(rows) < batch:
            break
        after = (rows[-1].next_attempt_at, rows[-1].id)
    return woken


def _lever_wakes(tenant_id: str, state: Any, wakes: LeverWake) -> bool:
    runtime = (state or {}).get("runtime") or {}
    park = shown_park(Status.RETRY_WAIT, runtime)
    if park is None or park.reason is not ParkReason.HELD_BY_OPERATOR:
        return False
    pending = runtime.get("pending_action")
    tool = pending.get("tool") if isinstance(pending, dict) else None
    return wakes(tenant_id, park, tool if isinstance(tool, str) else None)
