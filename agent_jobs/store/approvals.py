"""Approvals: read them, list them, decide one (and wake its task) — invariant 8's store side."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Column, Connection, and_, bindparam, select, update

from agent_jobs.core.contracts import ApprovalView
from agent_jobs.core.errors import ApprovalError, RecordNotFound, SelfApproval
from agent_jobs.core.identity import principal, same_principal
from agent_jobs.core.states import Status
from agent_jobs.core.text import cut, to_json
from agent_jobs.store import prepared
from agent_jobs.store.base import StoreBase
from agent_jobs.store.rows import Dispatch, approval_from_row
from agent_jobs.store.schema import approvals, columns_sql, tasks
from agent_jobs.store.types import UTCDateTime, db_now
from agent_jobs.store.writes import append_event

# The approval and the database's clock, read by every step that acts on a grant: prepared on
# Postgres, so that step pays no statement compilation.
_NOW: Column[datetime] = Column("aj_db_now", UTCDateTime())
_AT_NOW = prepared.from_clause(
    "aj_approval_at_now",
    select(approvals, db_now().label(_NOW.name)).where(approvals.c.id == bindparam("id")),
    {"id": "varchar"},
    (*approvals.c, _NOW),
)


# A decision on Postgres, in one statement on an autocommit connection: the approval decided
# (pending, unexpired, and not by its requester's principal), its task woken if it waits in
# APPROVAL_WAIT, and the decision's event appended, as the three statements of SQLite's path
# below do in one transaction. The approval's foreign key keeps its task there, so the task's
# UPDATE always finds the row when the approval's did.
_PG_DECIDE = prepared.from_text(
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
            row = prepared.execute(conn, _AT_NOW, {"id": approval_id}).first()
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
        data = {"approval_id": approval_id, "approver": approver, "note": cut(note, 200)}
        if self.dialect == "postgresql":
            return self._decide_pg(approval_id, approver, status, data)
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
                raise ApprovalError(approval_id, _refusal(conn, approval_id))
            view = approval_from_row(row)
            woke = conn.execute(
                update(tasks)
                .where(
                    (tasks.c.id == view.task_id) & (tasks.c.status == Status.APPROVAL_WAIT.value)
                )
                .values(next_attempt_at=db_now(), dispatched_at=db_now())
                .returning(tasks.c.tenant_id)
            ).scalar()
            append_event(conn, view.task_id, f"approval_{status}", data)
        return _decided(view, woke)

    def _decide_pg(
        self, approval_id: str, approver: str, status: str, data: dict[str, Any]
    ) -> DecisionResult:
        values = {
            "status": status,
            "approver": approver,
            "approver_principal": principal(approver),
            "id": approval_id,
            "waiting": Status.APPROVAL_WAIT.value,
            "event": f"approval_{status}",
            "data": to_json(data),
        }
        with self.autocommit() as conn:
            row = prepared.execute(conn, _PG_DECIDE, values).first()
            if row is None:
                raise ApprovalError(approval_id, _refusal(conn, approval_id))
        view = approval_from_row(row)
        m = row._mapping
        if m["aj_tenant"] is None:  # the foreign key makes this impossible; never silent
            raise LookupError(view.task_id)
        return _decided(view, m["aj_tenant"] if m["aj_woke"] else None)


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
