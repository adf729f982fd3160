"""Approvals: read them, list them, decide one (and wake its task) — invariant 8's store side."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, and_, select

from agent_jobs.core.contracts import ApprovalView
from agent_jobs.core.errors import ApprovalError, RecordNotFound, SelfApproval
from agent_jobs.core.identity import same_principal
from agent_jobs.core.text import cut
from agent_jobs.store.approval_groups import decide_members, granted_in_plan, group_of
from agent_jobs.store.backend import Decision
from agent_jobs.store.backend.statements import APPROVAL_NOW
from agent_jobs.store.base import StoreBase
from agent_jobs.store.rows import Dispatch, approval_from_row
from agent_jobs.store.schema import approvals


@dataclass(frozen=True)
class DecisionResult:
    approval: ApprovalView
    dispatch: Dispatch | None


class ApprovalStore(StoreBase):
    def approval(self, approval_id: str, tenant_id: str | None = None) -> ApprovalView:
        cond = approvals.c.id == approval_id
        if tenant_id is not None:
            cond = cond & (approvals.c.tenant_id == tenant_id)
        with self.autocommit() as conn:
            row = conn.execute(select(approvals).where(cond)).first()
        if row is None:
            raise RecordNotFound(f"approval {approval_id} not found")
        return approval_from_row(row)

    def approval_at_now(self, approval_id: str) -> tuple[ApprovalView, datetime]:
        """The approval and the database's clock, read together (one round trip): what a step
        needs to judge whether a grant is still within its time."""
        with self.autocommit() as conn:
            row = self.backend.approval_at_now(conn, approval_id)
        if row is None:
            raise RecordNotFound(f"approval {approval_id} not found")
        now = row._mapping[APPROVAL_NOW.name]
        assert isinstance(now, datetime)
        return approval_from_row(row), now

    def approval_group(self, approval_id: str, tenant_id: str | None = None) -> list[ApprovalView]:
        """The approvals decided together with this one, in the plan's order (its head first);
        just this one when it is not in a group. Another tenant's is not found."""
        current = self.approval(approval_id, tenant_id)
        if current.group_id is None:
            return [current]
        with self.autocommit() as conn:
            return group_of(conn, current.task_id, current.group_id)

    def plan_grant(self, task_id: str, action_hash: str) -> tuple[ApprovalView, datetime] | None:
        """A grant of this exact action given with its plan's group, unused, and the database's
        clock: what the effect's turn consumes instead of asking a person again."""
        with self.autocommit() as conn:
            return granted_in_plan(conn, task_id, action_hash)

    def list_approvals(
        self,
        tenant_id: str | None,
        *,
        status: str | None = None,
        task_id: str | None = None,
        limit: int = 100,
    ) -> list[ApprovalView]:
        conds = []
        if tenant_id is not None:
            conds.append(approvals.c.tenant_id == tenant_id)
        if status is not None:
            conds.append(approvals.c.status == status)
        if task_id is not None:
            conds.append(approvals.c.task_id == task_id)
        q = (
            select(approvals)
            .where(and_(True, *conds))
            .order_by(approvals.c.created_at.desc())
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [approval_from_row(r) for r in conn.execute(q)]

    def decide_approval(
        self,
        approval_id: str,
        approver: str,
        *,
        grant: bool,
        tenant_id: str | None = None,
        note: str = "",
    ) -> DecisionResult:
        """Grant or deny a pending approval and wake its task. Refuses self-approval, decisions on
        expired or already decided approvals, and another tenant's approval (as not found).
        An approval of a group (a plan's effects asked together) is decided with its whole
        group, in one transaction: deciding any of them decides its head and every other."""
        current = self.approval(approval_id, tenant_id)
        if current.group_id is not None and current.group_id != approval_id:
            approval_id = current.group_id
            current = self.approval(approval_id, tenant_id)
        if not approver.strip():
            raise ApprovalError(approval_id, "an approver must be named")
        # "Alice", " alice" and a full-width "Alice" are one person: compare principals.
        # The database's guard below and its check constraint compare the same principal.
        if same_principal(current.requester, approver):
            raise SelfApproval(approval_id)
        status = "granted" if grant else "denied"
        data = {"approval_id": approval_id, "approver": approver, "note": cut(note, 200)}
        if current.group_id is not None:
            data["group_id"] = current.group_id
        # A group's rows are decided together or not at all: one transaction (one statement,
        # where the database makes that atomic, for a single approval).
        with self.tx() if current.group_id else self.autocommit() as conn:
            done = self.backend.decide_approval(conn, Decision(approval_id, approver, status, data))
            if done is None:
                # Read on this connection: on SQLite a second one would wait on our write lock.
                raise ApprovalError(approval_id, _refusal(conn, approval_id))
            if current.group_id is not None:
                decide_members(conn, current, approver, status)
        row, woken_tenant = done
        return _decided(approval_from_row(row), woken_tenant)


def _decided(view: ApprovalView, woken_tenant: str | None) -> DecisionResult:
    """The decision, and the step to publish when it woke its task (`woken_tenant`: the task's
    tenant). APPROVAL_WAIT's step always runs under a lease: its message says to claim at once."""
    if woken_tenant is None:
        return DecisionResult(view, None)
    return DecisionResult(view, Dispatch(view.task_id, woken_tenant, claim=True))


def _refusal(conn: Connection, approval_id: str) -> str:
    """Why a decision found nothing to decide: already decided, or expired."""
    fresh = conn.execute(select(approvals.c.status).where(approvals.c.id == approval_id))
    status = fresh.scalar_one()
    return f"already {status}" if status != "pending" else "expired before the decision"
