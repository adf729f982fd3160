"""`agent-jobs bench outage` runs end to end at a tiny size and prints its JSON object. A smoke
test: the shape of the output, nothing lost, no effect twice, no worker gone; never a speed."""

from __future__ import annotations

import pytest

from tests.support.bench import run_bench

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]


def test_bench_outage_prints_both_scenarios_and_loses_nothing(
    pg_database: str, redis_url: str
) -> None:
    result = run_bench(
        "outage", "--tasks", "2", "--down", "2",
        database_url=pg_database, broker_url=redis_url, prefix="outage",
    )  # fmt: skip
    assert result["scenarios"] == ["postgres", "redis"]
    assert result["timings"]["dispatch_grace_s"] == 60  # the defaults, not the tests' timings
    for s in ("postgres", "redis"):
        for key in ("moving_p50_s", "moving_max_s", "runnable", "step_retries", "outage_s"):
            assert f"{s}_{key}" in result, (s, key)
        assert result[f"{s}_lost"] == 0, s
        assert result[f"{s}_duplicate_effects"] == 0, s
        assert result[f"{s}_worker_exits"] == 0, s
        assert result[f"{s}_submitted"] == result[f"{s}_completed"] + result[f"{s}_other_terminal"]
        if result[f"{s}_moving_n"]:
            assert result[f"{s}_moving_max_s"] >= result[f"{s}_moving_p50_s"] >= 0
