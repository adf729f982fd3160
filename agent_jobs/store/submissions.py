"""Submissions that created nothing (a Celery-native submit with a bad token, say), with why."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select

from agent_jobs.store.base import StoreBase
from agent_jobs.store.schema import rejected_submissions
from agent_jobs.store.types import db_now


@dataclass(frozen=True)
class RejectedSubmission:
    """A submission that created nothing, and why (see `record_rejected_submission`)."""

    id: str
    via: str
    reason_code: str
    reason: str
    tenant_id: str | None
    subject: str | None
    claimed_tenant: str | None
    idempotency_key: str | None
    message_id: str | None
    at: datetime


class SubmissionStore(StoreBase):
    def record_rejected_submission(
        self,
        record_id: str,
        *,
        via: str,
        reason_code: str,
        reason: str,
        tenant_id: str | None = None,
        subject: str | None = None,
        claimed_tenant: str | None = None,
        idempotency_key: str | None = None,
        message_id: str | None = None,
    ) -> bool:
        """Record a submission that created nothing. Idempotent on `record_id` (a redelivered
        message is recorded once); True when this call wrote the row."""
        stmt = (
            self.backend.insert_ignore(rejected_submissions)
            .values(
                id=record_id[:80],
                via=via[:16],
                reason_code=reason_code[:64],
                reason=reason[:500],
                tenant_id=tenant_id,
                subject=subject[:255] if subject else None,
                claimed_tenant=claimed_tenant[:63] if claimed_tenant else None,
                idempotency_key=idempotency_key[:255] if idempotency_key else None,
                message_id=message_id[:255] if message_id else None,
                at=db_now(),
            )
            .on_conflict_do_nothing(index_elements=["id"])
        )
        with self.tx() as conn:
            return conn.execute(stmt).rowcount == 1

    def rejected_submissions(
        self, tenant_id: str | None = None, *, record_id: str | None = None, limit: int = 100
    ) -> list[RejectedSubmission]:
        """The newest rejected submissions, optionally of one (verified) tenant or one id."""
        q = select(rejected_submissions).order_by(rejected_submissions.c.at.desc()).limit(limit)
        if tenant_id is not None:
            q = q.where(rejected_submissions.c.tenant_id == tenant_id)
        if record_id is not None:
            q = q.where(rejected_submissions.c.id == record_id)
        with self.engine.connect() as conn:
            return [RejectedSubmission(**dict(r._mapping)) for r in conn.execute(q)]

    def prune_rejected_submissions(self, older_than_s: float, limit: int) -> int:
        """Delete up to `limit` rejected submissions recorded more than `older_than_s` ago (by
        the database clock), oldest first, through the index on `at`; the number deleted."""
        before = self.db_now() - timedelta(seconds=older_than_s)
        oldest = (
            select(rejected_submissions.c.id)
            .where(rejected_submissions.c.at < before)
            .order_by(rejected_submissions.c.at)
            .limit(limit)
        )
        # Two sweepers at once split the rows instead of queueing on each other's locks.
        oldest = self.backend.skip_locked(oldest)
        stmt = delete(rejected_submissions).where(
            rejected_submissions.c.id.in_(oldest.scalar_subquery())
        )
        with self.tx() as conn:
            return int(conn.execute(stmt).rowcount or 0)
