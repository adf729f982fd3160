"""`agent-jobs bench pgbouncer` runs end to end at a tiny size (4 worker processes a side, 2
server connections) and prints sane figures. A smoke test: it asserts the shape of the output
and what the pooler must hold (Postgres never sees more server connections than the pool),
never a speed."""

from __future__ import annotations

import shutil

import pytest

from agent_jobs.bench import pooled
from tests.conftest import _need
from tests.services import PG_ADMIN_URL, check_test_database_name
from tests.support.bench import run_bench

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

WORKERS = 4
POOL = 2


def test_bench_pgbouncer_prints_both_sides_within_the_pool(
    pg_database: str, redis_url: str
) -> None:
    _need(shutil.which("pgbouncer") is not None, "pgbouncer (Debian's package)")
    try:
        result = run_bench(
            "pgbouncer", "--workers", str(WORKERS), "--pool-size", str(POOL), "--steps", "5",
            "--rounds", "2", database_url=pg_database, broker_url=redis_url,
        )  # fmt: skip
    finally:
        _drop_sibling(pg_database)
    assert (result["workers"], result["pool_size"], result["rounds"]) == (WORKERS, POOL, 2)
    direct, bounced = result["direct"], result["pgbouncer"]
    for side in (direct, bounced):
        assert side["steps_per_s"] > 0
        assert 0 < side["p50_ms"] <= side["p99_ms"]
        assert side["server_connections_max"] >= 1
    # What the pooler is for: Postgres sees at most the pool, whatever the clients.
    assert bounced["server_connections_max"] <= POOL
    assert 1 <= bounced["pool_servers_max"] <= POOL
    assert bounced["cl_waiting_max"] >= 0 and bounced["maxwait_ms"] >= 0
    # Straight to Postgres each worker process holds a connection of its own at least.
    assert direct["server_connections_max"] >= WORKERS
    assert result["ratio"] == pytest.approx(
        bounced["steps_per_s"] / direct["steps_per_s"], rel=0.01
    )
    for side in ("direct", "pgbouncer"):
        assert len(result["samples"][side]) == 2  # one sample a round each
    text = pooled.render(result)
    assert f"through PgBouncer ({POOL} server connections)" in text
    assert f"ratio {result['ratio']:.3f}" in text


def _drop_sibling(pg_database: str) -> None:
    """The bench made the pooled side's database (`<name>_pooled`) beside the test's."""
    from agent_jobs.store.engine import make_engine

    name = pg_database.rsplit("/", 1)[1] + "_pooled"
    check_test_database_name(name)
    admin = make_engine(PG_ADMIN_URL)
    try:
        with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()
