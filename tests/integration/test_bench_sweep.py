"""`agent-jobs bench sweep` runs end to end at a tiny size (it seeds due tasks of every kind,
approvals included, through the current schema) and prints its JSON object. A smoke test: the
shape of the output and that every sweep found the due tasks, never a speed."""

from __future__ import annotations

import pytest

from tests.support.bench import run_bench

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def test_bench_sweep_seeds_sweeps_and_prints(pg_database: str, redis_url: str) -> None:
    result = run_bench(
        "sweep", "--rows", "2000", "--small", "100", "--due", "20", "--repeats", "1",
        database_url=pg_database, broker_url=redis_url,
    )  # fmt: skip
    # Every sweep, with few finished tasks and with many, found each due task of every kind.
    assert result["due_found"] == {"small": 20, "large": 20}
    assert result["small_ms"] > 0 and result["large_ms"] > 0 and result["ratio"] > 0
