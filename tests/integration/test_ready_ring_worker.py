"""A real Celery worker (in-thread, on the test Redis, state in Postgres) served through the
ready ring: every tenant's tasks finish, the worker still shows each tenant queue it serves
(Flower lists the queues workers consume), and nothing per tenant is left in Redis."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.names import ready_members_key, ready_queue, ready_ring_key, tenant_queue
from agent_jobs.core.states import Status
from tests.conftest import _truncate
from tests.support.live import live_env, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]


@pytest.fixture
def live(pg_database: str, redis_url: str, tmp_path: Path) -> Iterator[Any]:
    with live_env(
        AGENT_JOBS_DATABASE_URL=pg_database,
        AGENT_JOBS_QUEUE_SYNC_INTERVAL_S="0.2",
        AGENT_JOBS_DISPATCH_GRACE_S="600",  # a stranded step would not be rescued in time
    ):
        from agent_jobs.queue.runtime import get_runtime

        rt = get_runtime()
        _truncate(rt.store)
        yield rt
        rt.store.dispose()


@pytest.fixture
def worker(live: Any) -> Iterator[Any]:
    from agent_jobs.queue.embedded import EmbeddedWorker

    with EmbeddedWorker(concurrency=2, beat_enabled=False) as w:
        yield w


def test_every_tenant_is_served_through_the_ring_and_shown_undeclared(
    live: Any, worker: Any, tenant: str, redis_url: str
) -> None:
    prefix = os.environ["AGENT_JOBS_QUEUE_PREFIX"]
    tenants = [f"{tenant}{i}" for i in range(5)]
    ids = [
        live.orchestrator.submit(
            t, f"k{n}", TaskRequest(workflow="noop@1", input={"steps": 6}), requester="svc"
        ).task.id
        for t in tenants
        for n in range(3)
    ]
    wait_until(
        "every task completed",
        lambda: live.store.count_in_status(ids, Status.COMPLETED) == len(ids),
        60,
    )
    consumer = worker.worker.consumer.task_consumer
    assert consumer.consuming_from(ready_queue(prefix))
    wait_until(
        "the worker shows every tenant queue",
        lambda: all(consumer.consuming_from(tenant_queue(prefix, t)) for t in tenants),
        10,
    )
    client = redis.Redis.from_url(redis_url)
    # No binding sets for tenant queues (kombu keeps two per declared queue, for ever).
    left = [
        k for t in tenants for k in client.scan_iter(f"_kombu.binding*{tenant_queue(prefix, t)}")
    ]
    assert left == []
    members = {m.decode() for m in client.smembers(ready_members_key(prefix))}
    assert not members & {tenant_queue(prefix, t) for t in tenants}
    ring = {m.decode() for m in client.lrange(ready_ring_key(prefix), 0, -1)}
    assert not ring & {tenant_queue(prefix, t) for t in tenants}
