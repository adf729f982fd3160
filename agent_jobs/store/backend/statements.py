"""The SQLAlchemy Core statements both backends run: SQLite as they are, Postgres prepared by
name (`postgres_sql`), compiled once at import.

Built once, not per call: the claim runs for every step, and building the expression costs
more than running it. Claimable = not terminal, not held, lease free or lapsed, timer (if any)
due.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Column, bindparam, or_, select, text, update

from agent_jobs.core.contracts import Action
from agent_jobs.core.identity import principal
from agent_jobs.core.patch import ApprovalRequest
from agent_jobs.core.states import TERMINAL
from agent_jobs.store.rows import TaskRow
from agent_jobs.store.schema import approvals, tasks
from agent_jobs.store.types import UTCDateTime, commits_without_flush, db_now, db_now_plus

TERMINAL_VALUES = sorted(s.value for s in TERMINAL)
NOT_TERMINAL = text("tasks.status NOT IN (" + ", ".join(f"'{s}'" for s in TERMINAL_VALUES) + ")")

CLAIMABLE = (
    NOT_TERMINAL
    # A held task has no message on purpose; a stray duplicate must not run it past the gate.
    & tasks.c.held_since.is_(None)
    & or_(tasks.c.lease_expires_at.is_(None), tasks.c.lease_expires_at < db_now())
    & or_(tasks.c.next_attempt_at.is_(None), tasks.c.next_attempt_at <= db_now())
)
CLAIMABLE_ROW = select(tasks).where((tasks.c.id == bindparam("p_id")) & CLAIMABLE)
# Both claims commit without waiting for the disk (`commits_without_flush`): a claim is a lease,
# and the next synchronous commit (the step's) flushes it anyway; this saves a WAL flush a step.
CLAIM = (
    update(tasks)
    .where((tasks.c.id == bindparam("p_id")) & CLAIMABLE & commits_without_flush())
    .values(
        lease_owner=bindparam("p_owner"),
        lease_expires_at=db_now_plus(bindparam("p_ttl")),
        lease_epoch=tasks.c.lease_epoch + 1,
    )
    .returning(tasks)
)
# The claim of a row just read (`claimable_row`): guarded on what the read saw — version, event
# count and lease epoch (every write a step must see bumps one of them: a transition the version,
# a cancel or a decided approval the event count) — so the row itself need not come back.
CLAIM_SEEN = (
    update(tasks)
    .where(
        (tasks.c.id == bindparam("p_id"))
        & (tasks.c.version == bindparam("p_version"))
        & (tasks.c.event_seq == bindparam("p_seq"))
        & (tasks.c.lease_epoch == bindparam("p_epoch"))
        & CLAIMABLE
        & commits_without_flush()
    )
    .values(
        lease_owner=bindparam("p_owner"),
        lease_expires_at=db_now_plus(bindparam("p_ttl")),
        lease_epoch=tasks.c.lease_epoch + 1,
    )
    .returning(tasks.c.lease_epoch, tasks.c.lease_expires_at)
)


def claim_seen_values(task: TaskRow, owner: str, ttl_s: float) -> dict[str, Any]:
    """`CLAIM_SEEN`'s parameters: the row as read, and the lease to take."""
    return {
        "p_id": task.id,
        "p_version": task.version,
        "p_seq": task.event_seq,
        "p_epoch": task.lease_epoch,
        "p_owner": owner,
        "p_ttl": ttl_s,
    }


# The approval and the database's clock, read by every step that acts on a grant.
APPROVAL_NOW: Column[datetime] = Column("aj_db_now", UTCDateTime())
APPROVAL_AT_NOW = select(approvals, db_now().label(APPROVAL_NOW.name)).where(
    approvals.c.id == bindparam("id")
)

# The columns benchmark seeding writes (`Backend.seed_finished`), in the table's order.
SEED_COLUMNS = (
    "id, tenant_id, idempotency_key, payload_hash, workflow, requester, input, pinned, status, "
    "version, lease_owner, lease_expires_at, lease_epoch, next_attempt_at, dispatched_at, "
    "attempts, cancel_requested_at, state, outcome, event_seq, trace_id, created_at, updated_at"
)


def pending_approval_values(
    task: TaskRow, req: ApprovalRequest, approval_id: str, action: Action, reason: str
) -> dict[str, Any]:
    """An `approvals` row asked for `action` under `req` (its policy version and requester),
    pending: the request's own row or one of its group's (`approval_groups`). The times are
    the caller's (the clock for a request, the head's for its group)."""
    return {
        "id": approval_id,
        "task_id": task.id,
        "tenant_id": task.tenant_id,
        "tool": action.tool,
        "tool_version": action.tool_version,
        "args": action.args,
        "action_hash": action.action_hash,
        "policy_version": req.policy_version,
        "requester": req.requester,
        "requester_principal": principal(req.requester),
        "approver": None,
        "status": "pending",
        "reason": reason[:500],
    }
