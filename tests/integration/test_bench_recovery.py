"""`agent-jobs bench recovery` runs end to end at a tiny size and prints its JSON object. A smoke
test: it asserts the shape of the output and that no task was lost in either mode, never a
speed."""

from __future__ import annotations

import pytest

from tests.support.bench import run_bench

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]


def test_bench_recovery_prints_both_modes_and_loses_nothing(
    pg_database: str, redis_url: str
) -> None:
    result = run_bench(
        "recovery", "--tasks", "4", "--kills", "1", "--rounds", "1",
        database_url=pg_database, broker_url=redis_url, prefix="recov",
    )  # fmt: skip
    for key in ("recovery_memory_s", "recovery_broker_s", "recovery_memory_max_s",
                "recovery_broker_max_s", "ratio"):  # fmt: skip
        assert key in result, key
    assert result["tasks"] == 4
    assert result["kills"] == 1
    assert sorted(result["order"]) == ["broker", "memory"]
    for mode in ("memory", "broker"):
        assert result[f"lost_{mode}"] == 0, mode
        assert result[f"kills_{mode}"] == 1
        assert 0 <= result[f"caught_{mode}"] <= 1
        assert result[f"completed_{mode}"] == result[f"submitted_{mode}"] >= 4
        if result[f"caught_{mode}"]:
            assert result[f"recovery_{mode}_max_s"] >= result[f"recovery_{mode}_s"] > 0
    # Step acks kept in memory leave nothing in kombu's unacked hash, even for a killed worker.
    assert result["unacked_steps_memory"] == 0
    assert result["grace_s"] > 0 and result["lease_ttl_s"] > 0 and result["sweep_interval_s"] > 0
