"""The release guardrails on beat's schedule: a canary is checked against the incumbent every
`AGENT_JOBS_GUARDRAILS_INTERVAL_S` (default 10 s) without anyone asking, so a canary whose model
degrades is reverted within about one interval of the breach. Pure: no Celery app here (the
app's settings import this; the task itself is `releases.tasks`)."""

from __future__ import annotations

from typing import Any

from agent_jobs.config import Settings

GUARDRAILS_TASK = "agent_jobs.release.guardrails"


def beat_entries(cfg: Settings) -> dict[str, dict[str, Any]]:
    """Beat's entry for the guardrails, at the configured interval."""
    every = float(cfg.guardrails_interval_s)
    return {
        "release-guardrails": {
            "task": GUARDRAILS_TASK,
            "schedule": every,
            # A check that waited longer than an interval is superseded by the next one.
            "options": {"expires": max(1.0, every)},
        }
    }
