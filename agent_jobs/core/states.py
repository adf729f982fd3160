"""The task state machine: statuses, the transition table of DESIGN.md and its guard."""

from __future__ import annotations

from enum import StrEnum

from agent_jobs.core.errors import IllegalTransition
from agent_jobs.core.holds import HoldReason


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
    # RETRY_WAIT -> APPROVAL_WAIT: the throttled action, asked again before its resend, now needs
    # a person (a lever such as autonomy 0, or its grant expired during the wait).
    S.RETRY_WAIT: frozenset(
        {
            S.RUNNING,
            S.RECEIVED,
            S.VERIFYING,
            S.EXECUTING,
            S.RETRY_WAIT,
            S.APPROVAL_WAIT,
            S.ESCALATED,
            S.FAILED,
            S.CANCELLED,
        }
    ),
    # APPROVAL_WAIT -> APPROVAL_WAIT: a step that raised while waiting, parked with backoff.
    S.APPROVAL_WAIT: frozenset(
        {S.EXECUTING, S.RUNNING, S.APPROVAL_WAIT, S.ESCALATED, S.FAILED, S.CANCELLED}
    ),
    # EXECUTING -> RETRY_WAIT: throttled before commit (nothing applied). A step that raised in
    # EXECUTING may have sent the effect: EXEC_UNKNOWN, reconciled by its key, never RETRY_WAIT.
    # EXECUTING -> ESCALATED: the throttling outlasted its bound, or the failures their count.
    # EXECUTING -> APPROVAL_WAIT: the grant ran out between the intent's commit and the send (a
    # worker that paused there); not sent, the intent closed as not applied, a person asked again.
    S.EXECUTING: frozenset(
        {
            S.VERIFYING,
            S.RUNNING,
            S.EXEC_UNKNOWN,
            S.RETRY_WAIT,
            S.APPROVAL_WAIT,
            S.ESCALATED,
            S.FAILED,
        }
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

# An operator's dead-letter replay (`agent-jobs dead-letters replay`): the only way out of a
# terminal status, and only from FAILED, into the step that dead-lettered (RUNNING when it named
# none). Not in `TRANSITIONS`, which a step's own patches follow: no step can leave FAILED.
REPLAY_TRANSITIONS: dict[Status, frozenset[Status]] = {
    S.FAILED: frozenset({S.RECEIVED, S.RUNNING, S.VERIFYING}),
}


def is_legal(frm: Status, to: Status, *, replay: bool = False) -> bool:
    """True when the table allows moving from `frm` to `to` (with `replay`, the replay table)."""
    if replay:
        return to in REPLAY_TRANSITIONS.get(frm, frozenset())
    return to in TRANSITIONS[frm]


def check_transition(frm: Status, to: Status, *, replay: bool = False) -> None:
    """Raise `IllegalTransition` unless the table allows `frm -> to`."""
    if not is_legal(frm, to, replay=replay):
        raise IllegalTransition(frm.value, to.value)


def can_cancel_now(status: Status) -> bool:
    """A cancel request is honoured at the next step boundary of these statuses."""
    return S.CANCELLED in TRANSITIONS[status]


class DisplayStatus(StrEnum):
    """Every status a person reads (`display_status`): the API's type is this, so no response
    can carry a value it does not list. A `Status` reads as its lower-cased name unless one of
    the words below says more."""

    RECEIVED = "received"
    RUNNING = "running"
    RETRY_WAIT = "retry_wait"
    EXECUTING = "executing"
    VERIFYING = "verifying"
    COMPLETED = "completed"
    ESCALATED = "escalated"
    FAILED = "failed"
    CANCELLED = "cancelled"
    AWAITING_APPROVAL = "awaiting_approval"
    CONFIRMING_EFFECT = "confirming_effect"
    CANCEL_REQUESTED = "cancel_requested"
    STOPPED_BY_OPERATOR = "stopped_by_operator"
    PAUSED = "paused"
    HELD_GATE = "held_gate"
    HELD_MODEL_CAP = "held_model_cap"
    HELD_DEFERRED = "held_deferred"
    # Held for a reason this code does not know (a row written by a newer release, or a
    # workflow's own `Deferred` subclass): still held, and still a value the API can send.
    HELD = "held"


D = DisplayStatus

# Each status's own reading; every member of `Status` has one (checked below, and in the tests).
_PLAIN: dict[Status, DisplayStatus] = {
    S.RECEIVED: D.RECEIVED,
    S.RUNNING: D.RUNNING,
    S.RETRY_WAIT: D.RETRY_WAIT,
    S.APPROVAL_WAIT: D.AWAITING_APPROVAL,
    S.EXECUTING: D.EXECUTING,
    S.EXEC_UNKNOWN: D.CONFIRMING_EFFECT,
    S.VERIFYING: D.VERIFYING,
    S.COMPLETED: D.COMPLETED,
    S.ESCALATED: D.ESCALATED,
    S.FAILED: D.FAILED,
    S.CANCELLED: D.CANCELLED,
}

# Each hold reason's reading: `paused`, otherwise `held_<reason>`.
_HELD: dict[HoldReason, DisplayStatus] = {
    HoldReason.GATE: D.HELD_GATE,
    HoldReason.PAUSED: D.PAUSED,
    HoldReason.MODEL_CAP: D.HELD_MODEL_CAP,
    HoldReason.DEFERRED: D.HELD_DEFERRED,
}


def _check_readings() -> None:
    # A status or hold reason added without its reading fails at import, not as a 500 later.
    if set(_PLAIN) != set(Status):
        raise RuntimeError(f"display_status: no reading for {set(Status) - set(_PLAIN)}")
    if set(_HELD) != set(HoldReason):
        raise RuntimeError(f"display_status: no reading for {set(HoldReason) - set(_HELD)}")
    for reason, reading in _HELD.items():
        expected = "paused" if reason is HoldReason.PAUSED else f"held_{reason.value}"
        if reading.value != expected:
            raise RuntimeError(f"display_status: {reason} reads {reading}, not {expected}")


_check_readings()


def display_status(
    status: Status,
    cancel_requested: bool,
    *,
    held_for: str | None = None,
    stopped_by_operator: bool = False,
) -> DisplayStatus:
    """The status a person reads: distinguishes "cancel requested", "awaiting approval", a task
    an operator paused or whose effects an operator stopped, and one held at the dispatch gate.
    Total: every input gives a member of `DisplayStatus`."""
    if cancel_requested and status not in TERMINAL:
        return D.CANCEL_REQUESTED
    if status not in TERMINAL and held_for:
        try:
            return _HELD[HoldReason(held_for)]
        except ValueError:
            return D.HELD
    if status is S.RETRY_WAIT and stopped_by_operator:
        return D.STOPPED_BY_OPERATOR
    return _PLAIN[status]
