"""Dead letters: list them, and replay one (an operator resumes a FAILED task from its last
checkpoint) through the one guarded write and the replay table (`REPLAY_TRANSITIONS`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, insert, or_, select

from agent_jobs.core.errors import StaleTransition
from agent_jobs.core.patch import Patch
from agent_jobs.core.states import REPLAY_TRANSITIONS, Status
from agent_jobs.store.base import StoreBase
from agent_jobs.store.guard import Guard
from agent_jobs.store.rows import Dispatch, task_from_row
from agent_jobs.store.schema import dead_letter_replays, dead_letters, task_events, tasks
from agent_jobs.store.transition import apply
from agent_jobs.store.types import db_now

# Where a replayed task resumes: the status whose step dead-lettered, else RUNNING.
_REPLAY_INTO = REPLAY_TRANSITIONS[Status.FAILED]
REPLAYED_EVENT = "dead_letter_replayed"


@dataclass(frozen=True)
class ReplayResult:
    """`replayed`: this call resumed the task; False: nothing to do (already replayed, no such
    dead letter, or the task is no longer FAILED), with `reason`."""

    task_id: str
    replayed: bool
    reason: str
    resumed_as: str | None = None
    dispatch: Dispatch | None = None


class DeadLetterStore(StoreBase):
    # -- dead-letter replay --------------------------------------------------------------------

    def replay_dead_letter(self, task_id: str, *, actor: str, why: str) -> ReplayResult:
        """Resume a dead-lettered FAILED task from its last checkpoint (its state is kept).

        One transaction: read the dead letter and the row; the one guarded write
        (`transition.apply`, pinned on the row as read, checked against `REPLAY_TRANSITIONS`)
        to the status whose step failed (RUNNING unless it was RECEIVED or VERIFYING), with
        attempts reset, outcome, hold and last error cleared, a dispatch record and the
        `dead_letter_replayed` event; the dead letter moved to `dead_letter_replays`. A
        concurrent or repeated replay finds the dead letter gone or the row moved, and does
        nothing."""
        with self.tx() as conn:
            dl = (
                conn.execute(select(dead_letters).where(dead_letters.c.task_id == task_id))
                .mappings()
                .first()
            )
            if dl is None:
                done = conn.execute(
                    select(dead_letter_replays.c.replayed_at)
                    .where(dead_letter_replays.c.task_id == task_id)
                    .order_by(dead_letter_replays.c.replayed_at.desc())
                ).first()
                why_not = "already replayed" if done is not None else "no dead letter for this task"
                return ReplayResult(task_id, False, why_not)
            step = conn.execute(
                select(task_events.c.data)
                .where((task_events.c.task_id == task_id) & (task_events.c.type == "dead_lettered"))
                .order_by(task_events.c.seq.desc())
                .limit(1)
            ).scalar_one_or_none()
            into = Status.RUNNING
            raw = step.get("step") if isinstance(step, dict) else None
            if raw in {s.value for s in _REPLAY_INTO}:
                into = Status(raw)
            task = conn.execute(select(tasks).where(tasks.c.id == task_id)).first()
            if task is None or task.status != Status.FAILED.value:
                return ReplayResult(task_id, False, "the task is not FAILED")
            # Through the one guarded write and the replay table (`REPLAY_TRANSITIONS`): a
            # replay that ran meanwhile moved the version, and this one stops.
            patch = Patch(
                to=into,
                event=REPLAYED_EVENT,
                data={
                    "why": why[:500],
                    "dead_lettered_at": dl["at"].isoformat(),
                    "dead_letter_reason": str(dl["reason"])[:500],
                    "attempts_before": int(dl["attempts"]),
                },
                attempts=0,
                replay=True,
            )
            try:
                _, dispatch = apply(
                    self.backend, conn, Guard.seen(task_from_row(task)), patch,
                    actor=actor[:255], returning=False,
                )  # fmt: skip
            except StaleTransition:
                return ReplayResult(task_id, False, "the task is not FAILED")
            conn.execute(
                insert(dead_letter_replays).values(
                    task_id=task_id,
                    dead_lettered_at=dl["at"],
                    tenant_id=dl["tenant_id"],
                    workflow=dl["workflow"],
                    reason=dl["reason"],
                    attempts=dl["attempts"],
                    replayed_by=actor[:255],
                    why=why[:1000],
                    replayed_at=db_now(),
                )
            )
            conn.execute(delete(dead_letters).where(dead_letters.c.task_id == task_id))
        return ReplayResult(task_id, True, "replayed", resumed_as=into.value, dispatch=dispatch)

    def dead_letter_ids(
        self,
        *,
        tenant_id: str | None = None,
        workflow: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
    ) -> list[str]:
        """Dead letters matching a filter, oldest first (what a replay by filter walks)."""
        q = select(dead_letters.c.task_id).order_by(dead_letters.c.at).limit(limit)
        if tenant_id is not None:
            q = q.where(dead_letters.c.tenant_id == tenant_id)
        if workflow is not None:
            q = q.where(
                (dead_letters.c.workflow == workflow)
                if "@" in workflow
                else or_(
                    dead_letters.c.workflow == workflow,
                    dead_letters.c.workflow.like(f"{workflow}@%"),
                )
            )
        if since is not None:
            q = q.where(dead_letters.c.at >= since)
        if until is not None:
            q = q.where(dead_letters.c.at < until)
        with self.engine.connect() as conn:
            ids = [str(x) for x in conn.execute(q).scalars()]
            conn.rollback()
        return ids
