"""A command on a database that is not migrated, or not there, says which database and what to
do (`agent-jobs db upgrade`), exit status 3 as a worker's, instead of the driver's
`relation "tasks" does not exist` / `no such table: tasks` with no word of either (a newcomer's
first `agent-jobs status` on a fresh database)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import new_database

COMMANDS = [
    ["status", "tsk_x"],
    ["approvals"],
    ["submit", "--tenant", "acme", "--key", "k1", "--workflow", "noop@1", "--input", "{}"],
    ["sweep", "all"],
    ["incidents", "tasks", "--since", "2026-01-01T00:00:00Z"],
]

CHILD = """
import json, sys
from agent_jobs.cli import main
print(json.dumps([main(args) for args in json.loads(sys.argv[1])]))
"""


def run_all(url: str, cwd: Path, commands: list[list[str]]) -> tuple[list[int], str]:
    import json

    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_JOBS_")}
    env["AGENT_JOBS_DATABASE_URL"] = url
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(commands)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("agent-jobs: error:")]


@pytest.mark.slow
def test_sqlite_not_migrated(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    codes, stderr = run_all(url, tmp_path, COMMANDS)
    assert codes == [3] * len(COMMANDS), stderr
    lines = errors(stderr)
    assert len(lines) == len(COMMANDS), stderr
    for line in lines:
        assert "fresh.db: the database schema is at no revision (never migrated)" in line, line
        assert "run `agent-jobs db upgrade`" in line
    assert "OperationalError" not in stderr and "--debug" not in stderr


@pytest.mark.postgres
@pytest.mark.slow
def test_postgres_not_migrated_and_not_reachable(tmp_path: Path) -> None:
    with new_database() as url:
        shown = url.replace("postgresql://postgres@", "postgresql://postgres:***@")
        secret = url.replace("postgresql://postgres@", "postgresql://postgres:s3cret@")
        codes, stderr = run_all(secret, tmp_path, COMMANDS)
    assert codes == [3] * len(COMMANDS), stderr
    for line in errors(stderr):
        assert f"{shown}: the database schema is at no revision" in line, line
        assert "run `agent-jobs db upgrade`" in line
    assert "s3cret" not in stderr and "ProgrammingError" not in stderr
    # Nothing listens on port 1: "cannot reach", naming the database.
    codes, stderr = run_all("postgresql://postgres@127.0.0.1:1/nowhere", tmp_path, COMMANDS[:2])
    assert codes == [3, 3], stderr
    for line in errors(stderr):
        assert "cannot reach the database at postgresql://postgres@127.0.0.1:1/nowhere" in line


@pytest.mark.slow
def test_a_migrated_database_answers_as_before(tmp_path: Path) -> None:
    """The hint is only for those errors: an unknown task is still 'not found', exit 2."""
    from agent_jobs.store import Store
    from agent_jobs.store.migrate import upgrade

    url = f"sqlite:///{tmp_path / 'ready.db'}"
    store = Store.from_url(url)
    upgrade(store.engine)
    store.dispose()
    codes, stderr = run_all(url, tmp_path, [["status", "tsk_x"], ["approvals"]])
    assert codes == [2, 0], stderr
    assert "not found" in stderr and "db upgrade" not in stderr
