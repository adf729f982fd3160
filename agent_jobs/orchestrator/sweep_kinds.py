"""Every sweeper, listed once: `agent-jobs sweep`, the Celery tasks (queue/tasks.py) and the beat
schedule (queue/celery_config.py) are derived from these. A module of its own, importing nothing,
so the command line can offer the kinds without loading the store."""

from __future__ import annotations

KINDS = (
    "lease",
    "dispatch",
    "retry",
    "unknown",
    "approvals",
    "held",
    "retention",
    "archive",
    "webhooks",
)
# Sweepers that need not run at every sweep interval: pruning old rows can wait minutes.
MIN_PERIOD_S = {"retention": 300.0, "archive": 300.0}


def periods(interval_s: float) -> dict[str, float]:
    """How often beat runs each sweeper, given the sweep interval."""
    return {kind: max(interval_s, MIN_PERIOD_S.get(kind, 0.0)) for kind in KINDS}
