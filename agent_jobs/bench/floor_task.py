"""The transitions benchmark's floor as a Celery task, registered on the app so that the same
worker processes, queues and settings serve both sides of the comparison."""

from __future__ import annotations

from agent_jobs.core.names import tenant_queue
from agent_jobs.queue.app import app
from agent_jobs.queue.runtime import get_runtime
from agent_jobs.store.benchdata import Floor

FLOOR_TASK = "agent_jobs.bench.floor_hop"


@app.task(name=FLOOR_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def floor_hop(chain_id: str) -> None:
    rt = get_runtime()
    result = Floor(rt.store).hop(chain_id)
    if result is None:
        return
    tenant, remaining = result
    if remaining > 0:
        app.send_task(
            FLOOR_TASK, args=[chain_id], queue=tenant_queue(rt.settings.queue_prefix, tenant)
        )
