"""Shared fixtures: real Postgres and Redis when present (required when
AGENT_JOBS_REQUIRE_SERVICES=1, as in CI), SQLite always, and workers in-thread or as processes.

The Celery app reads its settings when first used, so this module points the broker at the test
Redis and gives this session its own queue prefix before anything imports `agent_jobs.queue`.
It *forces* them: a shell that exported a real deployment's AGENT_JOBS_* variables (the README's
"Run it for real") must not lend the tests its broker, database or secrets; and a test Redis the
tests may not flush is refused before any test runs (tests/services.py).
"""

from __future__ import annotations

import os
import secrets
import shutil
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from tests.services import (
    DEPLOYMENT_REDIS_ENV,
    PG_ADMIN_URL,
    REDIS_URL,
    UnsafeTestService,
    check_test_database_name,
    check_test_redis,
    database_url_for,
    new_test_database_name,
    postgres_available,
    redis_available,
    require_services,
)

# Judged against the environment as the user exported it, before it is replaced below. A
# pytest-xdist worker inherits the replaced one: the first process kept the user's values aside
# (AGENT_JOBS_TEST_SHELL_*), and each worker judges its own Redis database against them.
_SHELL = "AGENT_JOBS_TEST_SHELL_"
if os.environ.get("PYTEST_XDIST_WORKER"):
    _exported = {n: os.environ.get(_SHELL + n, "") for n in DEPLOYMENT_REDIS_ENV}
else:
    _exported = {n: os.environ.get(n, "") for n in DEPLOYMENT_REDIS_ENV}
    for _name, _value in _exported.items():
        os.environ[_SHELL + _name] = _value
try:
    check_test_redis(REDIS_URL, _exported)
    _REFUSED: str | None = None
except UnsafeTestService as exc:
    _REFUSED = str(exc)

# Kept from the caller's environment: the tests' own knobs. Everything else AGENT_JOBS_* is a
# deployment's (URLs, secrets, a Celery config module, model routes) and is dropped.
_KEPT = ("AGENT_JOBS_TEST_", "AGENT_JOBS_REQUIRE_SERVICES", "AGENT_JOBS_STATEFUL_",
         "AGENT_JOBS_STANDIN_", "AGENT_JOBS_DEBUG")  # fmt: skip
for _name in [n for n in os.environ if n.startswith("AGENT_JOBS_")]:
    if not _name.startswith(_KEPT):
        del os.environ[_name]

SESSION_PREFIX = f"ajt{os.getpid()}"
os.environ["AGENT_JOBS_BROKER_URL"] = REDIS_URL
os.environ["AGENT_JOBS_QUEUE_PREFIX"] = SESSION_PREFIX
os.environ["AGENT_JOBS_LEASE_TTL_S"] = "2"
os.environ["AGENT_JOBS_DISPATCH_GRACE_S"] = "1"
os.environ["AGENT_JOBS_RETRY_BASE_S"] = "0.05"
os.environ["AGENT_JOBS_RETRY_MAX_S"] = "0.2"
os.environ["AGENT_JOBS_SWEEP_INTERVAL_S"] = "0.5"
# A deployment's secret (a Redis broker is not the embedded mode: a worker refuses to start
# without one); random per session, as `make worker` generates its own.
os.environ["AGENT_JOBS_TOOL_SECRET"] = secrets.token_urlsafe(32)


def pytest_configure(config: pytest.Config) -> None:
    if _REFUSED is not None:
        raise pytest.UsageError(f"agent_jobs tests refused to start: {_REFUSED}")


def _long(item: pytest.Item) -> bool:
    return item.get_closest_marker("slow") is not None or "tests/simulation/" in item.nodeid


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long tests first (marked `slow`, and the simulator's), the rest in their order: run
    in parallel (`make test`: pytest-xdist), the workers share them out from the start, not one
    of them left running a four-minute test at the end. The order is the same in every worker,
    as xdist requires."""
    items.sort(key=lambda item: 0 if _long(item) else 1)


def _need(available: bool, what: str) -> None:
    if available:
        return
    if require_services():
        pytest.fail(f"{what} is required (AGENT_JOBS_REQUIRE_SERVICES=1) but not reachable")
    pytest.skip(f"{what} not reachable")


@contextmanager
def new_database() -> Iterator[str]:
    """A Postgres database of the caller's own, empty (no schema); dropped at the end."""
    _need(postgres_available(), "PostgreSQL")
    from agent_jobs.store.engine import make_engine

    name = new_test_database_name()
    admin = make_engine(PG_ADMIN_URL)
    with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield database_url_for(name)
    finally:
        check_test_database_name(name)
        with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A fresh Postgres database for this session, migrated to head; dropped at the end."""
    from agent_jobs.store.engine import make_engine
    from agent_jobs.store.migrate import upgrade

    with new_database() as url:
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
        yield url


def _truncate(store: object) -> None:
    """Every table emptied, children first. DELETE, not TRUNCATE: a test leaves a few rows, and
    a TRUNCATE's commit waits on the disk for its new files (about 80 ms here, against 1 ms for
    the DELETEs in one round trip), before each of about a thousand tests."""
    from agent_jobs.store.schema import metadata

    engine = store.engine  # type: ignore[attr-defined]
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            deletes = "; ".join(f"DELETE FROM {t.name}" for t in reversed(metadata.sorted_tables))
            conn.exec_driver_sql(deletes)
        else:
            for table in reversed(metadata.sorted_tables):
                conn.execute(table.delete())


@pytest.fixture
def pg_store(pg_database: str) -> Iterator[object]:
    from agent_jobs.store import Store

    store = Store.from_url(pg_database)
    _truncate(store)
    yield store
    store.dispose()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database migrated to head once per session, compacted into one file: each test's
    store is a copy (about 0.6 ms, against 75 ms to run the migrations again)."""
    from agent_jobs.store import Store
    from agent_jobs.store.migrate import upgrade

    where = tmp_path_factory.mktemp("sqlite-template")
    built = Store.from_url(f"sqlite:///{where / 'built.db'}")
    upgrade(built.engine)
    built.dispose()
    template = where / "template.db"
    with closing(sqlite3.connect(where / "built.db")) as db:
        db.execute(f"VACUUM INTO '{template}'")
    return template


@pytest.fixture
def sqlite_store(tmp_path: Path, sqlite_template: Path) -> Iterator[object]:
    from agent_jobs.store import Store

    path = tmp_path / "agent_jobs.db"
    shutil.copyfile(sqlite_template, path)
    store = Store.from_url(f"sqlite:///{path}")
    yield store
    store.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest) -> object:
    """The same test on both backends: the contract is identical."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_store")
    return request.getfixturevalue("pg_store")


@pytest.fixture
def redis_url() -> str:
    _need(redis_available(), "Redis")
    return REDIS_URL


@pytest.fixture
def tenant() -> str:
    """A tenant id of its own per test, so queues never carry another test's messages."""
    return f"t{uuid.uuid4().hex[:10]}"
