"""Secrets fail closed: outside the embedded mode a worker without `AGENT_JOBS_TOOL_SECRET` and
an API without a JWT key refuse to start with one line naming the setting (the tool secret used
to fall back to a development value published in the source, with only a warning)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

WORKERS = [
    ["-m", "celery", "-A", "agent_jobs", "worker", "--pool", "solo", "--loglevel", "INFO"],
    ["-m", "agent_jobs.cli", "worker", "--", "--pool", "solo", "--loglevel", "INFO"],
    ["-m", "agent_jobs.cli", "run", "--no-beat"],  # the thread-pool runner, on a real broker
]


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    """A deployment's environment with no secret at all. The broker is Redis on a port nothing
    listens on: the refusal must come before any connection (and this test needs no service)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_JOBS_")}
    env.update(
        AGENT_JOBS_DATABASE_URL=f"sqlite:///{tmp / 'aj.db'}",
        AGENT_JOBS_BROKER_URL="redis://127.0.0.1:9/0",
        **extra,
    )
    return env


def _run(tmp: Path, command: list[str], env: dict[str, str]) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, *command], cwd=tmp, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "command", WORKERS, ids=["celery-worker", "agent-jobs-worker", "agent-jobs-run"]
)
def test_a_worker_without_a_tool_secret_refuses_to_start(
    tmp_path: Path, command: list[str]
) -> None:
    code, out = _run(tmp_path, command, _env(tmp_path))
    assert code == 2, out
    assert "Traceback" not in out
    said = [ln for ln in out.splitlines() if "AGENT_JOBS_TOOL_SECRET" in ln]
    assert len(said) == 1 and "is not set" in said[0], out


def test_an_api_without_a_jwt_key_refuses_to_start(tmp_path: Path) -> None:
    env = _env(tmp_path, AGENT_JOBS_TOOL_SECRET="t" * 32)
    code, out = _run(tmp_path, ["-m", "agent_jobs.cli", "api", "--port", "9"], env)
    assert code == 2, out
    assert "Traceback" not in out
    said = [ln for ln in out.splitlines() if "AGENT_JOBS_JWT_SECRET" in ln]
    assert len(said) == 1 and "is not set" in said[0], out
