"""Persistence. The only package that imports SQLAlchemy; everything else goes through `Store`."""

from agent_jobs.store.approvals import DecisionResult
from agent_jobs.store.guard import Guard
from agent_jobs.store.rows import (
    CommitResult,
    CreateResult,
    Dispatch,
    Lease,
    PendingEvent,
    TaskRow,
)
from agent_jobs.store.store import CancelResult, Store
from agent_jobs.store.submissions import RejectedSubmission

__all__ = [
    "CancelResult",
    "CommitResult",
    "CreateResult",
    "DecisionResult",
    "Dispatch",
    "Guard",
    "Lease",
    "PendingEvent",
    "RejectedSubmission",
    "Store",
    "TaskRow",
]
