"""Running an `agent-jobs bench` command end to end for a smoke test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from typing import Any

from tests.services import check_test_database_name


def run_bench(
    command: str,
    *args: str,
    database_url: str,
    broker_url: str,
    prefix: str | None = None,
    timeout_s: float = 300,
) -> dict[str, Any]:
    """`agent-jobs bench <command> <args> --json` in a subprocess on the test services (with a
    queue prefix of its own, `<prefix><random>`, when given): the JSON object it printed. The
    command must succeed. The test's database was made by the test, not by the benchmark, so
    it is named with `--wipe` (only `aj_test_*` databases are)."""
    name = database_url.partition("?")[0].rsplit("/", 1)[1]
    check_test_database_name(name)
    env = {
        **os.environ,
        "AGENT_JOBS_DATABASE_URL": database_url,
        "AGENT_JOBS_BROKER_URL": broker_url,
    }
    if prefix is not None:
        env["AGENT_JOBS_QUEUE_PREFIX"] = f"{prefix}{uuid.uuid4().hex[:6]}"
    done = subprocess.run(
        [sys.executable, "-m", "agent_jobs.cli", "bench", command, *args, "--wipe", name, "--json"],
        env=env, capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result
