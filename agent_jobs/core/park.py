"""Why a task waits in RETRY_WAIT: one explicit park reason (invariant 12).

Every patch that parks a task in RETRY_WAIT writes one typed entry in the orchestrator's runtime
state, `runtime["park"]`, and RETRY_WAIT's step dispatches on it alone, clearing it on waking:

    {"reason": "throttled", "resume": "EXECUTING", "detail": "429 Too Many Requests"}

`reason` says what the task waits for and what it does on waking (`ParkReason`, `MEANING`),
`resume` the status waking leads to (fixed by the reason, except after a failed step, where it is
the status that failed), `detail` what happened, for a person. Nothing is inferred from leftover
keys: the previous code decided from `throttle`, `resume` and `pending_action` in a fixed order,
and one wrong order resent an effect blindly. Rows it parked still wake correctly: `park_of`
derives their reason from those keys once, in `from_legacy`, and `current_runtime` folds them
into this shape at the next read.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, model_validator

from agent_jobs.core.states import EFFECT_IN_FLIGHT, RESUMABLE, Status

S = Status
DETAIL_MAX_CHARS = 200
# The key of the park entry in the runtime state, and of a pending action's throttle counters
# (per effect, like `effect_attempts`: how often and how long it was throttled so far).
PARK_KEY = "park"
THROTTLES_KEY = "effect_throttles"
# Set when a reconcile read found nothing after a send that was never answered, until the
# pending action's outcome is known: giving that action up escalates instead of closing it.
UNCONFIRMED_KEY = "effect_unconfirmed"
# What the previous code wrote instead (read only by `from_legacy` and `current_runtime`).
_LEGACY_KEYS = ("throttle", "resume")


class ParkReason(StrEnum):
    """Why a task is in RETRY_WAIT (its `MEANING`: what it waits for, what it does on waking)."""

    RETRY = "retry"
    STEP_FAILED = "step_failed"
    VERIFY_ERROR = "verify_error"
    THROTTLED = "throttled"
    HELD_BY_OPERATOR = "held_by_operator"


class Meaning(NamedTuple):
    waits_for: str
    on_waking: str
    # The statuses waking may lead to (`Park.resume`).
    resumes: frozenset[Status]


MEANING: dict[ParkReason, Meaning] = {
    ParkReason.RETRY: Meaning(
        "its backoff after the workflow asked to retry (a transient failure)",
        "back to RUNNING: the workflow decides again",
        frozenset({S.RUNNING}),
    ),
    ParkReason.STEP_FAILED: Meaning(
        "its backoff after a step raised (a failed attempt, counted)",
        "runs the step that failed again, from its last checkpoint",
        RESUMABLE,
    ),
    ParkReason.VERIFY_ERROR: Meaning(
        "its backoff after the verifier raised",
        "back to VERIFYING: verifies the draft again",
        frozenset({S.VERIFYING}),
    ),
    ParkReason.THROTTLED: Meaning(
        "the provider's Retry-After: the call was refused, nothing was applied",
        "asks the policy and levers again, then resends the pending action with the same key",
        frozenset({S.EXECUTING}),
    ),
    ParkReason.HELD_BY_OPERATOR: Meaning(
        "an operator's lever that holds this effect (polled, never escalated)",
        "asks the levers and the policy again, then sends the pending action with the same key",
        frozenset({S.EXECUTING}),
    ),
}

# The reasons whose waking sends the pending action again (under a lease: it asks the policy).
RESENDS: frozenset[ParkReason] = frozenset({ParkReason.THROTTLED, ParkReason.HELD_BY_OPERATOR})


def _check_meanings() -> None:
    # A reason added without its meaning fails at import, not as a task that never wakes.
    if set(MEANING) != set(ParkReason):
        raise RuntimeError(f"park: no meaning for {set(ParkReason) - set(MEANING)}")


_check_meanings()


class Park(BaseModel):
    """The park entry of a task in RETRY_WAIT (`runtime["park"]`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reason: ParkReason
    resume: Status
    detail: str = ""

    @model_validator(mode="after")
    def _resume_fits_the_reason(self) -> Park:
        if self.resume not in MEANING[self.reason].resumes:
            raise ValueError(f"a {self.reason.value} park cannot resume {self.resume.value}")
        return self

    @classmethod
    def of(cls, reason: ParkReason, detail: str = "", *, resume: Status | None = None) -> Park:
        """The park for `reason`; `resume` only where the reason leaves it open (a failed
        step names the status that failed)."""
        if resume is None:
            (resume,) = MEANING[reason].resumes
        return cls(reason=reason, resume=resume, detail=detail[:DETAIL_MAX_CHARS])

    @property
    def waits_for(self) -> str:
        return MEANING[self.reason].waits_for

    @property
    def on_waking(self) -> str:
        return MEANING[self.reason].on_waking

    @property
    def resends(self) -> bool:
        """Waking sends the pending action again (after asking the policy and levers)."""
        return self.reason in RESENDS

    @property
    def cancellable(self) -> bool:
        """Whether a cancel may end the task while it waits. Not when waking resumes an effect
        whose outcome is unknown (a row the previous code parked after a step failed in
        EXECUTING): it is reconciled first, as EXECUTING and EXEC_UNKNOWN are."""
        return self.resends or self.resume not in EFFECT_IN_FLIGHT

    def entry(self) -> dict[str, Any]:
        """What `runtime["park"]` holds."""
        return self.model_dump(mode="json")


def resume_status(raw: object) -> Status:
    """A status named in a stored row, as a status RETRY_WAIT may resume (RUNNING otherwise)."""
    try:
        status = Status(str(raw))
    except ValueError:
        return S.RUNNING
    return status if status in RESUMABLE else S.RUNNING


def park_of(status: Status, runtime: Mapping[str, Any]) -> Park | None:
    """The park of a task in `status` whose runtime entry is `runtime`: None unless it is in
    RETRY_WAIT. Raises `ValueError` (pydantic's `ValidationError`) on an unreadable entry."""
    if status is not S.RETRY_WAIT:
        return None
    entry = runtime.get(PARK_KEY)
    if entry is None:
        return from_legacy(runtime)
    return Park.model_validate(entry)


def shown_park(status: Status, runtime: Mapping[str, Any]) -> Park | None:
    """`park_of` for a task's views: None for an unreadable entry (the step that wakes the task
    counts that as a failed attempt; a read must still answer)."""
    try:
        return park_of(status, runtime)
    except ValueError:
        return None


def from_legacy(runtime: Mapping[str, Any]) -> Park:
    """The park reason of a RETRY_WAIT row written before park reasons, from its leftover keys.

    `resume` was set when a step failed and popped on waking, except on the throttle path, so it
    could be stale; `throttle` lived from a throttled call until the effect's next outcome. When
    both are there, a step failed in EXECUTING after a throttle (or a stale `resume` met a later
    throttle): either way the effect may have gone out, so it is reconciled (resume EXECUTING,
    whose claim is a lost lease: EXEC_UNKNOWN), never resent. A `resume` of EXECUTING with no
    pending action is stale (nothing is in flight): an ordinary retry."""
    pending = isinstance(runtime.get("pending_action"), dict)
    raw = runtime.get("resume")
    throttle = runtime.get("throttle")
    if raw is not None:
        resume = resume_status(raw)
        if resume is S.EXECUTING and not pending:
            return Park.of(ParkReason.RETRY, "parked by an earlier release")
        if resume is S.VERIFYING and runtime.get("verify_failures"):
            return Park.of(ParkReason.VERIFY_ERROR, "parked by an earlier release")
        if resume is S.EXECUTING or not (throttle and pending):
            return Park.of(ParkReason.STEP_FAILED, "parked by an earlier release", resume=resume)
    if isinstance(throttle, Mapping) and throttle and pending:
        held = bool(throttle.get("by_operator"))
        reason = ParkReason.HELD_BY_OPERATOR if held else ParkReason.THROTTLED
        return Park.of(reason, str(throttle.get("reason") or ""))
    return Park.of(ParkReason.RETRY, "parked by an earlier release")


def current_runtime(status: Status, runtime: Mapping[str, Any]) -> dict[str, Any]:
    """`runtime` (a copy) in the current shape: a row written before park reasons has its
    `resume` and `throttle` keys folded into the park entry (in RETRY_WAIT: every RETRY_WAIT row
    comes back with one) and the throttle counters of its pending action; a row already current
    comes back as it was."""
    out = dict(runtime)
    if status is S.RETRY_WAIT and PARK_KEY not in out:
        out[PARK_KEY] = from_legacy(out).entry()
    if not any(key in out for key in _LEGACY_KEYS):
        return out
    throttle = out.get("throttle")
    if isinstance(throttle, Mapping) and out.get("pending_action") and THROTTLES_KEY not in out:
        out[THROTTLES_KEY] = {
            "count": int(throttle.get("count", 0)),
            "waited_s": float(throttle.get("waited_s", 0.0)),
        }
    for key in _LEGACY_KEYS:
        out.pop(key, None)
    return out
