"""Why a runnable task is held at the dispatch gate: the one list of `held_for` values.

The gate, the pause lever, the model-call cap and `Deferred` hold for these; `states` reads each
as a display status (`paused`, `held_<reason>`), and the API's status type is derived from that.
"""

from __future__ import annotations

from enum import StrEnum


class HoldReason(StrEnum):
    """A task row's `held_for` (at most 16 characters: the column's width)."""

    GATE = "gate"  # its tenant at its cap, or ahead of its fair share
    PAUSED = "paused"  # an operator paused its tenant, its workflow, or everything
    MODEL_CAP = "model_cap"  # every model-call slot taken (`ModelCapSaturated`)
    DEFERRED = "deferred"  # a workflow's step wanted a shared resource (`Deferred`)


# A task an operator's lever holds (effects stopped, read-only, a tool disabled) is parked in
# RETRY_WAIT and asks the lever again when its timer falls due. Each ask is a claim and two
# transitions; every 2 s for an incident of hours is thousands of writes per held task. So the
# interval doubles from the switches' poll interval while the hold stands, up to a cap
# (`AGENT_JOBS_HELD_POLL_MAX_S`): 2, 4, 8, 16, 32, then the cap — after its first minute a held
# task writes about once a minute. It starts again from the first interval once the effect goes
# through (the count is the park's, dropped when the task moves on). The cap is also how long a
# held task may take to notice that the lever was turned off.
HELD_POLL_FIRST_S = 2.0


def held_poll_s(polls: int, max_s: float, first_s: float = HELD_POLL_FIRST_S) -> float:
    """Seconds until a held task asks again, after its `polls`-th ask found the hold (1-based)."""
    if polls <= 1:
        return min(first_s, max_s)
    # Past 2**30 the doubling cannot matter (and must not overflow a float's exponent).
    return min(max_s, first_s * 2.0 ** min(polls - 1, 30))


def deferred_wait_s(deferring_for_s: float, max_s: float) -> float:
    """How long a step its workflow deferred (`DEFERRED`) stays held before the sweeper lets it
    try again: as long as it has been deferring so far (from its last transition to this hold),
    so the tries double the same way — at least the first interval, at most the cap."""
    return min(max_s, max(HELD_POLL_FIRST_S, deferring_for_s))
