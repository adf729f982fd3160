"""`agent-jobs bench sweep` runs end to end at a tiny size (it seeds due tasks of every kind,
approvals included, through the current schema) and prints its JSON object. A smoke test: the
shape of the output and that every sweep found the due tasks, never a speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def test_bench_sweep_seeds_sweeps_and_prints(pg_database: str, redis_url: str) -> None:
    env = {**os.environ, "AGENT_JOBS_DATABASE_URL": pg_database, "AGENT_JOBS_BROKER_URL": redis_url}
    done = subprocess.run(
        [sys.executable, "-m", "agent_jobs.cli", "bench", "sweep", "--rows", "2000",
         "--small", "100", "--due", "20", "--repeats", "1", "--json"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    # Every sweep, with few finished tasks and with many, found each due task of every kind.
    assert result["due_found"] == {"small": 20, "large": 20}
    assert result["small_ms"] > 0 and result["large_ms"] > 0 and result["ratio"] > 0
