"""Bounded growth: finished tasks past their retention are archived, then pruned, in batches.

A task that ended (COMPLETED, ESCALATED, FAILED, CANCELLED) more than the retention ago is read
with everything that hangs off it — events, effects, approvals, dead letters — handed to the
archive writer (which must have made it durable when it returns), and deleted in the same
transaction (the foreign keys cascade). Oldest first, through a partial index that holds only
finished tasks (`ix_tasks_finished`), so a prune costs what it removes and the hot path, which
never reads finished rows, does not see it. Two sweepers at once split the rows (SKIP LOCKED).

Pruning frees a task's idempotency key: the retention must be longer than any client retries a
submission.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Table, delete, select

from agent_jobs.core.states import TERMINAL
from agent_jobs.store.base import StoreBase
from agent_jobs.store.dead_letters import set_aside
from agent_jobs.store.rows import TaskRow, task_from_row
from agent_jobs.store.schema import approvals, dead_letters, effects, task_events, tasks
from agent_jobs.store.types import db_now

# An archived task: its row and every row that hangs off it, as JSON-ready values.
Record = dict[str, Any]
Writer = Callable[[list[Record]], None]
FINISHED = sorted(s.value for s in TERMINAL)


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def _rows(conn: Connection, table: Table, ids: Sequence[str], order: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {i: [] for i in ids}
    for row in conn.execute(select(table).where(table.c.task_id.in_(ids)).order_by(order)):
        m = row._mapping
        out[m["task_id"]].append({k: _jsonable(v) for k, v in m.items()})
    return out


class ArchiveStore(StoreBase):
    def prune_finished(
        self,
        older_than_s: float,
        limit: int,
        write: Writer,
        set_aside_row: Callable[[TaskRow, str], None] = lambda task, reason: None,
    ) -> int:
        """Archive (through `write`) and delete up to `limit` tasks that finished more than
        `older_than_s` ago by the database clock; the number pruned.

        A batch the writer refuses is written again one task at a time: a task whose record
        alone it refuses is kept, dead-lettered with the reason and its retention clock
        restarted (`dead_letters.set_aside`, reported to `set_aside_row`), and the others are
        archived and pruned. When it refuses every one, the writer is at fault, not a row: the
        error is raised and nothing is deleted."""
        before = self.db_now() - timedelta(seconds=older_than_s)
        oldest = (
            select(tasks)
            # A task that finished before the cutoff was created before it: the created_at
            # bound keeps the scan of the index (keyed on created_at, see migration 0009) to
            # the tasks created before the cutoff, so when nothing is due it reads nothing.
            # Of those, one created before the cutoff but finished after it is read and skipped
            # until it is due: only a task that lived across the cutoff.
            .where(
                tasks.c.status.in_(FINISHED)
                & (tasks.c.created_at < before)
                & (tasks.c.updated_at < before)
            )
            .order_by(tasks.c.created_at)
            .limit(limit)
        )
        oldest = self.backend.skip_locked(oldest)
        with self.tx() as conn:
            rows = conn.execute(oldest).all()
            found = [dict(r._mapping) for r in rows]
            if not found:
                return 0
            ids = [t["id"] for t in found]
            events = _rows(conn, task_events, ids, task_events.c.seq)
            effs = _rows(conn, effects, ids, effects.c.created_at)
            apprs = _rows(conn, approvals, ids, approvals.c.created_at)
            dead = _rows(conn, dead_letters, ids, dead_letters.c.at)
            records = [
                {
                    "task": {k: _jsonable(v) for k, v in t.items()},
                    "events": events[t["id"]],
                    "effects": effs[t["id"]],
                    "approvals": apprs[t["id"]],
                    "dead_letters": dead[t["id"]],
                }
                for t in found
            ]
            try:
                write(records)  # durable before the rows go; if it raises, nothing is deleted
            except Exception as exc:
                ids, refused = _write_each(records, write, exc)
                for row in rows:
                    if row.id in refused:
                        task = task_from_row(row)
                        reason = f"its archive record was refused: {refused[row.id]}"
                        set_aside(self.backend, conn, task, "archive", reason, undue=_RESTART)
                        set_aside_row(task, reason)
            conn.execute(delete(tasks).where(tasks.c.id.in_(ids)))
            return len(ids)

    def count_finished(self) -> int:
        """How many finished tasks the database holds (for benches and `agent-jobs status`)."""
        from sqlalchemy import func  # noqa: PLC0415

        q = select(func.count()).select_from(tasks).where(tasks.c.status.in_(FINISHED))
        with self.engine.connect() as conn:
            return int(conn.execute(q).scalar_one())


# A task set aside by the archive sweeper: its retention restarts, so that it is not met again
# at every sweep (a person reads its dead letter meanwhile).
_RESTART: dict[str, Any] = {"updated_at": db_now()}


def _write_each(
    records: list[Record], write: Writer, batch_error: Exception
) -> tuple[list[str], dict[str, str]]:
    """After `write` refused `records` together: the ids of those it takes one at a time, and
    why it refused each of the others; `batch_error` again when it takes none (the writer is
    at fault, not a row)."""
    written: list[str] = []
    refused: dict[str, str] = {}
    for record in records:
        task_id = str(record["task"]["id"])
        try:
            write([record])
        except Exception as exc:
            refused[task_id] = f"{type(exc).__name__}: {exc}"
            continue
        written.append(task_id)
    if not written:
        raise batch_error
    return written, refused
