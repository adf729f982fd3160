"""Persistence. The only package that imports SQLAlchemy; everything else goes through `Store`."""

from agent_jobs.store.rows import CommitResult, CreateResult, Dispatch, Lease, TaskRow
from agent_jobs.store.store import CancelResult, DecisionResult, Store

__all__ = [
    "CancelResult",
    "CommitResult",
    "CreateResult",
    "DecisionResult",
    "Dispatch",
    "Lease",
    "Store",
    "TaskRow",
]
