"""A worker at INFO writes at most one line per step.

Celery logs "Task ... received" and "Task ... succeeded in ..." for every message: two lines
per step, thousands a minute on a busy worker, saying nothing the task's event log does not.
The worker quiets those two loggers at start (queue/runtime.py); this runs real steps on a real
`celery -A agent_jobs worker --loglevel INFO` process and counts its INFO lines.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.bench.procs import WorkerProcess
from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import Status
from tests.support.live import live_runtime, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]


@pytest.fixture
def live(pg_database: str, redis_url: str, tmp_path: Path) -> Iterator[tuple[Any, dict[str, str]]]:
    with live_runtime(AGENT_JOBS_DATABASE_URL=pg_database) as live:
        yield live


def _info_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ": INFO/" in ln]


def test_a_worker_at_info_logs_at_most_one_line_per_step(
    live: tuple[Any, dict[str, str]], tmp_path: Path, tenant: str
) -> None:
    rt, env = live
    log = tmp_path / "worker.log"
    worker = WorkerProcess(env, name="quiet", log=log, loglevel="INFO")
    try:
        worker.wait_ready()
        started = len(log.read_text())  # the banner and start-up lines are not per step
        ids = [
            rt.orchestrator.submit(
                tenant,
                f"k{i}",
                TaskRequest(workflow="noop@1", input={"steps": 8, "sleep_ms": 1}),
                requester="svc",
            ).task.id
            for i in range(3)
        ]
        wait_until(
            "every task completed",
            lambda: all(rt.store.get(t).status is Status.COMPLETED for t in ids),
            60,
        )
    finally:
        worker.stop()
    # One committed transition per step message (a lower bound on the messages handled).
    steps = sum(1 for t in ids for e in rt.store.events(t) if e.to_status is not None)
    assert steps >= 3 * 8
    lines = _info_lines(log.read_text()[started:])
    assert len(lines) <= steps, f"{len(lines)} INFO lines for {steps} steps:\n" + "\n".join(
        lines[:20]
    )
    assert not [ln for ln in lines if "agent_jobs.step" in ln], lines[:5]
