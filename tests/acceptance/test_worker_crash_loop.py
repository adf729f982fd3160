"""A step that kills its worker process (`os._exit`, the OOM killer) is a failed attempt: real
prefork workers on the test's Postgres database and Redis.

Before, such a step was retried at once and forever: a quick step's message was put back by
Celery's reject-on-worker-lost and ran again, a leased step's lapsed lease was dispatched again
by the sweeper. Now a redelivered message runs its step under a lease, and a lease that lapsed
off EXECUTING is counted (`WorkerLost`), waits out the retry backoff, and after
`AGENT_JOBS_MAX_ATTEMPTS` the task is FAILED with a dead letter; the worker keeps serving.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.bench.procs import WorkerProcess
from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import TERMINAL, Status
from agent_jobs.orchestrator.steps import WORKER_LOST
from tests.support.live import live_runtime, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
MODULE = "tests.support.user_workflows.crashing"
MAX_ATTEMPTS = 2


@pytest.fixture
def live(pg_database: str, redis_url: str) -> Iterator[tuple[Any, dict[str, str]]]:
    env = {
        "AGENT_JOBS_DATABASE_URL": pg_database,
        "AGENT_JOBS_WORKFLOWS": MODULE,  # this process (submit, sweep) and the worker's
        "AGENT_JOBS_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
        "AGENT_JOBS_RETRY_BASE_S": "0.2",
        "AGENT_JOBS_RETRY_MAX_S": "0.5",
        "AGENT_JOBS_LEASE_TTL_S": "1.5",
        "AGENT_JOBS_DISPATCH_GRACE_S": "2",
    }
    with live_runtime(**env) as live:
        yield live


@pytest.fixture
def worker(live: tuple[Any, dict[str, str]], tmp_path: Path) -> Iterator[WorkerProcess]:
    _, env = live
    w = WorkerProcess(
        {**env, "PYTHONPATH": str(ROOT)}, name="crash", log=tmp_path / "crash.log", concurrency=2
    )
    try:
        w.wait_ready()
        yield w
    finally:
        w.stop()


def _submit(rt: Any, tenant: str, key: str, workflow: str, *, crash: bool) -> str:
    request = TaskRequest(workflow=workflow, input={"crash": crash})
    return str(rt.orchestrator.submit(tenant, key, request, requester="svc").task.id)


@pytest.mark.parametrize("workflow", ["crash_quick@1", "crash_leased@1"])
def test_a_step_that_kills_its_worker_ends_failed_with_a_dead_letter(
    live: tuple[Any, dict[str, str]], worker: WorkerProcess, tenant: str, workflow: str
) -> None:
    rt, _ = live
    doomed = _submit(rt, tenant, "doomed", workflow, crash=True)
    # Other tasks, of both kinds, submitted while the crash loop runs: served all the same.
    healthy = [
        _submit(rt, f"{tenant}o", f"ok-{i}", name, crash=False)
        for i, name in enumerate(["crash_quick@1", "crash_leased@1"] * 2)
    ]

    def settled() -> bool:
        rt.sweepers.all()  # beat's job: the worker under test runs none
        return all(rt.store.get(t).status in TERMINAL for t in [doomed, *healthy])

    wait_until(f"{workflow} and the others terminal", settled, 90, every_s=0.2)
    log = worker.log.read_text()[-3000:]
    for task_id in healthy:
        assert rt.store.get(task_id).status is Status.COMPLETED, log
    task = rt.store.get(doomed)
    assert task.status is Status.FAILED, ([e.type for e in rt.store.events(doomed)], log)
    assert task.attempts == MAX_ATTEMPTS and task.last_error == WORKER_LOST
    types = [e.type for e in rt.store.events(doomed)]
    assert types.count("lease_expired") == MAX_ATTEMPTS - 1 and types[-1] == "dead_lettered"
    [letter] = rt.store.dead_letters(tenant)
    assert (letter.task_id, letter.attempts) == (doomed, MAX_ATTEMPTS)
    assert "WorkerLost" in letter.reason
    # The pool lost children and replaced them; the worker itself never stopped, and serves on.
    assert worker.proc.poll() is None
    after = _submit(rt, f"{tenant}o", "after", "crash_quick@1", crash=False)
    wait_until("a task after the crash loop", lambda: rt.store.get(after).status in TERMINAL, 60)
    assert rt.store.get(after).status is Status.COMPLETED
