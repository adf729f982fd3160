"""The one write path (invariant 1): a guarded UPDATE on (version, lease epoch, owner) and the
event append, plus every record that must move with the status, in the caller's transaction.

Nothing else in the code base writes `tasks.status`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Column, Connection, Integer, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from agent_jobs.core.contracts import Action
from agent_jobs.core.errors import ApprovalError, EffectKeyConflict, StaleTransition
from agent_jobs.core.identity import principal
from agent_jobs.core.patch import ApprovalRequest, ApprovalUse, EffectWrite, Patch
from agent_jobs.core.states import RUNNABLE, check_transition
from agent_jobs.core.text import to_json
from agent_jobs.store import prepared
from agent_jobs.store.rows import Dispatch, PendingEvent, RowLike, TaskRow, task_from_row
from agent_jobs.store.schema import (
    approvals,
    columns_sql,
    dead_letters,
    effects,
    task_events,
    tasks,
)
from agent_jobs.store.types import db_now, db_now_plus


def needs_dispatch(patch: Patch) -> bool:
    """A step message follows a commit into a runnable status the worker does not keep."""
    return patch.to in RUNNABLE and not patch.keep_lease and patch.wake_in_s is None


def apply_patch(
    conn: Connection,
    task: TaskRow,
    *,
    owner: str | None,
    epoch: int,
    patch: Patch,
    lease_ttl_s: float,
    actor: str | None = None,
    unheld: bool = False,
    events: Sequence[PendingEvent] = (),
) -> tuple[TaskRow, Dispatch | None]:
    """Apply `patch` to `task` if nobody moved it since (version, epoch and owner unchanged;
    with `unheld`, and the gate does not hold it nor was a cancel requested since `task`).
    `events`: what the step recorded before its transition (`PendingEvent`), written first, and
    only if the compare-and-set matches."""
    new, dispatch = _apply(
        conn, task, owner, epoch, patch, lease_ttl_s, actor, lean=False, unheld=unheld,
        events=events,
    )  # fmt: skip
    assert new is not None
    return new, dispatch


def apply_patch_lean(
    conn: Connection,
    task: TaskRow,
    *,
    owner: str | None,
    epoch: int,
    patch: Patch,
    actor: str | None = None,
    events: Sequence[PendingEvent] = (),
) -> Dispatch | None:
    """`apply_patch` for a caller that needs no new row back, only the dispatch to publish."""
    return _apply(conn, task, owner, epoch, patch, 0.0, actor, lean=True, events=events)[1]


def single_statement(patch: Patch, *, lean: bool = False) -> bool:
    """On Postgres the patch's whole commit is one statement, atomic by itself, so it needs no
    transaction around it: the task row and its events, and, for a lean commit (no new row
    back), the one record that rides in the compare-and-set's own statement (`rides`)."""
    plain = (
        patch.effect is None
        and patch.approval_request is None
        and patch.approval_use is None
        and patch.dead_letter is None
    )
    return plain or (lean and rides(patch, lean=True) is not None)


def rides(patch: Patch, *, lean: bool) -> str | None:
    """Which records the compare-and-set writes in its own statement on Postgres (a key of
    `_PG_CAS_RIDING`), if any. A lean commit (autocommit, no row back) carries the patch's one
    record when it writes exactly one: `"effect"` (an effect's outcome; not an intent, which may
    reuse its row) or `"approval"` (an approval asked for). A full commit (in a transaction,
    which `_check_intent` can roll back) carries an effect's intent, `"intent"`, with the
    approval it uses, `"intent_used"`."""
    eff, req, use = patch.effect, patch.approval_request, patch.approval_use
    if patch.dead_letter is not None:
        return None
    if not lean:
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


def _apply(  # noqa: PLR0917 - the two public functions above name every argument
    conn: Connection,
    task: TaskRow,
    owner: str | None,
    epoch: int,
    patch: Patch,
    lease_ttl_s: float,
    actor: str | None,
    *,
    lean: bool,
    unheld: bool = False,
    events: Sequence[PendingEvent] = (),
) -> tuple[TaskRow | None, Dispatch | None]:
    """The one write path.

    Raises `IllegalTransition` before touching the database, `StaleTransition` when the CAS finds
    zero rows (another worker or a sweeper committed first: the caller must stop), and
    `ApprovalError` when an approval the patch consumes is no longer usable (the transaction is
    then rolled back by the caller's context manager, so neither the intent nor the status lands).
    """
    check_transition(task.status, patch.to)
    dispatch = needs_dispatch(patch)
    # Who moved it: the lease owner, or a sweeper acting on a lapsed lease.
    data = {**patch.data, "by": actor or owner}
    pg = conn.dialect.name == "postgresql"
    ride = rides(patch, lean=lean) if pg else None
    cas = _cas_postgres if pg else _cas_generic
    row = cas(
        conn,
        task,
        lean=lean,
        owner=owner,
        epoch=epoch,
        patch=patch,
        lease_ttl_s=lease_ttl_s,
        dispatch=dispatch,
        data=data,
        unheld=unheld,
        events=events,
        ride=ride,
    )
    if row is None:
        raise StaleTransition(task.id, task.version, epoch)
    new = None if lean and pg else task_from_row(row)
    if ride in _INTENT_RIDES:
        _check_intent(conn, task.id, patch, row)
    elif ride is None:  # else the compare-and-set's statement wrote it
        _write_effect(conn, task.id, patch)
        _write_approval(conn, task, patch)
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
    return new, (Dispatch(task.id, task.tenant_id) if dispatch else None)


# Postgres: the guarded UPDATE and the event INSERTs in one statement, one round trip. The
# INSERT reads the UPDATE's RETURNING, so when the CAS matches no row no event is written either.
# `:held` is the step's held events (a JSON array, `held_events`, `[]` for none), numbered
# before the transition's own event and dated `ago` seconds before the database's clock: a
# leased step's whole commit, what its hooks recorded and its transition, is this one statement.
_PG_CAS_TEMPLATE = """
WITH u AS (
  UPDATE tasks SET
    status = :to_status,
    version = version + 1,
    event_seq = event_seq + 1 + :k,
    updated_at = now(),
    next_attempt_at = CASE WHEN CAST(:wake AS double precision) IS NULL THEN NULL
        ELSE now() + make_interval(secs => CAST(:wake AS double precision)) END,
    state = COALESCE(CAST(:state AS json), state),
    attempts = COALESCE(CAST(:attempts AS integer), attempts),
    last_error = CASE WHEN CAST(:last_error AS text) IS NOT NULL THEN CAST(:last_error AS text)
        WHEN CAST(:attempts AS integer) = 0 THEN NULL ELSE last_error END,
    outcome = COALESCE(CAST(:outcome AS jsonb), outcome),
    lease_owner = CASE WHEN :keep THEN lease_owner ELSE NULL END,
    lease_expires_at = CASE WHEN :keep
        THEN now() + make_interval(secs => CAST(:ttl AS double precision)) ELSE NULL END,
    dispatched_at = CASE WHEN :dispatch THEN now() ELSE dispatched_at END
  WHERE id = :id AND version = :version AND lease_epoch = :epoch
    AND lease_owner IS NOT DISTINCT FROM CAST(:owner AS varchar){guard}
  RETURNING {returning}
), e AS (
  INSERT INTO task_events (task_id, seq, type, from_status, to_status, data, trace_id, at)
  SELECT u.id, u.event_seq - 1 - :k + x.n, x.type, :from_status, NULL, x.data, u.trace_id,
         now() - make_interval(secs => x.ago)
  FROM u, jsonb_to_recordset(CAST(:held AS jsonb))
    AS x(n integer, type varchar, data jsonb, ago double precision)
  UNION ALL
  SELECT id, event_seq, :event, :from_status, :to_status, CAST(:data AS jsonb), trace_id, now()
  FROM u
){extra}
SELECT {selected} FROM u
"""
_ALL_COLUMNS = columns_sql(tasks)
# Prepared once per connection (see `prepared`): planning the CTE costs about as much as
# running it. The types are those of the columns each parameter is compared with or written to.
_CAS_TYPES = {
    "to_status": "varchar",
    "wake": "double precision",
    "state": "json",
    "attempts": "integer",
    "last_error": "text",
    "outcome": "jsonb",
    "keep": "boolean",
    "ttl": "double precision",
    "dispatch": "boolean",
    "id": "varchar",
    "version": "integer",
    "epoch": "integer",
    "owner": "varchar",
    "event": "varchar",
    "from_status": "varchar",
    "data": "jsonb",
    "k": "integer",
    "held": "jsonb",
}


def _cas_statement(
    name: str,
    *,
    full: bool,
    guard: str = "",
    extra: str = "",
    types: dict[str, str] = _CAS_TYPES,
    counted: tuple[str, ...] = (),
) -> prepared.Prepared:
    """One form of the compare-and-set: returning the whole new row (`full`), or only what a
    caller that needs no row back uses (a lean commit: the task's id); `guard` adds to its
    WHERE, `extra` adds CTEs that read `u`, the updated row; `counted` names CTEs whose rows
    are counted beside the row (`aj_<cte>`), for the caller to check."""
    returning, selected = (
        (_ALL_COLUMNS, _ALL_COLUMNS) if full else ("id, event_seq, trace_id", "id")
    )
    columns: tuple[Column[Any], ...] = tuple(tasks.c) if full else (tasks.c.id,)
    for cte in counted:
        selected += f", (SELECT count(*) FROM {cte}) AS aj_{cte}"
        columns += (Column(f"aj_{cte}", Integer),)
    sql = _PG_CAS_TEMPLATE.format(returning=returning, selected=selected, guard=guard, extra=extra)
    return prepared.from_text(name, sql, types, columns)


_PG_CAS = _cas_statement("aj_cas", full=True)
# The same, for callers that need no new row back (a quick step): only what the event needs.
_PG_CAS_LEAN = _cas_statement("aj_cas_lean", full=False)
# A quick step that started from the row a previous commit returned, not from a read: what
# version, epoch and owner do not already pin is the gate's hold and a cancel requested since
# that row was written (a cancel bumps neither; the claim pins it through the event count). A
# lost compare-and-set sends the step back to a read, which sees both.
_UNHELD_GUARD = """
    AND held_since IS NULL
    AND (CAST(:cancel_seen AS boolean) OR cancel_requested_at IS NULL)"""
_PG_CAS_UNHELD = _cas_statement(
    "aj_cas_unheld", full=True, guard=_UNHELD_GUARD, types=_CAS_TYPES | {"cancel_seen": "boolean"}
)

# The records a step's commit writes besides the row and its events, on Postgres: prepared like
# the CAS (SQLAlchemy Core's compilation of an `insert().values(...)` costs about 0.3 ms of CPU),
# each one text with two forms. `{task}` is where the task's id comes from and `{source}` what
# the statement reads: a statement of its own (`:..._task_id`, nothing) or a CTE riding in a
# compare-and-set's statement (`u.id`, `FROM u`, so it runs only if the CAS matched).
# SQLite runs the same through SQLAlchemy Core (`_write_effect`, `_write_approval`).
_EFFECT_OUTCOME = """
UPDATE effects SET status = :fx_status, result = CAST(:fx_result AS jsonb),
                   updated_at = now(){source}
WHERE effects.task_id = {task} AND effects.idempotency_key = :fx_key"""
_EFFECT_OUTCOME_TYPES = {
    "fx_status": "varchar",
    "fx_result": "jsonb",
    "fx_key": "varchar",
    "fx_task_id": "varchar",
}
_APPROVAL_REQUEST = """
INSERT INTO approvals (id, task_id, tenant_id, tool, tool_version, args, action_hash,
                       policy_version, requester, requester_principal, approver, status,
                       reason, created_at, expires_at, decided_at, used_at)
SELECT :ap_id, {task}, :ap_tenant, :ap_tool, :ap_tool_version, CAST(:ap_args AS jsonb),
       :ap_action_hash, :ap_policy_version, :ap_requester, :ap_requester_principal, NULL,
       'pending', :ap_reason, now(), now() + make_interval(secs => :ap_ttl), NULL, NULL{source}"""
_APPROVAL_REQUEST_TYPES = {
    "ap_id": "varchar",
    "ap_task_id": "varchar",
    "ap_tenant": "varchar",
    "ap_tool": "varchar",
    "ap_tool_version": "varchar",
    "ap_args": "jsonb",
    "ap_action_hash": "varchar",
    "ap_policy_version": "varchar",
    "ap_requester": "varchar",
    "ap_requester_principal": "varchar",
    "ap_reason": "varchar",
    "ap_ttl": "double precision",
}
_PG_EFFECT_OUTCOME = prepared.from_text(
    "aj_effect_outcome",
    _EFFECT_OUTCOME.format(task=":fx_task_id", source=""),
    _EFFECT_OUTCOME_TYPES,
)
_PG_APPROVAL_REQUEST = prepared.from_text(
    "aj_approval_request",
    _APPROVAL_REQUEST.format(task=":ap_task_id", source=""),
    _APPROVAL_REQUEST_TYPES,
)


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


# The effect intent and an approval's use, likewise: a statement of its own or a CTE riding in
# the intent's full compare-and-set, inside its transaction.
_EFFECT_INTENT = """
INSERT INTO effects (task_id, idempotency_key, tool, tool_version, action_hash, status, attempts,
                     result, created_at, updated_at)
SELECT {task}, :key, :tool, :tool_version, :action_hash, 'intent', 1, CAST('null' AS jsonb),
       now(), now(){source}
ON CONFLICT (task_id, idempotency_key) DO NOTHING
RETURNING task_id"""
_EFFECT_INTENT_TYPES = {
    "task_id": "varchar",
    "key": "varchar",
    "tool": "varchar",
    "tool_version": "varchar",
    "action_hash": "varchar",
}
# Single use, unexpired, granted: checked by the database in the intent's transaction.
_APPROVAL_USED = """
UPDATE approvals SET status = 'used', used_at = now(){source}
WHERE approvals.id = :approval_id AND approvals.task_id = {task}
  AND approvals.status = 'granted' AND approvals.used_at IS NULL AND approvals.expires_at > now()
RETURNING approvals.id"""
_APPROVAL_USED_TYPES = {"approval_id": "varchar", "task_id": "varchar"}
_PG_EFFECT_INTENT = prepared.from_text(
    "aj_effect_intent",
    _EFFECT_INTENT.format(task=":task_id", source=""),
    _EFFECT_INTENT_TYPES,
    (effects.c.task_id,),
)
_PG_APPROVAL_USED = prepared.from_text(
    "aj_approval_used",
    _APPROVAL_USED.format(task=":task_id", source=""),
    _APPROVAL_USED_TYPES,
    (approvals.c.id,),
)
_PG_APPROVAL_CLOSED = prepared.from_text(
    "aj_approval_closed",
    """
UPDATE approvals SET status = :status
WHERE id = :id AND task_id = :task_id AND status IN ('pending', 'granted')
RETURNING id
""",
    {"status": "varchar", "id": "varchar", "task_id": "varchar"},
    (approvals.c.id,),
)


# The compare-and-set with the records its patch carries in its own statement (`rides`), each
# a CTE reading `u`, the updated row, so it runs only if the CAS matched. A lean commit's one
# record: one round trip where BEGIN, the CAS, the record and COMMIT took four. The intent's,
# in its transaction: two round trips (it, and COMMIT) where the CAS, the intent, the use and
# COMMIT took four; the CTEs' rows are counted beside the row, and `_check_intent` raises on
# what did not land, which rolls the whole transaction back.
def _cte(name: str, record: str) -> str:
    return f",\n{name} AS ({record.format(task='u.id', source=' FROM u')}\n)"


_INTENT_CTE = _cte("fx", _EFFECT_INTENT)
_INTENT_TYPES = _CAS_TYPES | _EFFECT_INTENT_TYPES
_PG_CAS_RIDING = {
    "effect": _cas_statement(
        "aj_cas_lean_effect",
        full=False,
        extra=_cte("fx", _EFFECT_OUTCOME),
        types=_CAS_TYPES | _EFFECT_OUTCOME_TYPES,
    ),
    "approval": _cas_statement(
        "aj_cas_lean_approval",
        full=False,
        extra=_cte("ar", _APPROVAL_REQUEST),
        types=_CAS_TYPES | _APPROVAL_REQUEST_TYPES,
    ),
    "intent": _cas_statement(
        "aj_cas_intent", full=True, extra=_INTENT_CTE, types=_INTENT_TYPES, counted=("fx",)
    ),
    "intent_used": _cas_statement(
        "aj_cas_intent_used",
        full=True,
        extra=_INTENT_CTE + _cte("au", _APPROVAL_USED),
        types=_INTENT_TYPES | _APPROVAL_USED_TYPES,
        counted=("fx", "au"),
    ),
}
_INTENT_RIDES = frozenset({"intent", "intent_used"})


def _riding(task: TaskRow, patch: Patch, ride: str) -> dict[str, Any]:
    """The parameters of the records that ride in the compare-and-set (`_PG_CAS_RIDING`)."""
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


def _json(value: Any) -> str | None:
    return None if value is None else to_json(value)


def _cas_postgres(
    conn: Connection,
    task: TaskRow,
    *,
    owner: str | None,
    epoch: int,
    patch: Patch,
    lease_ttl_s: float,
    dispatch: bool,
    data: dict[str, Any],
    lean: bool = False,
    unheld: bool = False,
    events: Sequence[PendingEvent] = (),
    ride: str | None = None,
) -> RowLike | None:
    extra: dict[str, Any] = {}
    if ride is not None:
        chosen, extra = _PG_CAS_RIDING[ride], _riding(task, patch, ride)
    elif unheld:
        chosen, extra = _PG_CAS_UNHELD, {"cancel_seen": task.cancel_requested_at is not None}
    else:
        chosen = _PG_CAS_LEAN if lean else _PG_CAS
    return prepared.execute(
        conn,
        chosen,
        {
            "to_status": patch.to.value,
            "wake": patch.wake_in_s,
            "state": _json(patch.state),
            "attempts": patch.attempts,
            "last_error": patch.last_error,
            "outcome": _json(patch.outcome),
            "keep": patch.keep_lease,
            "ttl": lease_ttl_s,
            "dispatch": dispatch,
            "id": task.id,
            "version": task.version,
            "epoch": epoch,
            "owner": owner,
            "event": patch.event,
            "from_status": task.status.value,
            "data": _json(data),
            "k": len(events),
            "held": held_events(events),
            **extra,
        },
    ).first()


def _cas_generic(
    conn: Connection,
    task: TaskRow,
    *,
    owner: str | None,
    epoch: int,
    patch: Patch,
    lease_ttl_s: float,
    dispatch: bool,
    data: dict[str, Any],
    lean: bool = False,
    unheld: bool = False,
    events: Sequence[PendingEvent] = (),
    ride: str | None = None,
) -> RowLike | None:
    """The same compare-and-set as statements of their own (SQLite has no data-modifying
    CTEs): the guarded UPDATE, which reserves the events' numbers, then the held events and the
    transition's own, as the Postgres statement numbers them."""
    values: dict[str, Any] = {
        "status": patch.to.value,
        "version": tasks.c.version + 1,
        "event_seq": tasks.c.event_seq + 1 + len(events),
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
    if patch.keep_lease:
        values["lease_expires_at"] = db_now_plus(lease_ttl_s)
    else:
        values["lease_owner"] = None
        values["lease_expires_at"] = None
    if dispatch:
        values["dispatched_at"] = db_now()
    guard = (
        (tasks.c.id == task.id)
        & (tasks.c.version == task.version)
        & (tasks.c.lease_epoch == epoch)
        & (tasks.c.lease_owner.is_(None) if owner is None else tasks.c.lease_owner == owner)
    )
    if unheld:
        guard = guard & tasks.c.held_since.is_(None)
        if task.cancel_requested_at is None:
            guard = guard & tasks.c.cancel_requested_at.is_(None)
    row = conn.execute(update(tasks).where(guard).values(**values).returning(tasks)).first()
    if row is None:
        return None
    seq = int(row._mapping["event_seq"])
    _insert_held(conn, task.id, seq - 1, events, task.status.value, task.trace_id)
    _insert_event(
        conn, task.id, seq, patch.event, task.status.value, patch.to.value, data, task.trace_id
    )
    return row


def _insert_held(  # noqa: PLR0917 - the rows' shared columns
    conn: Connection,
    task_id: str,
    last_seq: int,
    events: Sequence[PendingEvent],
    from_status: str,
    trace_id: str,
) -> None:
    """`events`, numbered up to `last_seq` (reserved on the row by the caller), each dated when
    it happened: SQLite's statements for what Postgres's CTEs insert from `held_events`."""
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
    from_status: str,
    to_status: str | None,
    data: dict[str, Any],
    trace_id: str,
    *,
    ago_s: float = 0.0,
) -> None:
    """One `task_events` row, numbered by the caller, dated `ago_s` before the database's clock
    (SQLite's paths; Postgres writes events inside its CTEs)."""
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


def _write_effect(conn: Connection, task_id: str, patch: Patch) -> None:
    eff = patch.effect
    if eff is None:
        return
    action = eff.action
    pg = conn.dialect.name == "postgresql"
    if eff.status == "intent":
        # Intent before effect (invariant 3). The first intent for a key inserts its row (one
        # statement: `ON CONFLICT DO NOTHING` says whether it was there). A retry after
        # "reconcile found nothing" reuses the row and its key (`_reuse_intent`).
        if pg:
            values = _effect_intent_values(task_id, action)
            inserted = prepared.execute(conn, _PG_EFFECT_INTENT, values).first()
        else:
            inserted = conn.execute(
                insert_ignore(conn.dialect.name, effects)
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
        if inserted is None:
            _reuse_intent(conn, task_id, action)
        return
    if pg:
        prepared.execute(conn, _PG_EFFECT_OUTCOME, _effect_outcome_values(task_id, eff))
        return
    conn.execute(
        update(effects)
        .where(
            (effects.c.task_id == task_id) & (effects.c.idempotency_key == action.idempotency_key)
        )
        .values(status=eff.status, result=eff.result, updated_at=db_now())
    )


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
    """What the riding intent's CTEs did (`_PG_CAS_RIDING`), checked as the statements of
    their own are: a key already there is reused only for the same action, and an approval
    no longer usable raises, rolling back the compare-and-set and the intent with it."""
    assert patch.effect is not None
    m = row._mapping
    if not m["aj_fx"]:
        _reuse_intent(conn, task_id, patch.effect.action)
    use = patch.approval_use
    if use is not None and not m["aj_au"]:
        raise _unusable(use)


def _write_approval(conn: Connection, task: TaskRow, patch: Patch) -> None:
    pg = conn.dialect.name == "postgresql"
    req = patch.approval_request
    if req is not None and pg:
        prepared.execute(conn, _PG_APPROVAL_REQUEST, _approval_request_values(task, req))
    elif req is not None:
        conn.execute(
            insert(approvals).values(
                id=req.approval_id,
                task_id=task.id,
                tenant_id=task.tenant_id,
                tool=req.action.tool,
                tool_version=req.action.tool_version,
                args=req.action.args,
                action_hash=req.action.action_hash,
                policy_version=req.policy_version,
                requester=req.requester,
                requester_principal=principal(req.requester),
                approver=None,
                status="pending",
                reason=req.reason[:500],
                created_at=db_now(),
                expires_at=db_now_plus(req.ttl_s),
                decided_at=None,
                used_at=None,
            )
        )
    use = patch.approval_use
    if use is None:
        return
    if pg:
        if use.status == "used":
            stmt, values = _PG_APPROVAL_USED, _approval_used_values(task.id, use)
        else:
            values = {"id": use.approval_id, "task_id": task.id, "status": use.status}
            stmt = _PG_APPROVAL_CLOSED
        done = prepared.execute(conn, stmt, values).first()
    else:
        done = conn.execute(_approval_use(task, use)).first()
    if done is None and use.status == "used":
        raise _unusable(use)


def _unusable(use: ApprovalUse) -> ApprovalError:
    return ApprovalError(use.approval_id, "no longer usable (used, expired or not granted)")


def _approval_use(task: TaskRow, use: ApprovalUse) -> Any:
    """SQLite's form of `_PG_APPROVAL_USED` and `_PG_APPROVAL_CLOSED`."""
    guard = (approvals.c.id == use.approval_id) & (approvals.c.task_id == task.id)
    if use.status == "used":
        guard = (
            guard
            & (approvals.c.status == "granted")
            & approvals.c.used_at.is_(None)
            & (approvals.c.expires_at > db_now())
        )
        values: dict[str, Any] = {"status": "used", "used_at": db_now()}
    else:
        guard = guard & approvals.c.status.in_(("pending", "granted"))
        values = {"status": use.status}
    return update(approvals).where(guard).values(**values).returning(approvals.c.id)


def append_event(
    conn: Connection, task_id: str, type_: str, data: dict[str, Any], *, ago_s: float = 0.0
) -> None:
    """Append an event that changes no status (audit records, late results, decisions), dated
    `ago_s` seconds before the database's clock: `append_pending` with one event."""
    if not append_pending(conn, task_id, [PendingEvent(type_, data, time.monotonic() - ago_s)]):
        raise LookupError(task_id)


# Several events in one statement: the sequence numbers reserved on the row, the rows inserted
# from a JSON array (`held_events`), each dated `ago` seconds before the database's clock. All
# of them or, when the task is not there, none: the first returned number says which.
_PG_EVENTS = prepared.from_text(
    "aj_events",
    """
WITH u AS (
  UPDATE tasks SET event_seq = event_seq + :k
  WHERE id = :id
  RETURNING event_seq, trace_id, status
)
INSERT INTO task_events (task_id, seq, type, from_status, to_status, data, trace_id, at)
SELECT :id, u.event_seq - :k + x.n, x.type, u.status, NULL, x.data, u.trace_id,
       now() - make_interval(secs => x.ago)
FROM u, jsonb_to_recordset(CAST(:events AS jsonb))
  AS x(n integer, type varchar, data jsonb, ago double precision)
RETURNING seq
""",
    {"k": "integer", "id": "varchar", "events": "jsonb"},
    (task_events.c.seq,),
)


def held_events(events: Sequence[PendingEvent]) -> str:
    """`events` as the JSON array the Postgres statements read (`jsonb_to_recordset`): each
    one's place (1..n), type, data, and how many seconds ago it happened."""
    now = time.monotonic()
    return to_json(
        [
            {"n": i, "type": e.type, "data": e.data, "ago": max(0.0, now - e.at)}
            for i, e in enumerate(events, start=1)
        ]
    )


def append_pending(conn: Connection, task_id: str, events: Sequence[PendingEvent]) -> bool:
    """Write held events, in order, dated when they happened: those of a step that ends without
    a commit of its own (a step that commits writes its events inside its compare-and-set).
    Their numbers are reserved on the row, then the rows written: on Postgres in one statement,
    False when the task is not there; on SQLite the same two steps (`LookupError` when the task
    is not there)."""
    if not events:
        return True
    if conn.dialect.name == "postgresql":
        params = {"id": task_id, "k": len(events), "events": held_events(events)}
        return prepared.execute(conn, _PG_EVENTS, params).first() is not None
    row = conn.execute(
        update(tasks)
        .where(tasks.c.id == task_id)
        .values(event_seq=tasks.c.event_seq + len(events))
        .returning(tasks.c.event_seq, tasks.c.trace_id, tasks.c.status)
    ).first()
    if row is None:
        raise LookupError(task_id)
    last_seq, trace_id, status = row
    _insert_held(conn, task_id, int(last_seq), events, status, trace_id)
    return True


def insert_ignore(dialect: str, table: Any) -> Any:
    """`INSERT ... ON CONFLICT DO NOTHING` for the running dialect."""
    if dialect == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)
