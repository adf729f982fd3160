"""Dead letters: list them, replay one (an operator resumes a FAILED task from its last
checkpoint) through the one guarded write and the replay table (`REPLAY_TRANSITIONS`), and set
aside a row a sweeper cannot move (`set_aside`), so that one bad row never stops a sweep."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, func, insert, or_, select, update

from agent_jobs.core.errors import StaleTransition
from agent_jobs.core.patch import Patch
from agent_jobs.core.states import EFFECT_IN_FLIGHT, REPLAY_TRANSITIONS, Status, is_legal
from agent_jobs.store.backend import Backend
from agent_jobs.store.base import UNAVAILABLE, StoreBase
from agent_jobs.store.guard import Guard
from agent_jobs.store.rows import Dispatch, TaskRow, task_from_row
from agent_jobs.store.schema import dead_letter_replays, dead_letters, task_events, tasks
from agent_jobs.store.transition import append_event, apply
from agent_jobs.store.types import db_now

# Where a replayed task resumes: the status whose step dead-lettered, else RUNNING.
_REPLAY_INTO = REPLAY_TRANSITIONS[Status.FAILED]
REPLAYED_EVENT = "dead_letter_replayed"
# The event of a row set aside whose status could not move (a terminal row): the dead letter is
# recorded beside it. (One that could move takes the `dead_lettered` transition, as after
# `max_attempts`, and a replay resumes it from the step named in that event.)
SET_ASIDE_EVENT = "sweeper_set_aside"


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

    def set_aside_task(
        self, task_id: str, sweeper: str, error: str, *, undue: dict[str, Any]
    ) -> str | None:
        """`set_aside` in a transaction of its own, for a sweeper that found the row bad after
        its own transaction had committed (its step message could not be published): the
        task's workflow, or None when the task is not there any more."""
        with self.tx() as conn:
            row = conn.execute(select(tasks).where(tasks.c.id == task_id)).first()
            if row is None:
                return None
            task = task_from_row(row)
            set_aside(self.backend, conn, task, sweeper, error, undue=undue)
        return task.workflow

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


def set_aside(
    backend: Backend,
    conn: Connection,
    task: TaskRow,
    sweeper: str,
    error: str,
    *,
    undue: dict[str, Any],
) -> None:
    """Dead-letter a row the `sweeper` could not move (its patch raised, the table refused it,
    the database refused its write), with the reason, inside `conn`'s transaction, so that the
    sweep goes on with the other rows.

    Through the one guarded write where the status may legally change: to ESCALATED when an
    effect may be in flight, else FAILED (a replay resumes it), with the dead letter. Where it
    cannot (a terminal row), or that write fails too, no status is written: the dead letter is
    recorded (or, where the row has one already, its reason extended), an event says so, and
    the columns that made the row due for this sweeper are reset (`undue`, e.g. a lapsed lease
    cleared), so that the next sweep does not meet it again. Each attempt runs in a savepoint:
    a refused write rolls back only itself."""
    reason = f"the {sweeper} sweeper could not move this row: {error}"[:1000]
    target = _failure_status(task.status)
    if target is not None:
        patch = Patch(
            to=target,
            event="dead_lettered",
            data={"reason": reason, "sweeper": sweeper, "step": task.status.value},
            last_error=reason,
            dead_letter=reason,
            outcome={"reason": reason, "dead_letter": True},
        )
        try:
            with conn.begin_nested():
                apply(backend, conn, Guard.seen(task), patch, actor="sweeper", returning=False)
            return
        except UNAVAILABLE:
            raise
        except Exception as exc:  # recorded below, without a status write
            reason = f"{reason}; moving it to {target.value} failed too: {exc}"[:1000]
    with conn.begin_nested():
        letter = backend.insert_ignore(dead_letters).values(
            task_id=task.id,
            tenant_id=task.tenant_id,
            workflow=task.workflow,
            reason=reason,
            attempts=task.attempts,
            at=db_now(),
        )
        # A row dead-lettered before (a FAILED task) keeps its letter, with this reason first.
        before = func.substr(letter.excluded.reason + "; before: " + dead_letters.c.reason, 1, 1000)
        conn.execute(
            letter.on_conflict_do_update(
                index_elements=["task_id"], set_={"reason": before, "at": db_now()}
            )
        )
        if undue:
            conn.execute(update(tasks).where(tasks.c.id == task.id).values(**undue))
        data = {"reason": reason, "sweeper": sweeper, "status": task.status.value}
        append_event(backend, conn, task.id, SET_ASIDE_EVENT, data)


def _failure_status(status: Status) -> Status | None:
    """Where a row set aside goes, if its status may move at all: ESCALATED where an effect
    may be in flight (a person must look), else FAILED (dead-lettered, replayable)."""
    order: tuple[Status, ...] = (
        (Status.ESCALATED, Status.FAILED) if status in EFFECT_IN_FLIGHT else (Status.FAILED,)
    )
    for to in (*order, Status.ESCALATED):
        if is_legal(status, to):
            return to
    return None
