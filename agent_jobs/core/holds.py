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
