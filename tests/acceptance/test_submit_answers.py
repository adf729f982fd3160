"""`agent-jobs submit` answers within 10 s when Postgres or the broker does not, and says what it
waited on, whether the task is recorded, and what to do. Real processes; the silent service is a
TCP listener of the test's own on 127.0.0.1 that accepts connections and never answers.

Before: Postgres silent took 11 s (two connect timeouts of 5 s: the operator switches, then the
insert); a lock held on `tasks` took 11 s and printed `OperationalError: ... lock timeout`; a
broker that accepts and never answers, with the tenant directory on a Redis that does, never
ended (kombu's publish has no timeout).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from agent_jobs.cli.submit import BUDGET_S
from agent_jobs.store.engine import make_engine
from tests.services import REDIS_URL

pytestmark = [pytest.mark.slow]

SUBMIT = ["-m", "agent_jobs.cli", "submit", "--tenant", "acme", "--workflow", "example@1",
          "--input", '{"account": "acc_1", "amount_minor": 100}']  # fmt: skip


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts every connection and never says a word."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()
        for conn in held:
            conn.close()


def submit(tmp_path: Path, key: str, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    full = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AGENT_JOBS_")},
        "AGENT_JOBS_TOOL_SECRET": "t" * 40,
        **env,
    }
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, *SUBMIT, "--key", key], cwd=tmp_path, env=full,
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return proc, time.monotonic() - started


def task_status(database_url: str, key: str) -> str | None:
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            return conn.execute(
                sa.text("SELECT status FROM tasks WHERE idempotency_key = :k"), {"k": key}
            ).scalar_one_or_none()
    finally:
        engine.dispose()


def test_postgres_silent(tmp_path: Path, silent_port: int) -> None:
    url = f"postgresql://aj@127.0.0.1:{silent_port}/agent_jobs"
    proc, took = submit(
        tmp_path, "k-pg", AGENT_JOBS_DATABASE_URL=url, AGENT_JOBS_BROKER_URL=REDIS_URL
    )
    assert took <= BUDGET_S, (took, proc.stderr)
    assert proc.returncode == 3 and proc.stdout == "", proc.stderr
    # Its connect timeout (2 s) ends the wait; on a machine too busy to get there before the
    # deadline, the watchdog names the same wait.
    said = (
        f"cannot reach the database at {url} (AGENT_JOBS_DATABASE_URL): timeout expired.",
        f"still waiting for the database at {url} (AGENT_JOBS_DATABASE_URL) to answer.",
    )
    assert any(s in proc.stderr for s in said), proc.stderr
    assert "The task was not recorded (nothing was written): run the same command again" in (
        proc.stderr
    )


def test_postgres_holding_a_lock(tmp_path: Path, pg_database: str) -> None:
    engine = make_engine(pg_database)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("LOCK TABLE tasks IN ACCESS EXCLUSIVE MODE"))
            proc, took = submit(
                tmp_path, "k-lock", AGENT_JOBS_DATABASE_URL=pg_database,
                AGENT_JOBS_BROKER_URL=REDIS_URL,
            )  # fmt: skip
    finally:
        engine.dispose()
    assert took <= BUDGET_S, (took, proc.stderr)
    assert proc.returncode == 3 and proc.stdout == "", proc.stderr
    # Its lock timeout (2 s) ends the wait, or on a busy machine the deadline, naming it.
    said = (
        "(AGENT_JOBS_DATABASE_URL) did not record the task: canceling statement due to lock "
        "timeout.",
        "(AGENT_JOBS_DATABASE_URL) to record the task.",
    )
    assert any(s in proc.stderr for s in said), proc.stderr
    assert "The task may not be recorded: run the same command again (the same --key" in (
        proc.stderr
    )
    assert task_status(pg_database, "k-lock") is None


def test_broker_silent(tmp_path: Path, pg_database: str, silent_port: int) -> None:
    broker = f"redis://127.0.0.1:{silent_port}/0"
    proc, took = submit(
        tmp_path, "k-broker", AGENT_JOBS_DATABASE_URL=pg_database, AGENT_JOBS_BROKER_URL=broker
    )
    assert took <= BUDGET_S, (took, proc.stderr)
    assert proc.returncode == 0, proc.stderr
    task_id = proc.stdout.strip()
    assert task_id.startswith("tsk_")
    # The tenant directory's Redis timeout (5 s) ends the publish; on a machine slow enough to
    # start that the deadline comes first, the watchdog says the same.
    said = (
        f"{task_id} is recorded, but its first step was not sent: the broker at {broker} "
        "(AGENT_JOBS_BROKER_URL) did not take it",
        f"still waiting for the broker at {broker} (AGENT_JOBS_BROKER_URL) to take its first "
        f"step.\n{task_id} is recorded; its first step is not sent yet",
    )
    assert any(s in proc.stderr for s in said), proc.stderr
    assert "beat's dispatch sweeper sends it once the broker answers" in proc.stderr
    assert task_status(pg_database, "k-broker") == "RECEIVED"


def test_broker_silent_where_nothing_bounds_the_publish(
    tmp_path: Path, pg_database: str, silent_port: int
) -> None:
    """The tenant directory on a Redis that answers, the broker silent: kombu's publish waits
    without end, so the watchdog ends the command, saying so, with the task recorded."""
    broker = f"redis://127.0.0.1:{silent_port}/0"
    proc, took = submit(
        tmp_path, "k-put", AGENT_JOBS_DATABASE_URL=pg_database, AGENT_JOBS_BROKER_URL=broker,
        AGENT_JOBS_REDIS_URL=REDIS_URL,
    )  # fmt: skip
    assert took <= BUDGET_S, (took, proc.stderr)
    assert proc.returncode == 0, proc.stderr
    task_id = proc.stdout.strip()
    waiting = f"waiting for the broker at {broker} (AGENT_JOBS_BROKER_URL) to take its first step"
    assert waiting in proc.stderr  # progress while it waits
    assert f"still {waiting}.\n{task_id} is recorded; its first step is not sent yet" in (
        proc.stderr
    )
    assert task_status(pg_database, "k-put") == "RECEIVED"
