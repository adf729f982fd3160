"""Carried rows through real Celery on the test Redis and Postgres: the next quick step's message
carries the signed row, a worker runs the whole no-op task from it, and a message that carries a
forged row (whoever can write to the broker) changes nothing: the step reads the real row."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.names import tenant_queue
from agent_jobs.core.states import Status
from tests.conftest import _truncate
from tests.support.live import live_env, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]


@pytest.fixture
def live(pg_database: str, redis_url: str, tmp_path: Path) -> Iterator[Any]:
    with live_env(
        AGENT_JOBS_DATABASE_URL=pg_database,
        AGENT_JOBS_EXAMPLE_BACKEND=str(tmp_path / "ledger.db"),
    ):
        from agent_jobs.queue.runtime import get_runtime

        rt = get_runtime()
        _truncate(rt.store)
        yield rt
        rt.store.dispose()


def _queued(redis_url: str, queue: str) -> list[dict[str, Any]]:
    client = redis.Redis.from_url(redis_url)
    try:
        return [json.loads(m) for m in client.lrange(queue, 0, -1)]
    finally:
        client.close()


def test_a_forged_row_changes_nothing_and_a_signed_one_is_sent_on(
    live: Any, redis_url: str, tenant: str
) -> None:
    from agent_jobs.queue.tasks import step

    request = TaskRequest(workflow="noop@1", input={"steps": 20})
    task = live.orchestrator.submit(tenant, "k1", request, requester="svc").task
    step.run(task.id)  # RECEIVED -> RUNNING, no row carried: it reads
    running = live.store.get(task.id)
    assert running.status is Status.RUNNING and running.state["left"] == 20
    queue = tenant_queue(live.settings.queue_prefix, tenant)
    bodies = [json.loads(base64.b64decode(m["body"])) for m in _queued(redis_url, queue)]
    # (args, kwargs, embed): (task_id, carried). The submit's message carries the new row, the
    # step's the row its commit left.
    carried_rows = [args[1] for args, _, _ in bodies if len(args) == 2]
    decoded = [live.publisher.rows.decode(c, task.id) for c in carried_rows]
    assert len(decoded) == 2 and running in decoded
    assert any(d is not None and d.status is Status.RECEIVED and d.version == 1 for d in decoded)
    carried = carried_rows[decoded.index(running)]

    # Whoever can write to the broker forges the row: nothing left to do, straight to verify.
    forged_row = json.loads(carried["row"])
    forged_row["state"] = {"left": 0}
    forged = {"row": json.dumps(forged_row, separators=(",", ":")), "sig": carried["sig"]}
    step.run(task.id, forged)
    after = live.store.get(task.id)
    assert after.version == running.version + 1
    assert after.status is Status.RUNNING and after.state["left"] == 19  # from the real row


def test_a_worker_runs_a_task_from_carried_rows(live: Any, tenant: str) -> None:
    from agent_jobs.queue.embedded import EmbeddedWorker

    request = TaskRequest(workflow="noop@1", input={"steps": 30})
    with EmbeddedWorker(concurrency=2, beat_enabled=False):
        task = live.orchestrator.submit(tenant, "k2", request, requester="svc").task
        done = wait_until(
            "completion", lambda: live.store.get(task.id).status is Status.COMPLETED, 60
        )
    assert done
    # Every transition happened exactly once, in order.
    moves = [e.to_status for e in live.store.events(task.id) if e.to_status is not None]
    assert moves[0] is Status.RECEIVED and moves[-1] is Status.COMPLETED
    assert len(moves) == 1 + 1 + 30 + 1 + 1
