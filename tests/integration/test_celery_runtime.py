"""The runtime through real Celery: an in-thread worker on the test Redis, state in Postgres.

Invariant 5 (nothing runnable is forgotten) is exercised here against a real broker: a tenant
that appears after the worker started, a broker that loses every message (its database
flushed), and a step whose next dispatch is lost between the commit and the publish.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import Status
from tests.conftest import _truncate
from tests.services import check_test_redis
from tests.support.live import live_env, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]


@pytest.fixture
def live(
    request: pytest.FixtureRequest, pg_database: str, redis_url: str, tmp_path: Path
) -> Iterator[Any]:
    marker = request.node.get_closest_marker("dispatch_grace")
    grace = str(marker.args[0]) if marker else "1"
    with live_env(
        AGENT_JOBS_DATABASE_URL=pg_database,
        AGENT_JOBS_EXAMPLE_BACKEND=str(tmp_path / "ledger.db"),
        AGENT_JOBS_DISPATCH_GRACE_S=grace,
    ):
        from agent_jobs.queue.runtime import get_runtime

        rt = get_runtime()
        _truncate(rt.store)
        yield rt
        rt.store.dispose()


@pytest.fixture
def worker(live: Any) -> Iterator[Any]:
    from agent_jobs.queue.embedded import EmbeddedWorker

    with EmbeddedWorker(concurrency=4, beat_enabled=True) as w:
        yield w


def _done(rt: Any, ids: list[str]) -> bool:
    return all(
        rt.store.get(t).status in (Status.COMPLETED, Status.FAILED, Status.ESCALATED) for t in ids
    )


def test_a_new_tenant_is_consumed_without_a_restart(live: Any, worker: Any, tenant: str) -> None:
    request = TaskRequest(workflow="example@1", input={"account": "acc_1", "amount_minor": 1200})
    task = live.orchestrator.submit(tenant, "k1", request, requester="svc").task
    done = wait_until("completion", lambda: _done(live, [task.id]), 60)
    assert done
    final = live.store.get(task.id)
    assert final.status is Status.COMPLETED, final
    assert final.outcome is not None and final.outcome["verified"] is True
    assert [e.to_status for e in live.store.events(task.id) if e.to_status][-1] is Status.COMPLETED


@pytest.mark.dispatch_grace(600)
def test_every_task_finishes_after_the_broker_is_flushed_mid_run(live: Any, worker: Any) -> None:
    """The broker's database flushed mid-run (a restart without persistence): every queued
    message and every binding is gone. FLUSHDB of the tests' own database number only, never a
    whole-server flush, which would wipe every other database of that Redis. The sweeper notices the
    missing sentinel and re-dispatches at once — the 10-minute grace shows it is the sentinel,
    not the age of the dispatch, that recovers them. Every task still finishes, and no effect
    happens twice."""
    from agent_jobs.workflows.example_backend import ExampleBackend

    ids: list[str] = []
    for t in range(3):
        for i in range(8):
            ids.append(
                live.orchestrator.submit(
                    f"flush{t}",
                    f"n{i}",
                    TaskRequest(workflow="noop@1", input={"steps": 25, "sleep_ms": 5}),
                    requester="svc",
                ).task.id
            )
    payouts = [
        live.orchestrator.submit(
            "flushpay",
            f"p{i}",
            TaskRequest(
                workflow="example@1",
                input={"account": f"acc_{i}", "amount_minor": 100 + i, "reads": 2},
            ),
            requester="svc",
        ).task.id
        for i in range(8)
    ]
    ids += payouts
    wait_until("some progress", lambda: sum(live.store.get(t).version > 3 for t in ids) >= 6, 60)
    assert not _done(live, ids), "flush too late to matter; make the workload longer"
    broker_url = live.settings.broker_url
    check_test_redis(broker_url, {})  # only the tests' own database, never db 0
    redis.Redis.from_url(broker_url).flushdb()
    wait_until("every task finished", lambda: _done(live, ids), 120, every_s=0.2)
    assert {live.store.get(t).status for t in ids} == {Status.COMPLETED}
    ledger = ExampleBackend()
    per_key = Counter(tr.idempotency_key for tr in ledger.transfers())
    assert len(per_key) == len(payouts) and set(per_key.values()) == {1}


def test_a_dispatch_lost_between_commit_and_publish_is_repeated(
    live: Any, worker: Any, tenant: str
) -> None:
    """The worker committed RUNNING but its publish of the next step never reached the broker
    (it crashed in between). The commit recorded the dispatch; the sweeper repeats it."""
    publisher = live.publisher
    original = publisher.publish
    dropped: list[Any] = []

    def crash_after_commit(dispatch: Any) -> None:
        if (
            not dropped
            and dispatch.tenant_id == tenant
            and live.store.get(dispatch.task_id).status is Status.RUNNING
        ):
            dropped.append(dispatch)  # the process "died" here: nothing was published
            return
        original(dispatch)

    publisher.publish = crash_after_commit
    try:
        task = live.orchestrator.submit(
            tenant, "k1", TaskRequest(workflow="noop@1", input={"steps": 3}), requester="svc"
        ).task
        wait_until("completion", lambda: _done(live, [task.id]), 60)
    finally:
        publisher.publish = original
    assert dropped, "the crash point was never reached"
    assert live.store.get(task.id).status is Status.COMPLETED
