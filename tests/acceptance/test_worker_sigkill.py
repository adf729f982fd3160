"""Real worker processes (`celery -A agent_jobs worker --pool prefork`), killed with SIGKILL.

Invariants 2, 4 and 5 together: a worker lost mid-step holds a lease that lapses; an EXECUTING
task whose holder vanished goes to EXEC_UNKNOWN and is reconciled by idempotency key before any
retry; the task completes on another worker and the effect happens exactly once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.bench.procs import WorkerProcess
from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import TERMINAL, Status
from tests.support.live import live_runtime, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]


@pytest.fixture
def live(pg_database: str, redis_url: str, tmp_path: Path) -> Iterator[tuple[Any, dict[str, str]]]:
    env = {
        "AGENT_JOBS_DATABASE_URL": pg_database,
        "AGENT_JOBS_EXAMPLE_BACKEND": str(tmp_path / "ledger.db"),
        "AGENT_JOBS_LEASE_TTL_S": "2",
        "AGENT_JOBS_DISPATCH_GRACE_S": "2",
    }
    with live_runtime(**env) as live:
        yield live


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for w in started:
        w.stop()


def _start(
    workers: list[WorkerProcess], env: dict[str, str], name: str, tmp_path: Path
) -> WorkerProcess:
    w = WorkerProcess(env, name=name, log=tmp_path / f"{name}.log")
    workers.append(w)
    w.wait_ready()
    return w


def _swept(rt: Any) -> bool:
    """Beat's job, done by the test: the workers under test run no beat."""
    rt.sweepers.all()
    return True


def _settle(rt: Any, ids: list[str], timeout_s: float = 120) -> None:
    """Beat's job, done here: sweep until every task is terminal."""

    def done() -> bool:
        rt.sweepers.all()
        return all(rt.store.get(t).status in TERMINAL for t in ids)

    wait_until("every task terminal", done, timeout_s, every_s=0.3)


@pytest.mark.parametrize("fault", ["hang_after_commit", "slow"])
def test_sigkill_mid_effect_completes_with_one_effect(
    live: tuple[Any, dict[str, str]],
    workers: list[WorkerProcess],
    tmp_path: Path,
    tenant: str,
    fault: str,
) -> None:
    """`hang_after_commit`: the ledger committed and the worker died before recording it, so
    reconcile finds the transfer. `slow`: the worker died before the ledger committed, so
    reconcile finds nothing and the same key is sent again. One transfer either way."""
    from agent_jobs.workflows.example_backend import ExampleBackend

    rt, env = live
    ledger = ExampleBackend()
    ledger.arm("transfer", fault, delay_s=60)  # type: ignore[arg-type]
    w1 = _start(workers, env, "w1", tmp_path)
    task = rt.orchestrator.submit(
        tenant,
        "req-1",
        TaskRequest(workflow="example@1", input={"account": "acc_1", "amount_minor": 900}),
        requester="svc",
    ).task
    wait_until(
        "w1 calling the ledger",
        lambda: (
            _swept(rt)
            and rt.store.get(task.id).status is Status.EXECUTING
            and ledger.calls("transfer") == 1
        ),
        60,
    )
    w1.sigkill()
    _start(workers, env, "w2", tmp_path)
    _settle(rt, [task.id])
    final = rt.store.get(task.id)
    assert final.status is Status.COMPLETED, [e.type for e in rt.store.events(task.id)]
    types = [e.type for e in rt.store.events(task.id)]
    assert "lease_lost_during_effect" in types
    assert types.count("reconciled_found") + types.count("retry_same_key") >= 1
    assert len(ledger.transfers()) == 1
    assert [e.status for e in rt.store.effects(task.id)] == ["committed"]


def test_many_tasks_survive_a_killed_worker(
    live: tuple[Any, dict[str, str]], workers: list[WorkerProcess], tmp_path: Path
) -> None:
    """Forty payouts over four tenants; one of two workers is SIGKILLed mid-run."""
    from agent_jobs.workflows.example_backend import ExampleBackend

    rt, env = live
    ledger = ExampleBackend()
    ledger.arm("transfer", "slow", times=10, delay_s=0.3)
    w1 = _start(workers, env, "w1", tmp_path)
    _start(workers, env, "w2", tmp_path)
    ids = [
        rt.orchestrator.submit(
            f"kill{i % 4}",
            f"req-{i}",
            TaskRequest(
                workflow="example@1",
                input={"account": f"acc_{i}", "amount_minor": 100 + i, "reads": 2},
            ),
            requester="svc",
        ).task.id
        for i in range(40)
    ]
    wait_until(
        "progress",
        lambda: _swept(rt) and sum(rt.store.get(t).status is Status.COMPLETED for t in ids) >= 5,
        60,
        every_s=0.3,
    )
    w1.sigkill()
    _settle(rt, ids, 180)
    assert {rt.store.get(t).status for t in ids} == {Status.COMPLETED}
    per_key = Counter(t.idempotency_key for t in ledger.transfers())
    assert len(per_key) == 40 and set(per_key.values()) == {1}
