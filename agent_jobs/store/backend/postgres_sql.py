"""Every SQL text the Postgres backend runs, by name, each prepared by that name once per
connection (`store.prepared`): planning these costs about as much as running them.

The names are the statements' `PREPARE` names (`aj_*`), so a slow-query log, `pg_prepared_
statements` and this file agree. SQLite runs the same operations as SQLAlchemy Core statements
(`backend.sqlite`); the Core statements both run are in `backend.statements`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, Integer
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler

from agent_jobs.core.states import Status
from agent_jobs.store.backend import statements as core
from agent_jobs.store.backend.prepared import Prepared, from_clause, from_text
from agent_jobs.store.schema import approvals, columns_sql, effects, task_events, tasks
from agent_jobs.store.types import commits_without_flush, db_now, db_now_plus

# -- the database clock, as the Core statements say it (registered before the statements below
# are compiled) -------------------------------------------


@compiles(db_now, "postgresql")
def _now(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "now()"


@compiles(db_now_plus, "postgresql")
def _now_plus(element: db_now_plus, compiler: SQLCompiler, **kw: Any) -> str:
    (seconds,) = list(element.clauses)
    return f"(now() + make_interval(secs => {compiler.process(seconds, **kw)}))"


@compiles(commits_without_flush, "postgresql")
def _commits_without_flush(element: commits_without_flush, compiler: SQLCompiler, **kw: Any) -> str:
    return "set_config('synchronous_commit', 'off', true) = 'off'"


# -- tasks: create, read, claim ----------------------------------------------------------------

CLAIMABLE_ROW = from_clause(
    "aj_claimable_row", core.CLAIMABLE_ROW, {"p_id": "varchar"}, tuple(tasks.c)
)
CLAIM = from_clause(
    "aj_claim",
    core.CLAIM,
    {"p_id": "varchar", "p_owner": "varchar", "p_ttl": "double precision"},
    tuple(tasks.c),
)
CLAIM_SEEN = from_clause(
    "aj_claim_read",
    core.CLAIM_SEEN,
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
CREATE = from_text(
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


# -- the guarded write: a transition and the records that move with it ------------------------

# Postgres: the guarded UPDATE and the event INSERTs in one statement, one round trip. The
# INSERT reads the UPDATE's RETURNING, so when the CAS matches no row no event is written either.
# `:held` is the step's held events (a JSON array, `held_events`, `[]` for none), numbered
# before the transition's own event and dated `ago` seconds before the database's clock: a
# leased step's whole commit, what its hooks recorded and its transition, is this one statement.
_CAS_TEMPLATE = """
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
    outcome = CASE WHEN :replay THEN NULL ELSE COALESCE(CAST(:outcome AS jsonb), outcome) END,
    held_since = CASE WHEN :replay THEN NULL ELSE held_since END,
    held_for = CASE WHEN :replay THEN NULL ELSE held_for END,
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
    "replay": "boolean",
}


def _cas_statement(
    name: str,
    *,
    full: bool,
    guard: str = "",
    extra: str = "",
    types: dict[str, str] = _CAS_TYPES,
    counted: tuple[str, ...] = (),
) -> Prepared:
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
    sql = _CAS_TEMPLATE.format(returning=returning, selected=selected, guard=guard, extra=extra)
    return from_text(name, sql, types, columns)


CAS = _cas_statement("aj_cas", full=True)
# The same, for callers that need no new row back (a quick step): only what the event needs.
CAS_LEAN = _cas_statement("aj_cas_lean", full=False)
# A guard that pins more than version, epoch and owner (`Guard.seq`, `Guard.unheld`): a quick
# step that started from the row a previous commit returned, not from a read, pins the event
# count as that row had it (a cancel or a decided approval since bumps it, not the version)
# and that the gate does not hold the task. A lost compare-and-set sends the step back to a
# read, which sees both.
_PINNED_GUARD = """
    AND (CAST(:seq AS integer) IS NULL OR event_seq = CAST(:seq AS integer))
    AND (NOT CAST(:unheld AS boolean) OR held_since IS NULL)"""
CAS_PINNED = _cas_statement(
    "aj_cas_pinned",
    full=True,
    guard=_PINNED_GUARD,
    types=_CAS_TYPES | {"seq": "integer", "unheld": "boolean"},
)

# The records a step's commit writes besides the row and its events, on Postgres: prepared like
# the CAS (SQLAlchemy Core's compilation of an `insert().values(...)` costs about 0.3 ms of CPU),
# each one text with two forms. `{task}` is where the task's id comes from and `{source}` what
# the statement reads: a statement of its own (`:..._task_id`, nothing) or a CTE riding in a
# compare-and-set's statement (`u.id`, `FROM u`, so it runs only if the CAS matched).
# SQLite runs the same through SQLAlchemy Core (`_write_effect`, `_write_approval`).
_EFFECT_OUTCOME_SQL = """
UPDATE effects SET status = :fx_status, result = CAST(:fx_result AS jsonb),
                   updated_at = now(){source}
WHERE effects.task_id = {task} AND effects.idempotency_key = :fx_key"""
_EFFECT_OUTCOME_TYPES = {
    "fx_status": "varchar",
    "fx_result": "jsonb",
    "fx_key": "varchar",
    "fx_task_id": "varchar",
}
_APPROVAL_REQUEST_SQL = """
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
EFFECT_OUTCOME = from_text(
    "aj_effect_outcome",
    _EFFECT_OUTCOME_SQL.format(task=":fx_task_id", source=""),
    _EFFECT_OUTCOME_TYPES,
)
APPROVAL_REQUEST = from_text(
    "aj_approval_request",
    _APPROVAL_REQUEST_SQL.format(task=":ap_task_id", source=""),
    _APPROVAL_REQUEST_TYPES,
)


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
EFFECT_INTENT = from_text(
    "aj_effect_intent",
    _EFFECT_INTENT.format(task=":task_id", source=""),
    _EFFECT_INTENT_TYPES,
    (effects.c.task_id,),
)
APPROVAL_USED = from_text(
    "aj_approval_used",
    _APPROVAL_USED.format(task=":task_id", source=""),
    _APPROVAL_USED_TYPES,
    (approvals.c.id,),
)
APPROVAL_CLOSED = from_text(
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
# Keyed by what rides (`postgres.rides`).
CAS_RIDING = {
    "effect": _cas_statement(
        "aj_cas_lean_effect",
        full=False,
        extra=_cte("fx", _EFFECT_OUTCOME_SQL),
        types=_CAS_TYPES | _EFFECT_OUTCOME_TYPES,
    ),
    "approval": _cas_statement(
        "aj_cas_lean_approval",
        full=False,
        extra=_cte("ar", _APPROVAL_REQUEST_SQL),
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
# Several events in one statement: the sequence numbers reserved on the row, the rows inserted
# from a JSON array (`held_events`), each dated `ago` seconds before the database's clock. All
# of them or, when the task is not there, none: the first returned number says which.
EVENTS = from_text(
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


# -- approvals -----------------------------------------------------------------------------------

APPROVAL_AT_NOW = from_clause(
    "aj_approval_at_now",
    core.APPROVAL_AT_NOW,
    {"id": "varchar"},
    (*approvals.c, core.APPROVAL_NOW),
)

# A decision on Postgres, in one statement on an autocommit connection: the approval decided
# (pending, unexpired, and not by its requester's principal), its task woken if it waits in
# APPROVAL_WAIT, and the decision's event appended, as SQLite's three statements do in one
# transaction (`SqliteBackend.decide_approval`). The approval's foreign key keeps its task
# there, so the task's UPDATE always finds the row when the approval's did.
DECIDE = from_text(
    "aj_decide_approval",
    f"""
WITH a AS (
  UPDATE approvals SET status = :status, approver = :approver,
         approver_principal = :approver_principal, decided_at = now()
  WHERE id = :id AND status = 'pending' AND expires_at > now()
    AND requester_principal <> :approver_principal
  RETURNING {columns_sql(approvals)}
), t AS (
  UPDATE tasks SET
    event_seq = tasks.event_seq + 1,
    next_attempt_at = CASE WHEN tasks.status = :waiting THEN now() ELSE tasks.next_attempt_at END,
    dispatched_at = CASE WHEN tasks.status = :waiting THEN now() ELSE tasks.dispatched_at END
  FROM a WHERE tasks.id = a.task_id
  RETURNING tasks.id, tasks.tenant_id, tasks.event_seq, tasks.trace_id, tasks.status
), e AS (
  INSERT INTO task_events (task_id, seq, type, from_status, to_status, data, trace_id, at)
  SELECT t.id, t.event_seq, :event, t.status, NULL, CAST(:data AS jsonb), t.trace_id, now()
  FROM t
)
SELECT {columns_sql(approvals, "a")}, t.tenant_id AS aj_tenant,
       t.status = :waiting AS aj_woke
FROM a LEFT JOIN t ON true
""",
    {
        "status": "varchar",
        "approver": "varchar",
        "approver_principal": "varchar",
        "id": "varchar",
        "waiting": "varchar",
        "event": "varchar",
        "data": "jsonb",
    },
    tuple(approvals.c),
)
