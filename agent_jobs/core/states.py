"""The task state machine: statuses, the transition table of DESIGN.md and its guard."""

from __future__ import annotations

from enum import StrEnum

from agent_jobs.core.errors import IllegalTransition


class Status(StrEnum):
    RECEIVED = "RECEIVED"
    RUNNING = "RUNNING"
    RETRY_WAIT = "RETRY_WAIT"
    APPROVAL_WAIT = "APPROVAL_WAIT"
    EXECUTING = "EXECUTING"
    EXEC_UNKNOWN = "EXEC_UNKNOWN"
    VERIFYING = "VERIFYING"
    COMPLETED = "COMPLETED"
    ESCALATED = "ESCALATED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


S = Status

TERMINAL: frozenset[Status] = frozenset({S.COMPLETED, S.ESCALATED, S.FAILED, S.CANCELLED})

# Parked tasks wait on a timer kept in the database (`next_attempt_at`): a retry due time, or an
# approval's expiry (moved to "now" when a human decides). They hold no lease and no message.
PARKED: frozenset[Status] = frozenset({S.RETRY_WAIT, S.APPROVAL_WAIT})

# Runnable tasks always have either a live lease or a step message on their tenant queue.
RUNNABLE: frozenset[Status] = frozenset(
    {S.RECEIVED, S.RUNNING, S.EXECUTING, S.EXEC_UNKNOWN, S.VERIFYING}
)

# While an effect may be in flight the task cannot be cancelled: the status reads
# "cancel requested" until the effect is resolved.
EFFECT_IN_FLIGHT: frozenset[Status] = frozenset({S.EXECUTING, S.EXEC_UNKNOWN})

TRANSITIONS: dict[Status, frozenset[Status]] = {
    # RECEIVED/VERIFYING -> RETRY_WAIT: a step that raised is a failed attempt, parked with
    # backoff; RETRY_WAIT then resumes the status it failed in (the task's checkpoint is intact).
    S.RECEIVED: frozenset({S.RUNNING, S.RETRY_WAIT, S.CANCELLED, S.FAILED}),
    # RUNNING -> RUNNING records a read step (an observation) without leaving the state.
    S.RUNNING: frozenset(
        {
            S.RUNNING,
            S.APPROVAL_WAIT,
            S.EXECUTING,
            S.VERIFYING,
            S.RETRY_WAIT,
            S.ESCALATED,
            S.FAILED,
            S.CANCELLED,
        }
    ),
    # RETRY_WAIT -> the status whose step failed (RECEIVED, RUNNING, VERIFYING, EXECUTING). To
    # EXECUTING also after a throttled call (429/503 + Retry-After: not applied), retried with the
    # same key; ESCALATED when the throttling outlasts its bound.
    # RETRY_WAIT -> RETRY_WAIT: its own step raised; parked again with backoff.
    S.RETRY_WAIT: frozenset(
        {
            S.RUNNING,
            S.RECEIVED,
            S.VERIFYING,
            S.EXECUTING,
            S.RETRY_WAIT,
            S.ESCALATED,
            S.FAILED,
            S.CANCELLED,
        }
    ),
    # APPROVAL_WAIT -> APPROVAL_WAIT: a step that raised while waiting, parked with backoff.
    S.APPROVAL_WAIT: frozenset(
        {S.EXECUTING, S.RUNNING, S.APPROVAL_WAIT, S.ESCALATED, S.FAILED, S.CANCELLED}
    ),
    # EXECUTING -> RETRY_WAIT: throttled before commit (nothing applied), or the step raised
    # (RETRY_WAIT resumes EXECUTING, whose next claim is a lost lease: EXEC_UNKNOWN, reconcile).
    # EXECUTING -> ESCALATED: the throttling outlasted its bound, or the failures their count.
    S.EXECUTING: frozenset(
        {S.VERIFYING, S.RUNNING, S.EXEC_UNKNOWN, S.RETRY_WAIT, S.ESCALATED, S.FAILED}
    ),
    # EXEC_UNKNOWN -> EXEC_UNKNOWN records a reconcile read that itself failed (the system of
    # record did not answer); the task stays unknown and the unknown-sweeper tries again later.
    # It is the only way to keep "look before you act" when the lookup is down, short of escalating.
    S.EXEC_UNKNOWN: frozenset(
        {S.VERIFYING, S.RUNNING, S.EXECUTING, S.APPROVAL_WAIT, S.ESCALATED, S.EXEC_UNKNOWN}
    ),
    S.VERIFYING: frozenset({S.COMPLETED, S.RUNNING, S.RETRY_WAIT, S.ESCALATED}),
    S.COMPLETED: frozenset(),
    S.ESCALATED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}

# Where a RETRY_WAIT may resume: the statuses whose failed step it parks.
RESUMABLE: frozenset[Status] = frozenset({S.RECEIVED, S.RUNNING, S.VERIFYING, S.EXECUTING})


def is_legal(frm: Status, to: Status) -> bool:
    """True when the table allows moving from `frm` to `to`."""
    return to in TRANSITIONS[frm]


def check_transition(frm: Status, to: Status) -> None:
    """Raise `IllegalTransition` unless the table allows `frm -> to`."""
    if not is_legal(frm, to):
        raise IllegalTransition(frm.value, to.value)


def can_cancel_now(status: Status) -> bool:
    """A cancel request is honoured at the next step boundary of these statuses."""
    return S.CANCELLED in TRANSITIONS[status]


def display_status(
    status: Status,
    cancel_requested: bool,
    *,
    held_for: str | None = None,
    stopped_by_operator: bool = False,
) -> str:
    """The status a person reads: distinguishes "cancel requested", "awaiting approval", a task
    an operator paused or whose effects an operator stopped, and one held at the dispatch gate."""
    if cancel_requested and status not in TERMINAL:
        return "cancel_requested"
    if status not in TERMINAL and held_for:
        return "paused" if held_for == "paused" else f"held_{held_for}"
    if status is S.RETRY_WAIT and stopped_by_operator:
        return "stopped_by_operator"
    if status is S.APPROVAL_WAIT:
        return "awaiting_approval"
    if status is S.EXEC_UNKNOWN:
        return "confirming_effect"
    return status.value.lower()
