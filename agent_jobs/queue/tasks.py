"""The Celery tasks: one step of one task, and the sweepers."""

from __future__ import annotations

import logging

from agent_jobs.queue.app import app
from agent_jobs.queue.runtime import get_runtime

log = logging.getLogger(__name__)


@app.task(name="agent_jobs.step", acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def step(task_id: str) -> None:
    """Claim the task, run the step for its status, commit, publish the next step."""
    get_runtime().orchestrator.run_step(task_id)


def _sweep(kind: str) -> int:
    count = get_runtime().sweepers.run(kind)
    if count:
        what = "rejected submission(s) pruned" if kind == "retention" else "task(s) moved"
        log.info("sweep %s: %d %s", kind, count, what)
    return count


@app.task(name="agent_jobs.sweep.lease", ignore_result=True)
def sweep_lease() -> int:
    return _sweep("lease")


@app.task(name="agent_jobs.sweep.dispatch", ignore_result=True)
def sweep_dispatch() -> int:
    return _sweep("dispatch")


@app.task(name="agent_jobs.sweep.retry", ignore_result=True)
def sweep_retry() -> int:
    return _sweep("retry")


@app.task(name="agent_jobs.sweep.unknown", ignore_result=True)
def sweep_unknown() -> int:
    return _sweep("unknown")


@app.task(name="agent_jobs.sweep.held", ignore_result=True)
def sweep_held() -> int:
    return _sweep("held")


@app.task(name="agent_jobs.sweep.approvals", ignore_result=True)
def sweep_approvals() -> int:
    return _sweep("approvals")


@app.task(name="agent_jobs.sweep.retention", ignore_result=True)
def sweep_retention() -> int:
    return _sweep("retention")
