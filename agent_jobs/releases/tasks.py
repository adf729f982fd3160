"""The Celery task beat runs for the release guardrails (`releases.schedule`); by hand it is
`agent-jobs release guardrails`."""

from __future__ import annotations

import logging
from typing import Any

from agent_jobs.queue.app import app
from agent_jobs.queue.runtime import get_runtime
from agent_jobs.releases.schedule import GUARDRAILS_TASK

log = logging.getLogger(__name__)

# Who the audit row names for a revert beat made.
BEAT_ACTOR = "guardrails (beat)"


@app.task(name=GUARDRAILS_TASK, ignore_result=True)
def guardrails() -> dict[str, Any]:
    """Check every running canary against its incumbent; revert one that breaches, audited
    with the breaches as its reason."""
    from agent_jobs.releases.rollout import ReleaseService  # noqa: PLC0415

    results = ReleaseService(get_runtime().store).check_all_guardrails(actor=BEAT_ACTOR)
    for workflow, r in results.items():
        if r.get("reverted"):
            log.warning(
                "guardrails reverted canary %s of %s: %s",
                r.get("canary"),
                workflow,
                "; ".join(r.get("breaches") or []),
            )
    return results
