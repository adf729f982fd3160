"""Approvals: read them, list them, decide one (and wake its task) — invariant 8's store side."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Column, and_, bindparam, select, update

from agent_jobs.core.contracts import ApprovalView
from agent_jobs.core.errors import ApprovalError, RecordNotFound, SelfApproval
from agent_jobs.core.identity import principal, same_principal
from agent_jobs.core.states import Status
from agent_jobs.core.text import cut
from agent_jobs.store import prepared
from agent_jobs.store.base import StoreBase
from agent_jobs.store.rows import Dispatch, approval_from_row
from agent_jobs.store.schema import approvals, tasks
from agent_jobs.store.types import UTCDateTime, db_now
from agent_jobs.store.writes import append_event

# The approval and the database's clock, read by every step that acts on a grant: prepared on
# Postgres, so that step pays no statement compilation.
_NOW: Column[datetime] = Column("aj_db_now", UTCDateTime())
_AT_NOW = select(approvals, db_now().label(_NOW.name)).where(approvals.c.id == bindparam("id"))
_PG_AT_NOW = prepared.from_text(
    "aj_approval_at_now",
    f"SELECT {', '.join(c.name for c in approvals.c)}, now() AS {_NOW.name} "
    "FROM approvals WHERE id = :id",
    {"id": "varchar"},
    (*approvals.c, _NOW),
)


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
            row = prepared.execute(conn, _PG_AT_NOW, _AT_NOW, {"id": approval_id}).first()
        if row is None:
            raise RecordNotFound(f"approval {approval_id} not found")
        now = row._mapping[_NOW.name]
        assert isinstance(now, datetime)
        return approval_from_row(row), now

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
        expired or already decided approvals, and another tenant's approval (as not found)."""
        current = self.approval(approval_id, tenant_id)
        if not approver.strip():
            raise ApprovalError(approval_id, "an approver must be named")
        # "Alice", " alice" and a full-width "Alice" are one person: compare principals.
        # The database's guard below and its check constraint compare the same principal.
        if same_principal(current.requester, approver):
            raise SelfApproval(approval_id)
        status = "granted" if grant else "denied"
        with self.tx() as conn:
            row = conn.execute(
                update(approvals)
                .where(
                    (approvals.c.id == approval_id)
                    & (approvals.c.status == "pending")
                    & (approvals.c.expires_at > db_now())
                    & (approvals.c.requester_principal != principal(approver))
                )
                .values(
                    status=status,
                    approver=approver,
                    approver_principal=principal(approver),
                    decided_at=db_now(),
                )
                .returning(approvals)
            ).first()
            if row is None:
                # Read on this connection: on SQLite a second one would wait on our write lock.
                fresh = conn.execute(
                    select(approvals.c.status).where(approvals.c.id == approval_id)
                ).scalar_one()
                reason = f"already {fresh}" if fresh != "pending" else "expired before the decision"
                raise ApprovalError(approval_id, reason)
            view = approval_from_row(row)
            woke = conn.execute(
                update(tasks)
                .where(
                    (tasks.c.id == view.task_id) & (tasks.c.status == Status.APPROVAL_WAIT.value)
                )
                .values(next_attempt_at=db_now(), dispatched_at=db_now())
                .returning(tasks.c.id, tasks.c.tenant_id)
            ).first()
            append_event(
                conn,
                view.task_id,
                f"approval_{status}",
                {"approval_id": approval_id, "approver": approver, "note": cut(note, 200)},
            )
        # APPROVAL_WAIT's step always runs under a lease: its message says to claim at once.
        dispatch = Dispatch(woke[0], woke[1], claim=True) if woke is not None else None
        return DecisionResult(view, dispatch)
