"""`python -m examples.helpdesk` as a user runs it, in a process of its own: embedded (its
procurement MCP server spawned over stdio for each call), and on a Postgres database and Redis
queues of the test's own; it must end with each effect applied once (its own check, exit 0)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis

from tests.conftest import new_database

ROOT = Path(__file__).resolve().parents[2]
OK = "each effect applied once"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "examples.helpdesk", *args],
        check=False,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_the_example_runs_embedded_with_one_command() -> None:
    done = run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert OK in done.stdout and "approved the exact order" in done.stdout
    assert "reconciled_found" in done.stdout and "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.redis
def test_the_example_runs_on_postgres_and_redis(redis_url: str) -> None:
    prefix = f"hddemo{uuid.uuid4().hex[:10]}"
    with new_database() as database:
        try:
            done = run("--postgres", database, "--redis", redis_url,
                       env={"AGENT_JOBS_QUEUE_PREFIX": prefix})  # fmt: skip
        finally:
            # Only this run's queues and bindings in the tests' Redis database.
            client = redis.Redis.from_url(redis_url)
            for key in client.scan_iter(match=f"*{prefix}*"):
                client.delete(key)
            for key in client.zrange("_kombu.binding_deadlines", 0, -1):
                if prefix.encode() in key:
                    client.zrem("_kombu.binding_deadlines", key)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(Postgres + Redis)" in done.stdout and OK in done.stdout
