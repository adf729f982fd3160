"""`agent-jobs bench peers` runs end to end at a tiny size and prints its JSON object. A smoke
test: it asserts the shape of the output and that every side did its steps, never a speed."""

from __future__ import annotations

import pytest

from tests.services import PG_ADMIN_URL
from tests.support.bench import run_bench

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]


def _dbos_installed() -> bool:
    try:
        import dbos  # noqa: F401
    except ImportError:
        return False
    return True


def test_bench_peers_prints_the_three_sides_and_the_hand_off(
    pg_database: str, redis_url: str
) -> None:
    try:
        result = run_bench(
            "peers", "--tasks", "2", "--steps", "3", "--workers", "1", "--rounds", "1",
            "--handoff-steps", "4", database_url=pg_database, broker_url=redis_url, prefix="peers",
        )  # fmt: skip
    finally:
        _drop_dbos_database(pg_database)
    for key in ("steps_per_s", "celery_chain_per_s", "ratio_celery", "cpu_ms_per_step"):
        assert result[key] > 0, key
    assert result["handoff_p50_ms"] is not None
    assert result["handoff_p99_ms"] >= result["handoff_p50_ms"]
    if _dbos_installed():
        assert result["dbos_skipped"] is None, result["dbos_skipped"]
        assert result["dbos_per_s"] > 0
        assert result["ratio_dbos"] > 0
    else:
        assert "not installed" in result["dbos_skipped"]
        assert result["dbos_per_s"] is None


def _drop_dbos_database(pg_database: str) -> None:
    from agent_jobs.store.engine import make_engine

    name = pg_database.rsplit("/", 1)[1] + "_dbos"
    admin = make_engine(PG_ADMIN_URL)
    try:
        with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()
