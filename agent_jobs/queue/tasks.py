"""The Celery tasks: one step of one task, and the sweepers."""

from __future__ import annotations

import logging
from typing import Any

from agent_jobs.core.names import DELIVER_TASK, STEP_TASK
from agent_jobs.orchestrator.sweep_kinds import KINDS
from agent_jobs.queue.app import app
from agent_jobs.queue.carried_rows import is_claim_hint
from agent_jobs.queue.runtime import get_runtime
from agent_jobs.queue.webhook_deliveries import run_delivery

log = logging.getLogger(__name__)


def redelivered(request: Any) -> bool:
    """Whether the broker delivered this message before: put back after its worker process
    died (Celery's reject on worker lost), at a warm shutdown, or by the broker itself. kombu's
    virtual transports (Redis) and AMQP both say so in `delivery_info["redelivered"]`."""
    info = getattr(request, "delivery_info", None) or {}
    return bool(info.get("redelivered"))


@app.task(bind=True, name=STEP_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def step(self: Any, task_id: str, carried: Any = None) -> None:
    """Claim the task, run the step for its status, commit, publish the next step. `carried`:
    what the previous step's commit passed along, if anything: the row it left, signed
    (queue/carried_rows.py), or `{"claim": 1}`, the hint that this step needs a lease.
    A database that cannot be reached is waited out, the message kept, for at most
    `AGENT_JOBS_OUTAGE_WAIT_S` (`Orchestrator.run_step_waiting`).

    A redelivered message runs its step under a lease, quick or not: a quick step has no lease,
    so a worker that died in it (os._exit, the OOM killer) would be redelivered and die again
    forever, uncounted. Under a lease its next death leaves the lease to lapse, and the lease
    sweeper counts that as a failed attempt (`orchestrator.steps.worker_lost`): backoff, then a
    dead letter after `AGENT_JOBS_MAX_ATTEMPTS`. A normal delivery pays nothing for this."""
    runtime = get_runtime()
    row = None
    claim = is_claim_hint(carried) or redelivered(self.request)
    if carried is not None and not claim and runtime.publisher.rows is not None:
        row = runtime.publisher.rows.decode(carried, task_id)
    runtime.orchestrator.run_step_waiting(task_id, row, claim=claim)


@app.task(
    bind=True, name=DELIVER_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True
)
def deliver(self: Any, delivery_id: int) -> None:
    """One attempt at one webhook delivery, on its tenant's queue (queue/webhook_deliveries.py)."""
    run_delivery(int(delivery_id))


def _sweep(kind: str) -> int:
    count = get_runtime().sweepers.run(kind)
    if count:
        what = {
            "retention": "rejected submission(s) pruned",
            "webhooks": "webhook delivery(ies) published",
        }.get(kind, "task(s) moved")
        log.info("sweep %s: %d %s", kind, count, what)
    return count


def _sweep_task(kind: str) -> Any:
    def sweep() -> int:
        return _sweep(kind)

    sweep.__name__ = sweep.__qualname__ = f"sweep_{kind}"
    sweep.__doc__ = f"The {kind} sweeper (beat runs it; `agent-jobs sweep {kind}` by hand)."
    return app.task(name=f"agent_jobs.sweep.{kind}", ignore_result=True)(sweep)


# One Celery task per sweeper kind, named agent_jobs.sweep.<kind>: derived from KINDS.
SWEEPS: dict[str, Any] = {kind: _sweep_task(kind) for kind in KINDS}
