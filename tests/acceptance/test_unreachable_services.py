"""A worker, beat or API started while Postgres (or the broker) cannot be reached says so in one
line that names the setting, with the password hidden: `agent-jobs worker: cannot reach the
database at postgresql://aj:***@127.0.0.1:<port>/agent_jobs (AGENT_JOBS_DATABASE_URL):
connection refused`. Worker and beat then exit non-zero; the API keeps serving `/readyz` 503 and
does not repeat itself at every probe. Real processes, pointed at a port nothing listens on."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.services import REDIS_URL

PASSWORD = "hunter2-do-not-print"

WORKER = ["-m", "agent_jobs.cli", "worker", "--", "--pool", "solo", "--loglevel", "INFO"]
CELERY_WORKER = ["-m", "celery", "-A", "agent_jobs", "worker", "--pool", "solo"]
BEAT = ["-m", "celery", "-A", "agent_jobs", "beat", "--loglevel", "INFO"]


def closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(**values: str) -> dict[str, str]:
    return {
        **os.environ,
        "AGENT_JOBS_TOOL_SECRET": "t" * 40,
        "AGENT_JOBS_JWT_SECRET": "j" * 40,
        **values,
    }


def _stderr_lines(stderr: str) -> list[str]:
    """The lines a person reads, less Celery's own start lines. Celery itself warns, in a block
    of its own, when run as root (a container's default): that block is Celery's, not ours, and
    only appears as root."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    # Beat at INFO (as the README runs it) logs that it starts before its first hook runs.
    lines = [ln for ln in lines if not ln.endswith("INFO/MainProcess] beat: Starting...")]
    if os.geteuid() == 0:
        block = ("SecurityWarning", "absolutely not recommended", "--uid option",
                 "User information", "_warn_or_raise_security_error")  # fmt: skip
        lines = [ln for ln in lines if not any(b in ln for b in block)]
    return lines


def _run(
    command: list[str], env: dict[str, str], tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    if "beat" in command:
        command = [*command, "--schedule", str(tmp_path / "beat-schedule")]
    return subprocess.run(
        [sys.executable, *command], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "who"),
    [(WORKER, "worker"), (CELERY_WORKER, "worker"), (BEAT, "beat")],
    ids=["agent-jobs-worker", "celery-worker", "beat"],
)
def test_worker_and_beat_without_postgres_say_one_line_and_exit(
    command: list[str], who: str, tmp_path: Path
) -> None:
    port = closed_port()
    url = f"postgresql://aj:{PASSWORD}@127.0.0.1:{port}/agent_jobs"
    proc = _run(
        command, _env(AGENT_JOBS_DATABASE_URL=url, AGENT_JOBS_BROKER_URL=REDIS_URL), tmp_path
    )
    assert proc.returncode == 3, proc.stderr
    lines = _stderr_lines(proc.stderr)
    assert lines == [
        f"agent-jobs {who}: cannot reach the database at "
        f"postgresql://aj:***@127.0.0.1:{port}/agent_jobs (AGENT_JOBS_DATABASE_URL): "
        "connection refused"
    ], proc.stderr
    assert PASSWORD not in proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "who"), [(WORKER, "worker"), (BEAT, "beat")], ids=["worker", "beat"]
)
def test_worker_and_beat_without_the_broker_say_one_line_and_exit(
    command: list[str], who: str, tmp_path: Path, pg_database: str
) -> None:
    port = closed_port()
    broker = f"redis://:{PASSWORD}@127.0.0.1:{port}/9"
    proc = _run(
        command, _env(AGENT_JOBS_DATABASE_URL=pg_database, AGENT_JOBS_BROKER_URL=broker), tmp_path
    )
    assert proc.returncode == 3, proc.stderr
    lines = _stderr_lines(proc.stderr)
    assert lines == [
        f"agent-jobs {who}: cannot reach the broker at redis://:***@127.0.0.1:{port}/9 "
        "(AGENT_JOBS_BROKER_URL): connection refused"
    ], proc.stderr
    assert PASSWORD not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_the_api_without_postgres_serves_readyz_503_and_says_so_once(tmp_path: Path) -> None:
    db_port, api_port = closed_port(), closed_port()
    url = f"postgresql://aj:{PASSWORD}@127.0.0.1:{db_port}/agent_jobs"
    env = _env(AGENT_JOBS_DATABASE_URL=url, AGENT_JOBS_BROKER_URL=REDIS_URL)
    log = tmp_path / "api.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent_jobs.cli", "api", "--port", str(api_port)],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    try:
        answers = []
        deadline = time.monotonic() + 60
        while len(answers) < 5 and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            try:
                answers.append(httpx.get(f"http://127.0.0.1:{api_port}/readyz", timeout=30))
            except httpx.TransportError:
                time.sleep(0.2)  # not listening yet
        assert len(answers) == 5, log.read_text()
        for r in answers:
            assert r.status_code == 503
            assert r.json()["checks"]["database"] == "unavailable"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    text = log.read_text()
    assert "Traceback" not in text
    assert PASSWORD not in text
    named = [ln for ln in text.splitlines() if "AGENT_JOBS_DATABASE_URL" in ln]
    assert named == [
        f"agent-jobs api: cannot reach the database at "
        f"postgresql://aj:***@127.0.0.1:{db_port}/agent_jobs (AGENT_JOBS_DATABASE_URL): "
        "connection refused; /readyz answers 503 until it answers"
    ], text
    # Nothing else says it again: not the operator switches' reader, not five probes of a state
    # already reported.
    again = ("readiness:", "operator switches", "connection refused", "Connection refused")
    assert [ln for ln in text.splitlines() if any(a in ln for a in again)] == named, text
