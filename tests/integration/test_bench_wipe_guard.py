"""A benchmark empties only a database it created and marked, or one named with `--wipe`: pointed
at any other database (a deployment's AGENT_JOBS_DATABASE_URL), it refuses in one line and
touches nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from agent_jobs.store.engine import make_engine
from tests.services import (
    PG_ADMIN_URL,
    check_test_database_name,
    database_url_for,
    new_test_database_name,
)
from tests.support.bench import run_bench

pytestmark = [pytest.mark.postgres, pytest.mark.redis]

SWEEP = ["sweep", "--rows", "200", "--small", "50", "--due", "5", "--repeats", "1"]


def _admin(sql: str) -> None:
    engine = make_engine(PG_ADMIN_URL)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(sql)
    finally:
        engine.dispose()


def _drop(name: str) -> None:
    check_test_database_name(name)
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def someone_elses_database() -> Iterator[str]:
    """A database the benchmark did not create, holding a row of someone's."""
    name = new_test_database_name()
    _admin(f'CREATE DATABASE "{name}"')
    url = database_url_for(name)
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE precious (v text)")
        conn.exec_driver_sql("INSERT INTO precious VALUES ('keep me')")
    engine.dispose()
    try:
        yield url
    finally:
        _drop(name)


def _tables_and_rows(url: str) -> tuple[set[str], list[str]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            tables = {
                r[0]
                for r in conn.exec_driver_sql(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                )
            }
            rows = [r[0] for r in conn.exec_driver_sql("SELECT v FROM precious")]
    finally:
        engine.dispose()
    return tables, rows


def _bench(url: str, redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "AGENT_JOBS_DATABASE_URL": url,
        "AGENT_JOBS_BROKER_URL": redis_url,
    }
    return subprocess.run(
        [sys.executable, "-m", "agent_jobs.cli", "bench", *args, "--json"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


@pytest.mark.slow
def test_a_database_the_bench_did_not_create_is_refused_untouched(
    someone_elses_database: str, redis_url: str
) -> None:
    name = someone_elses_database.rsplit("/", 1)[1]
    for command in (SWEEP, ["transitions", "--tasks", "1", "--steps", "2", "--rounds", "1"]):
        proc = _bench(someone_elses_database, redis_url, *command)
        assert proc.returncode != 0, proc.stdout
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1, proc.stderr
        assert "refusing to empty the database" in lines[0] and f"--wipe {name}" in lines[0]
        assert proc.stdout == ""
        # Nothing touched: no schema created, the row still there.
        assert _tables_and_rows(someone_elses_database) == ({"precious"}, ["keep me"])


@pytest.mark.slow
def test_wipe_naming_the_database_lets_the_bench_run(
    someone_elses_database: str, redis_url: str
) -> None:
    # run_bench names the test's database with --wipe.
    result = run_bench(*SWEEP, database_url=someone_elses_database, broker_url=redis_url)
    assert result["due_found"] == {"small": 5, "large": 5}
    tables, rows = _tables_and_rows(someone_elses_database)
    assert "tasks" in tables
    assert rows == ["keep me"]  # only the benchmark's own tables are emptied
    # --wipe naming another database does not count.
    proc = _bench(someone_elses_database, redis_url, *SWEEP, "--wipe", "some_other_db")
    assert proc.returncode != 0 and "refusing to empty" in proc.stderr


@pytest.mark.slow
def test_a_database_the_bench_creates_is_marked_and_reused(redis_url: str) -> None:
    from agent_jobs.store.admin import BENCH_MARK, is_marked

    name = new_test_database_name()
    url = database_url_for(name)
    try:
        proc = _bench(url, redis_url, *SWEEP)
        assert proc.returncode == 0, proc.stderr
        assert is_marked(url)
        engine = make_engine(PG_ADMIN_URL)
        with engine.connect() as conn:
            comment = conn.exec_driver_sql(
                "SELECT shobj_description(oid, 'pg_database') FROM pg_database "
                "WHERE datname = %(n)s",
                {"n": name},
            ).scalar()
        engine.dispose()
        assert comment == BENCH_MARK
        # Its own database: the next run needs no --wipe.
        again = _bench(url, redis_url, *SWEEP)
        assert again.returncode == 0, again.stderr
    finally:
        _drop(name)


def test_truncate_itself_refuses_an_unmarked_database(someone_elses_database: str) -> None:
    """The guard is in the store's admin functions, not only in the command line: a tool that
    calls `prepare` or `truncate` directly is refused too."""
    from agent_jobs.store import Store
    from agent_jobs.store.admin import WipeRefused, allow_wipe, prepare, truncate

    allow_wipe(())
    store = Store.from_url(someone_elses_database)
    try:
        with pytest.raises(WipeRefused):
            truncate(store)
        with pytest.raises(WipeRefused):
            prepare(someone_elses_database)
    finally:
        store.dispose()
    assert _tables_and_rows(someone_elses_database) == ({"precious"}, ["keep me"])
