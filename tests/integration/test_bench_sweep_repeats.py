"""`agent-jobs bench sweep` over more sweeps than `max_attempts` (defect D6 of issue 29): each
timed sweep finds every due task as seeded, and the sweeps dead-letter none of them.

Before, each repeat only rewrote the due tasks' clocks: the lapsed-lease tasks, moved by each
sweep (a failed attempt, then RETRY_WAIT, then FAILED at `max_attempts`), were handed a lapsed
lease again, and the sixth sweep met a FAILED task with a lapsed lease and died on `illegal
transition FAILED -> ESCALATED`."""

from __future__ import annotations

import pytest

from agent_jobs.config import Settings
from tests.support.bench import run_bench

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def test_bench_sweep_repeated_past_max_attempts_finds_every_task_and_gives_up_none(
    pg_database: str, redis_url: str
) -> None:
    # Two timed series of `repeats` sweeps each: more sweeps in all than `max_attempts`.
    repeats = Settings().max_attempts // 2 + 1
    result = run_bench(
        "sweep", "--rows", "200", "--small", "20", "--due", "20", "--repeats", str(repeats),
        database_url=pg_database, broker_url=redis_url,
    )  # fmt: skip
    assert result["due_found"] == {"small": 20, "large": 20}
    assert result["dead_lettered"] == 0
