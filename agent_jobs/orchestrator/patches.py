"""Pure helpers that build what a step commits: patches, the orchestrator's `runtime` entry of
the task state, and the notes a workflow reads back on its next decision.

No store, no workflow hooks, so a sweeper can build a patch without a session: `lease_lost` and
`worker_lost` are the sweepers' as well as the steps'. Split out of `steps.py`, which re-exports
these names (and is where other code imports them from).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent_jobs.config import Settings
from agent_jobs.core.contracts import Action
from agent_jobs.core.copies import deep_copy
from agent_jobs.core.park import PARK_KEY, Park, ParkReason, current_runtime, park_of
from agent_jobs.core.patch import EffectWrite, Patch
from agent_jobs.core.retry import backoff_s
from agent_jobs.core.states import EFFECT_IN_FLIGHT, Status, is_legal
from agent_jobs.core.text import cut

S = Status
MAX_NOTES = 20
ERROR_MAX_CHARS = 500
# Statuses that park on their own timer (each has a sweeper that wakes it when due): a failed
# step there waits in place (RETRY_WAIT keeping its park reason); any other status waits in
# RETRY_WAIT, parked as a failed step that resumes it (EXECUTING excepted: see _outcome_unknown).
SELF_PARKING = frozenset({S.APPROVAL_WAIT, S.EXEC_UNKNOWN, S.RETRY_WAIT})


def error_text(exc: BaseException) -> str:
    """`Class: message`, bounded: what a failed attempt records on the task row."""
    return cut(f"{type(exc).__name__}: {exc}", ERROR_MAX_CHARS)


def wakes_to_resend(state: dict[str, Any]) -> bool:
    """Whether a RETRY_WAIT task wakes to send its pending action again (its park reason
    resends), which asks the policy and levers first and so runs under a lease, not as a quick
    step. An unreadable park entry too: its failure is then counted under the lease."""
    try:
        park = park_of(S.RETRY_WAIT, state.get("runtime") or {})
    except ValueError:
        return True
    return park is not None and park.resends


def with_runtime(
    state: dict[str, Any] | None, base: dict[str, Any], runtime: dict[str, Any]
) -> dict[str, Any]:
    """The workflow owns the state, except the `runtime` entry, which is the orchestrator's."""
    out = dict(base if state is None else state)
    out["runtime"] = runtime
    return out


def note(runtime: dict[str, Any], kind: str, **data: Any) -> None:
    """Record what happened for the workflow's next decision (a denial, a rejection, ...)."""
    notes = list(runtime.get("notes", []))
    notes.append({"kind": kind, **data})
    runtime["notes"] = notes[-MAX_NOTES:]


def action_summary(action: Action) -> dict[str, Any]:
    """What goes into events: identity and hashes, never raw arguments."""
    return {
        "tool": action.tool,
        "tool_version": action.tool_version,
        "action_hash": action.action_hash,
        "idempotency_key": action.idempotency_key,
    }


def lease_lost(task: Any, *, by: str) -> Patch:
    """EXECUTING whose holder lost its lease (found by a new claim or by the lease sweeper): the
    call may have been sent, so the outcome is unknown, never failed (invariant 4). The one
    patch for both finders, with one event name."""
    rt = (task.state.get("runtime") or {}) if isinstance(task.state, dict) else {}
    try:
        action = Action.model_validate(rt.get("pending_action"))
    except ValueError:
        # No readable pending action (a corrupted checkpoint): nothing to reconcile by key;
        # a person must look, and one bad row must not stall the sweeper for everyone.
        return Patch(
            to=S.ESCALATED,
            event="lease_lost_during_effect",
            data={"owner": task.lease_owner, "found_by": by, "pending_action": None},
            outcome={"reason": "lost the lease during an effect whose record is unreadable"},
        )
    return Patch(
        to=S.EXEC_UNKNOWN,
        event="lease_lost_during_effect",
        data={**action_summary(action), "owner": task.lease_owner, "found_by": by},
        effect=EffectWrite(action, "unknown"),
    )


def failed_attempt(task: Any, error: str, settings: Settings, rand: float) -> Patch:
    """A failed attempt of `task`'s step: recorded on the row (`attempts`, `last_error`), parked
    with backoff (`rand` in [0, 1) draws the jitter), and after `max_attempts` consecutive
    failures a dead letter. The workflow's state is not rewritten, so the checkpoint a replay
    would resume from is the last one committed; the runtime entry only gains or loses its park
    reason (`core.park`)."""
    status = task.status
    attempt = task.attempts + 1
    rt = current_runtime(status, deep_copy(task.state.get("runtime") or {}))
    if attempt >= settings.max_attempts:
        # Where an effect may have been sent, or has been, a person must look: ESCALATED.
        escalate = status in EFFECT_IN_FLIGHT or not is_legal(status, S.FAILED)
        reason = f"{attempt} consecutive failed attempts; last: {error}"
        # A dead letter waits for nothing: a park reason it had goes (the state is kept else).
        unparked = with_runtime(None, task.state, rt) if rt.pop(PARK_KEY, None) else None
        return Patch(
            to=S.ESCALATED if escalate else S.FAILED,
            event="dead_lettered",
            data={"reason": error, "attempts": attempt, "step": status.value},
            attempts=attempt,
            last_error=error,
            dead_letter=reason,
            outcome={"reason": reason, "attempts": attempt, "dead_letter": True},
            state=unparked,
        )
    delay = backoff_s(attempt, settings.retry_base_s, settings.retry_max_s, rand * 0.999)
    if status is S.EXECUTING:
        return _outcome_unknown(task, rt, error, attempt, delay)
    to = status
    if status not in SELF_PARKING:
        to = S.RETRY_WAIT  # RETRY_WAIT's own step resumes the status that failed
        rt[PARK_KEY] = Park.of(ParkReason.STEP_FAILED, error, resume=status).entry()
    return Patch(
        to=to,
        event="step_failed",
        data={"error": error, "attempt": attempt, "retry_in_s": round(delay, 3)},
        state=with_runtime(None, task.state, rt),
        attempts=attempt,
        last_error=error,
        wake_in_s=delay,
    )


def _outcome_unknown(
    task: Any, rt: dict[str, Any], error: str, attempt: int, delay: float
) -> Patch:
    """A step that failed in EXECUTING, after its intent committed (a lock or statement
    timeout, a deadlock refusing the commit of the outcome): the call may have gone out and
    been applied, so its outcome is unknown (invariant 4). It waits out the backoff in
    EXEC_UNKNOWN, which exits only through a reconcile read by the key and cannot be cancelled
    mid-flight: never parked in RETRY_WAIT, where it was resent blind after a throttle or
    cancelled with its effect still `intent`."""
    try:
        action = Action.model_validate(rt.get("pending_action"))
    except ValueError:
        # Nothing to reconcile by key (a corrupted checkpoint): a person must look.
        return Patch(
            to=S.ESCALATED,
            event="step_failed",
            data={"error": error, "attempt": attempt, "pending_action": None},
            attempts=attempt,
            last_error=error,
            outcome={"reason": f"a step failed during an effect with no readable record: {error}"},
        )
    rt.pop(PARK_KEY, None)  # the next look is a reconcile, never a resend
    return Patch(
        to=S.EXEC_UNKNOWN,
        event="step_failed",
        data={
            **action_summary(action),
            "error": error,
            "attempt": attempt,
            "retry_in_s": round(delay, 3),
            "outcome": "unknown",
        },
        state=with_runtime(None, task.state, rt),
        attempts=attempt,
        last_error=error,
        wake_in_s=delay,
        effect=EffectWrite(action, "unknown"),
    )


# What a step whose worker died records: the lease lapsed without a commit.
WORKER_LOST = "WorkerLost: the worker died during the step (its lease lapsed without a commit)"


def worker_lost(task: Any, settings: Settings, rand: float) -> Patch:
    """A lease that lapsed on a task not in EXECUTING: its worker died during the step (killed,
    out of memory, `os._exit` in a hook) or lost the database for longer than the lease. It is
    a failed attempt like any other (`failed_attempt`): counted, retried after the backoff, and
    a dead letter after `max_attempts`, so a step that keeps killing its worker is bounded
    instead of being dispatched again at once, forever. The event keeps its name,
    `lease_expired` (naming the owner that lost it), unless the task is dead-lettered."""
    patch = failed_attempt(task, WORKER_LOST, settings, rand)
    lapsed = {"owner": task.lease_owner, "by": "sweeper"}
    if patch.dead_letter is not None:
        return replace(patch, data={**patch.data, **lapsed})
    return replace(patch, event="lease_expired", data={**patch.data, **lapsed})
