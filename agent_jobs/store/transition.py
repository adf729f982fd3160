"""The one write path (invariant 1): where a task's state is written.

`apply` moves a task's row under a `Guard` (compare-and-set on what the guard pins), appends
its events, and writes every record that must move with the status — the effect's intent or
outcome, the approval asked for or used, the dead letter — in the caller's connection, as one
statement or one transaction (the backend says which). `Store.transition` is its door; the
sweepers and the dead-letter replay call it too. Nothing else writes `tasks.status`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, insert, select, update

from agent_jobs.core.contracts import Action
from agent_jobs.core.errors import ApprovalError, EffectKeyConflict, StaleTransition
from agent_jobs.core.patch import ApprovalUse, Patch
from agent_jobs.core.states import RUNNABLE, check_transition
from agent_jobs.store.approval_groups import request_members
from agent_jobs.store.backend import Backend, CasWrite
from agent_jobs.store.guard import Guard
from agent_jobs.store.rows import Dispatch, PendingEvent, RowLike, TaskRow, task_from_row
from agent_jobs.store.schema import dead_letters, effects
from agent_jobs.store.types import db_now
from agent_jobs.store.webhook_outbox import Planned, record

# What rides with an effect's intent (`postgres.rides`): its CTEs' rows are counted
# beside the row, and `_check_intent` raises on what did not land.
_INTENT_RIDES = frozenset({"intent", "intent_used"})


def needs_dispatch(patch: Patch) -> bool:
    """A step message follows a commit into a runnable status the worker does not keep."""
    return patch.to in RUNNABLE and not patch.keep_lease and patch.wake_in_s is None


def apply(
    backend: Backend,
    conn: Connection,
    guard: Guard,
    patch: Patch,
    *,
    actor: str | None = None,
    events: Sequence[PendingEvent] = (),
    lease_ttl_s: float = 0.0,
    returning: bool = True,
    outbox: Planned | None = None,
) -> tuple[TaskRow | None, Dispatch | None]:
    """Apply `patch` to the row `guard` names, if it is still that row.

    `events`: what the step recorded before its transition, written first, and only if the
    compare-and-set matches. Returns the new row (None unless `returning`) and the dispatch to
    publish after the commit. Raises `IllegalTransition` before touching the database,
    `StaleTransition` when the guard no longer holds (another worker or a sweeper moved the
    row: the caller must stop), `ApprovalError` when an approval the patch consumes is no
    longer usable and `EffectKeyConflict` when its intent's key names another action or an
    effect already committed (the caller's transaction then rolls back, so neither the records
    nor the status land).
    """
    task = guard.task
    check_transition(task.status, patch.to, replay=patch.replay)
    dispatch = needs_dispatch(patch)
    # Who moved it: the actor (a sweeper, an operator), else the lease owner.
    data = {**patch.data, "by": actor or guard.owner}
    w = CasWrite(data, dispatch, events, lease_ttl_s, returning)
    row, ride = backend.cas(conn, guard, patch, w)
    if row is None:
        raise StaleTransition(task.id, task.version, guard.epoch)
    if ride in _INTENT_RIDES:
        _check_intent(conn, task.id, patch, row)
    elif ride is None:  # else the compare-and-set's statement wrote it
        _write_effect(backend, conn, task.id, patch)
        _write_approval(backend, conn, task, patch)
    if patch.dead_letter is not None:
        conn.execute(
            insert(dead_letters).values(
                task_id=task.id,
                tenant_id=task.tenant_id,
                workflow=task.workflow,
                reason=patch.dead_letter[:1000],
                attempts=patch.attempts if patch.attempts is not None else task.attempts,
                at=db_now(),
            )
        )
    # The webhook events it causes, in the same transaction (`store.webhook_outbox`); `outbox`:
    # what `Store.transition` planned (None: worked out here, the caller holds a transaction).
    record(conn, task, patch, outbox)
    new = task_from_row(row) if returning else None
    return new, (Dispatch(task.id, task.tenant_id) if dispatch else None)


def append_event(
    backend: Backend,
    conn: Connection,
    task_id: str,
    type_: str,
    data: dict[str, Any],
    *,
    ago_s: float = 0.0,
) -> None:
    """An event that changes no status (audit records, late results, decisions), dated `ago_s`
    seconds before the database's clock; `LookupError` when the task is not there."""
    event = PendingEvent(type_, data, time.monotonic() - ago_s)
    if not backend.append_events(conn, task_id, [event]):
        raise LookupError(task_id)


def _write_effect(backend: Backend, conn: Connection, task_id: str, patch: Patch) -> None:
    eff = patch.effect
    if eff is None:
        return
    if eff.status != "intent":
        backend.effect_outcome(conn, task_id, eff)
    # Intent before effect (invariant 3). The first intent for a key inserts its row; a retry
    # after "reconcile found nothing" reuses the row and its key (`_reuse_intent`).
    elif not backend.insert_intent(conn, task_id, eff.action):
        _reuse_intent(conn, task_id, eff.action)


def _reuse_intent(conn: Connection, task_id: str, action: Action) -> None:
    """The intent's row for this key was there already (a retry after "reconcile found
    nothing"): it is reused, with its key, only for the very same action, and never once its
    effect is committed (that would turn a recorded effect back into an intent, and send it
    again)."""
    where = (effects.c.task_id == task_id) & (effects.c.idempotency_key == action.idempotency_key)
    existing = conn.execute(select(effects.c.action_hash, effects.c.status).where(where)).one()
    key = action.idempotency_key
    if existing.action_hash != action.action_hash:
        raise EffectKeyConflict(f"effect key {key!r} already names a different action")
    if existing.status == "committed":
        raise EffectKeyConflict(f"effect key {key!r} was already committed; it is not sent again")
    conn.execute(
        update(effects)
        .where(where)
        .values(status="intent", attempts=effects.c.attempts + 1, updated_at=db_now())
    )


def _check_intent(conn: Connection, task_id: str, patch: Patch, row: RowLike) -> None:
    """What the riding intent's CTEs did, checked as the statements of their own are: a key
    already there is reused only for the same action, and an approval no longer usable raises,
    rolling back the compare-and-set and the intent with it."""
    assert patch.effect is not None
    m = row._mapping
    if not m["aj_fx"]:
        _reuse_intent(conn, task_id, patch.effect.action)
    use = patch.approval_use
    if use is not None and not m["aj_au"]:
        raise _unusable(use)


def _write_approval(backend: Backend, conn: Connection, task: TaskRow, patch: Patch) -> None:
    if patch.approval_request is not None:
        backend.request_approval(conn, task, patch.approval_request)
        request_members(conn, task, patch.approval_request)
    use = patch.approval_use
    if use is not None and not backend.use_approval(conn, task, use) and use.status == "used":
        raise _unusable(use)


def _unusable(use: ApprovalUse) -> ApprovalError:
    return ApprovalError(use.approval_id, "no longer usable (used, expired or not granted)")
