"""The benchmarks' Celery tasks — the transitions benchmark's floor, the peers benchmark's plain
chain — registered on the app so that the same worker processes, queues and settings serve both
sides of a comparison."""

from __future__ import annotations

from typing import Any

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


CHAIN_TASK = "agent_jobs.bench.chain_hop"
_chain_done: Any = None


@app.task(name=CHAIN_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def chain_hop(queue: str, remaining: int, done_key: str) -> None:
    """`agent-jobs bench peers`' plain Celery chain: a no-op task that sends the next hop to the
    same queue with `send_task`, as a Celery user would, and counts the finished chain in Redis.
    No database: what Celery and the broker cost per hop, on the same workers and settings."""
    global _chain_done
    if remaining > 0:
        app.send_task(CHAIN_TASK, args=[queue, remaining - 1, done_key], queue=queue)
        return
    if _chain_done is None:
        import redis  # noqa: PLC0415

        _chain_done = redis.Redis.from_url(get_runtime().settings.broker_url)
    _chain_done.incr(done_key)
