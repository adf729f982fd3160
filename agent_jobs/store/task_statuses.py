"""Many tasks' statuses in one read: what the API's long poll (`api/task_wait.py`) asks each
interval for every task it watches, whatever the number of callers waiting on them."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Engine, select

from agent_jobs.store.schema import tasks


def statuses(engine: Engine, task_ids: Sequence[str]) -> dict[str, str]:
    """task id -> status, for those of `task_ids` that exist (by primary key)."""
    if not task_ids:
        return {}
    q = select(tasks.c.id, tasks.c.status).where(tasks.c.id.in_(list(task_ids)))
    with engine.connect() as conn:
        return {str(i): str(s) for i, s in conn.execute(q)}
