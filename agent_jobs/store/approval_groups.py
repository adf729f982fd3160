"""Approval groups: one person's decision over the effects of a plan.

A group is the approvals rows of one request (`ApprovalRequest.members`): the head, which its task
waits on, and one row per other effect, each bound to its own action hash and used once at its
turn, all sharing `group_id` (the head's id) and the head's times, so they expire together. A
decision on the head decides every pending row of its group in the same transaction; a grant
found for an effect of the plan at its turn is consumed with its intent like any other
(`store.transition`). Every statement names the task too (`ix_approvals_task` serves them).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Connection, insert, select, update

from agent_jobs.core.contracts import ApprovalView
from agent_jobs.core.identity import principal
from agent_jobs.core.patch import ApprovalRequest
from agent_jobs.store.backend.statements import pending_approval_values
from agent_jobs.store.rows import TaskRow, approval_from_row
from agent_jobs.store.schema import approvals
from agent_jobs.store.types import db_now


def request_members(conn: Connection, task: TaskRow, req: ApprovalRequest) -> None:
    """The group's other rows, written after its head in the head's transaction."""
    if not req.members:
        return
    head = req.approval_id
    of_head = approvals.c.id == head
    # The head's own times, not the clock again: the group is asked, and expires, at once.
    created = select(approvals.c.created_at).where(of_head).scalar_subquery()
    expires = select(approvals.c.expires_at).where(of_head).scalar_subquery()
    for m in req.members:
        conn.execute(
            insert(approvals).values(
                **pending_approval_values(task, req, m.approval_id, m.action, m.reason),
                created_at=created,
                expires_at=expires,
                group_id=head,
            )
        )
    conn.execute(update(approvals).where(of_head).values(group_id=head))


def decide_members(conn: Connection, head: ApprovalView, approver: str, status: str) -> int:
    """Decide the group's other pending rows as its head was just decided (same transaction):
    the same approver, never the requester (the database's constraints say so too)."""
    who = principal(approver)
    done = conn.execute(
        update(approvals)
        .where(
            (approvals.c.task_id == head.task_id)
            & (approvals.c.group_id == head.approval_id)
            & (approvals.c.id != head.approval_id)
            & (approvals.c.status == "pending")
            & (approvals.c.requester_principal != who)
        )
        .values(status=status, approver=approver, approver_principal=who, decided_at=db_now())
        .returning(approvals.c.id)
    ).all()
    return len(done)


def group_of(conn: Connection, task_id: str, group_id: str) -> list[ApprovalView]:
    """The rows of one group in the plan's order: its head, then `member_id(head, 1)`, ..."""
    rows = conn.execute(
        select(approvals)
        .where((approvals.c.task_id == task_id) & (approvals.c.group_id == group_id))
        .order_by(approvals.c.id)
    ).all()
    return [approval_from_row(r) for r in rows]


def member_id(head: str, position: int) -> str:
    """The id of a group's `position`th other row (1, 2, ...): the head's with a suffix, so the
    ids sort in the plan's order (a plan has at most `agents.MAX_EFFECTS`; 40 characters)."""
    return f"{head}-{position:02d}"


def granted_in_plan(
    conn: Connection, task_id: str, action_hash: str
) -> tuple[ApprovalView, datetime] | None:
    """A group's grant of this exact action for this task, not used yet, with the database's
    clock (the step judges its expiry and policy version, `validate_grant`)."""
    row = conn.execute(
        select(approvals, db_now().label("aj_db_now"))
        .where(
            (approvals.c.task_id == task_id)
            & (approvals.c.action_hash == action_hash)
            & (approvals.c.status == "granted")
            & approvals.c.group_id.is_not(None)
        )
        .order_by(approvals.c.created_at.desc())
        .limit(1)
    ).first()
    if row is None:
        return None
    now = row._mapping["aj_db_now"]
    assert isinstance(now, datetime)
    return approval_from_row(row), now
