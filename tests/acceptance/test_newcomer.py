"""The newcomer's path: what happens to someone who followed the README.

- `make test` in a shell that exported a real deployment's variables touches none of it: the
  suite refuses, in one line, a test Redis it may not flush (database 0, or the deployment's),
  and creates and drops only Postgres databases named `aj_test_*`.
- A worker or beat started before `agent-jobs db upgrade` says so in one line and exits 3.
- The benchmarks that flush or kill Redis do it to a redis-server of their own
  (tests/integration/test_bench_chaos.py, test_bench_outage.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.services import (
    PG_ADMIN_URL,
    UnsafeTestService,
    check_test_database_name,
    check_test_redis,
    database_url_for,
    new_test_database_name,
    postgres_available,
    redis_db,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("test_url", "env", "needle"),
    [
        ("redis://127.0.0.1:6379/0", {}, "database 0"),
        ("redis://127.0.0.1:6379", {}, "database 0"),
        ("redis://127.0.0.1:6379/?db=0", {}, "database 0"),
        (
            "redis://127.0.0.1:6379/9",
            {"AGENT_JOBS_BROKER_URL": "redis://127.0.0.1:6379/9"},
            "AGENT_JOBS_BROKER_URL",
        ),
        (
            "redis://127.0.0.1:6379/9",
            {"AGENT_JOBS_REDIS_URL": "redis://elsewhere:6379/9"},
            "AGENT_JOBS_REDIS_URL",
        ),
    ],
)
def test_a_test_redis_the_tests_may_not_flush_is_refused(
    test_url: str, env: dict[str, str], needle: str
) -> None:
    with pytest.raises(UnsafeTestService, match=needle) as refused:
        check_test_redis(test_url, env)
    assert "AGENT_JOBS_TEST_REDIS_URL" in str(refused.value)


def test_the_tests_own_redis_database_is_accepted() -> None:
    deployment = {
        "AGENT_JOBS_BROKER_URL": "redis://127.0.0.1:6379/0",
        "AGENT_JOBS_REDIS_URL": "redis://127.0.0.1:6379/1",
    }
    check_test_redis("redis://127.0.0.1:6379/9", deployment)
    assert redis_db("redis://h:6379/12") == 12


def test_only_aj_test_databases_are_created_or_dropped() -> None:
    name = new_test_database_name()
    check_test_database_name(name)
    assert database_url_for(name).endswith(f"/{name}")
    for real in ("agent_jobs", "postgres", "aj_readme_check"):
        with pytest.raises(UnsafeTestService, match="aj_test_"):
            database_url_for(real)


def _pytest_env(**extra: str) -> dict[str, str]:
    # A fresh shell's: no AGENT_JOBS_* of this session, and not a pytest-xdist worker's either.
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AGENT_JOBS_", "PYTEST_XDIST_"))
    }
    env.update(extra)
    return env


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra",
    [
        {"AGENT_JOBS_TEST_REDIS_URL": "redis://127.0.0.1:6379/0"},
        # The README's exports, in a shell that then runs `make test` with the default test URL.
        {"AGENT_JOBS_BROKER_URL": "redis://127.0.0.1:6379/9"},
    ],
)
def test_the_suite_refuses_to_start_on_a_redis_it_may_not_flush(extra: dict[str, str]) -> None:
    """The whole suite, not only a function: pytest stops before collecting a single test, with
    one line saying what to set."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/unit/test_retry.py"],
        cwd=REPO, env=_pytest_env(**extra), capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    refusals = [ln for ln in out.splitlines() if "refused to start" in ln]
    assert len(refusals) == 1, out
    assert "AGENT_JOBS_TEST_REDIS_URL" in refusals[0]
    assert "passed" not in out


@pytest.fixture
def unmigrated() -> Iterator[str]:
    """An empty Postgres database (named `aj_test_*`), never migrated."""
    if not postgres_available():
        pytest.skip("PostgreSQL not reachable")
    import psycopg2

    name = new_test_database_name()
    admin = psycopg2.connect(PG_ADMIN_URL)
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
        yield database_url_for(name)
        check_test_database_name(name)
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.parametrize(
    "command",
    [
        ["-m", "celery", "-A", "agent_jobs", "worker", "--pool", "solo", "--loglevel", "INFO"],
        ["-m", "agent_jobs.cli", "worker", "--", "--pool", "solo", "--loglevel", "INFO"],
        ["-m", "celery", "-A", "agent_jobs", "beat", "--loglevel", "INFO"],
    ],
    ids=["celery-worker", "agent-jobs-worker", "beat"],
)
def test_a_worker_or_beat_on_an_unmigrated_database_says_so_in_one_line(
    unmigrated: str, tmp_path: Path, command: list[str]
) -> None:
    if command[-3] == "beat":
        command = [*command, "--schedule", str(tmp_path / "beat")]
    env = {**os.environ, "AGENT_JOBS_DATABASE_URL": unmigrated}
    proc = subprocess.run(
        [sys.executable, *command], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, out
    assert "Traceback" not in out
    said = [ln for ln in out.splitlines() if "agent-jobs db upgrade" in ln]
    assert len(said) == 1, out
    assert "never migrated" in said[0] and unmigrated.rsplit("/", 1)[1] in said[0]
