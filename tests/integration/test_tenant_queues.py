"""Issue 5 with a real Celery worker on Redis: a tenant cap holds under concurrent worker
threads, and a tenant whose queue was dropped while a step was being sent to it loses no step."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.names import tenant_queue
from agent_jobs.core.states import Status
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.workflows.noop import NoActions
from tests.conftest import _truncate
from tests.support.live import live_env, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]


class Counting(NoActions):
    """Each decision takes 50 ms and counts how many of one tenant's run at once."""

    name = "counting"
    version = 1

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def pinned(self) -> dict[str, Any]:
        return {}

    def start(self, inp: wf.StepInput) -> dict[str, Any]:
        return {"left": 3}

    def decide(self, inp: wf.StepInput) -> wf.StepDecision:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        time.sleep(0.05)
        with self.lock:
            self.now -= 1
        left = int(inp.state["left"])
        if left <= 0:
            return wf.ToVerify(dict(inp.state))
        return wf.Observe({**inp.state, "left": left - 1})


@pytest.fixture
def live(pg_database: str, redis_url: str, tmp_path: Path) -> Iterator[Any]:
    with live_env(
        AGENT_JOBS_DATABASE_URL=pg_database,
        AGENT_JOBS_TENANT_CAP="2",
        AGENT_JOBS_TENANT_IDLE_S="1",
        AGENT_JOBS_QUEUE_SYNC_INTERVAL_S="0.2",
        AGENT_JOBS_SWEEP_INTERVAL_S="0.5",
    ):
        from agent_jobs.queue.embedded import EmbeddedWorker
        from agent_jobs.queue.runtime import get_runtime

        rt = get_runtime()
        _truncate(rt.store)
        # The process's one registry outlives a test: the first test's workflow serves the next.
        known = rt.workflows.get("counting@1") if "counting@1" in rt.workflows else None
        counting = known if isinstance(known, Counting) else Counting()
        counting.now = counting.peak = 0
        rt.workflows.register(counting)
        with EmbeddedWorker(concurrency=4, beat_enabled=True) as worker:
            yield rt, worker, counting
        rt.store.dispose()


def _done(rt: Any, ids: list[str]) -> bool:
    return rt.store.count_in_status(ids, Status.COMPLETED) == len(ids)


def test_a_tenant_cap_holds_under_concurrent_worker_threads(live: Any, tenant: str) -> None:
    rt, _, counting = live
    ids = [
        rt.orchestrator.submit(
            tenant, f"k{i}", TaskRequest(workflow="counting@1"), requester="t"
        ).task.id
        for i in range(8)
    ]
    wait_until("all done", lambda: _done(rt, ids), 120, every_s=0.1)
    assert counting.peak == 2, "four worker threads, but the tenant's cap is two"


def test_a_tenant_dropped_while_a_step_was_dispatched_to_it_loses_no_step(
    live: Any, tenant: str
) -> None:
    rt, worker, _ = live
    first = rt.orchestrator.submit(
        tenant, "warm", TaskRequest(workflow="noop@1", input={"steps": 1}), requester="t"
    ).task.id
    wait_until("first done", lambda: _done(rt, [first]), 60)
    queue = tenant_queue(rt.settings.queue_prefix, tenant)
    consumer = worker.worker.consumer.task_consumer
    wait_until(
        "the idle tenant dropped", lambda: not consumer.consuming_from(queue), 30, every_s=0.1
    )
    # A publisher that still believed the tenant active sends a step without touching the
    # directory: exactly the race of a drop. The worker must find it and consume it again.
    task = rt.store.create_or_get(
        tenant, "late", TaskRequest(workflow="noop@1", input={"steps": 1}), requester="t"
    ).task
    rt.publisher.app.send_task("agent_jobs.step", args=[task.id], queue=queue)
    wait_until("the late step ran", lambda: _done(rt, [task.id]), 60, every_s=0.1)
