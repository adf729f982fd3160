"""`agent-jobs bench history` runs end to end at a tiny size: it seeds its history database,
reuses it on a second run, and measures both sides. A smoke test: it asserts the shape of the
result and that both sides made transitions, never a speed or a ratio."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.services import PG_ADMIN_URL, check_test_database_name

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]


@pytest.fixture
def bench_env(pg_database: str, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The bench's settings point at this session's test database and Redis; the two databases
    it derives from that name (`aj_test_*_hist_*`) are dropped afterwards."""
    from agent_jobs.bench.history import EMPTY_SUFFIX, HISTORY_SUFFIX, sibling_database

    monkeypatch.setenv("AGENT_JOBS_DATABASE_URL", pg_database)
    monkeypatch.setenv("AGENT_JOBS_BROKER_URL", redis_url)
    yield pg_database
    names = [
        sibling_database(pg_database, s).rsplit("/", 1)[1] for s in (EMPTY_SUFFIX, HISTORY_SUFFIX)
    ]
    _drop(names)


def test_bench_history_seeds_reuses_and_measures_both_sides(bench_env: str) -> None:
    from agent_jobs.bench import history

    first = _tiny_run()
    assert first["seeded"] is True
    assert first["history_rows"]["tasks"] == 200
    assert first["history_rows"]["events"] == 1_800
    assert first["history_rows"]["total"] == 2_000
    assert first["empty_per_s"] > 0
    assert first["history_per_s"] > 0
    assert first["ratio"] > 0
    assert first["target"] == history.TARGET_RATIO
    assert isinstance(first["ok"], bool)
    assert len(first["samples"]["empty"]) == len(first["samples"]["history"]) == 1
    assert "transitions/s" in history.render(first)

    # The second run finds the history it asked for (the first run's own tasks removed).
    again = _tiny_run()
    assert again["seeded"] is False
    assert again["history_rows"] == {**first["history_rows"], "mb": again["history_rows"]["mb"]}
    assert again["history_per_s"] > 0


def _tiny_run() -> dict[str, Any]:
    from agent_jobs.bench import history

    return history.run(
        rows=2_000, events_per_task=9, tasks=2, steps=20, workers=1, rounds=1, progress=False
    )


def _drop(names: list[str]) -> None:
    from agent_jobs.store.engine import make_engine

    admin = make_engine(PG_ADMIN_URL)
    try:
        with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            for name in names:
                check_test_database_name(name)
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()
