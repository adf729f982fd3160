"""A worker never exits because the broker went away (issue 22, point 4).

A real worker process (`celery -A agent_jobs worker`, prefork) on a redis-server of the test's
own; the Redis is SIGKILLed and started again empty, several times, while steps are in flight.
After each restart the worker is still running and finishes the tasks by itself: no beat runs
and the dispatch grace is the default 60 s, so their lost messages come back only because the
worker, reconnecting, runs the dispatch sweeper once and finds the broker's sentinel gone. Once
in sixteen such losses the restore of unacked messages at connection close raised
AttributeError ('NoneType' ... 'hostname') and the worker shut down with exit status 0; the
deterministic form of that is tests/integration/test_step_acks_restore.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.bench.procs import PrivateRedis, WorkerProcess
from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import TERMINAL, Status
from tests.support.live import live_env, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

LOSSES = 5


@pytest.fixture
def broker(tmp_path: Path, redis_url: str) -> Iterator[PrivateRedis]:
    """A redis-server of this test's own (`redis_url`: skip without Redis, like the others)."""
    with PrivateRedis(tmp_path) as r:
        yield r


@contextmanager
def private_runtime(env: dict[str, str]) -> Iterator[tuple[Any, dict[str, str]]]:
    """`live_runtime`, but publishing through a Celery app of its own: the process's app is
    configured once per session with the session's broker, and its connection pool would keep
    pointing wherever the first test sent it."""
    from celery import Celery

    from agent_jobs.config import settings
    from agent_jobs.queue.celery_config import app_settings
    from agent_jobs.queue.runtime import build_runtime
    from tests.conftest import _truncate

    with live_env(**env):
        cfg = settings()
        app = Celery("agent_jobs_broker_loss", set_as_current=False)
        app.config_from_object(app_settings(cfg))
        rt = build_runtime(cfg, app=app)
        _truncate(rt.store)
        try:
            yield rt, {**env, "AGENT_JOBS_QUEUE_PREFIX": os.environ["AGENT_JOBS_QUEUE_PREFIX"]}
        finally:
            rt.store.dispose()
            app.close()


def test_a_worker_survives_its_redis_killed_and_restarted_empty_again_and_again(
    pg_database: str, broker: PrivateRedis, tmp_path: Path, tenant: str
) -> None:
    env = {
        "AGENT_JOBS_DATABASE_URL": pg_database,
        "AGENT_JOBS_BROKER_URL": broker.url,
        # The defaults (the session's are short): no sweep repeats a lost message in time.
        "AGENT_JOBS_DISPATCH_GRACE_S": "60",
        "AGENT_JOBS_LEASE_TTL_S": "30",
    }
    with private_runtime(env) as (rt, worker_env):
        worker = WorkerProcess(worker_env, name="lossy", log=tmp_path / "lossy.log")
        try:
            # Read from its log: `wait_ready` pings through the process's own app (the
            # session's broker), not this test's.
            wait_until(
                "the worker ready",
                lambda: worker.proc.poll() is None and " ready." in worker.log.read_text(),
                60,
            )
            assert worker.proc.poll() is None, worker.log.read_text()[-3000:]
            rt.sweepers.dispatch()  # sets the broker's sentinel
            ids: list[str] = []
            for loss in range(LOSSES):
                batch = [
                    rt.orchestrator.submit(
                        tenant, f"k{loss}-{i}",
                        TaskRequest(workflow="noop@1", input={"steps": 4, "sleep_ms": 150}),
                        requester="t",
                    ).task.id
                    for i in range(3)
                ]  # fmt: skip
                ids += batch
                wait_until(
                    "a step in flight",
                    lambda b=batch: any(rt.store.get(t).lease_owner for t in b),  # type: ignore[misc]
                    30,
                    every_s=0.02,
                )
                broker.kill()
                broker.start()  # empty: every queued message is gone
                assert worker.proc.poll() is None, worker.log.read_text()[-3000:]

                def done(batch: list[str] = batch) -> bool:
                    return all(rt.store.get(t).status in TERMINAL for t in batch)

                try:
                    wait_until(f"the tasks after loss {loss + 1}", done, 45, every_s=0.3)
                except AssertionError as exc:
                    states = [(t, rt.store.get(t).status.value) for t in batch]
                    tail = worker.log.read_text()[-6000:]
                    raise AssertionError(f"{exc}: {states}\n{tail}") from None
                assert worker.proc.poll() is None, worker.log.read_text()[-3000:]
            assert all(rt.store.get(t).status is Status.COMPLETED for t in ids)
            assert "Unrecoverable error" not in worker.log.read_text()
        finally:
            worker.stop()
