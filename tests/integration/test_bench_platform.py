"""`agent-jobs bench platform` runs end to end at the smallest size and prints its JSON object. A
smoke test: it asserts the shape of the output, that the refund task completed (approved by a
person other than its requester) and that some platform time was measured, never a speed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.services import (
    PG_ADMIN_URL,
    check_test_database_name,
    database_url_for,
    new_test_database_name,
)
from tests.support.bench import run_bench

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]


@pytest.fixture
def own_database(pg_database: str) -> Iterator[str]:
    """A database of this test's own (`aj_test_*`): the bench empties every table of the one it
    is given, and the session's database belongs to the other tests. `pg_database` is asked for
    so that the test skips (or fails, when services are required) without Postgres."""
    from agent_jobs.store.engine import make_engine

    name = new_test_database_name()
    yield database_url_for(name)  # the bench creates it
    check_test_database_name(name)
    admin = make_engine(PG_ADMIN_URL)
    try:
        with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


def test_bench_platform_measures_one_refund_task(own_database: str, redis_url: str) -> None:
    result = run_bench(
        "platform", "--tasks", "1", "--workers", "1", "--warmup", "0",
        database_url=own_database, broker_url=redis_url, prefix="platform", timeout_s=120,
    )  # fmt: skip
    assert result["tasks"] == 1
    assert result["completed"] == 1, result["not_completed"]
    assert result["not_completed"] == []
    assert result["refunds_in_world"] == 1  # the duplicate capture, refunded once
    (task,) = result["per_task"]
    assert task["status"] == "COMPLETED"
    for key in ("wall_ms", "model_ms", "tool_ms", "parked_ms", "platform_ms", "transitions"):
        assert key in task and key in result["median"], key
    assert task["platform_ms"] > 0
    assert task["parked_ms"] > 0  # it waited for its approval
    assert task["transitions"] > 0
    assert task["commits"] == task["event_txs"] + task["claims"]
    assert 0 < task["event_txs"] <= task["events"]
    assert result["seed_budget_ms"] == 80.0
    assert result["target_ms"] == 40.0
    assert result["ratio_to_budget"] > 0
    assert 0 < len(result["breakdown"]) <= 10
    for row in result["breakdown"]:
        assert {"from", "to", "count", "total_ms", "per_task_ms", "mean_ms"} <= set(row)
    totals = [row["total_ms"] for row in result["breakdown"]]
    assert totals == sorted(totals, reverse=True)
