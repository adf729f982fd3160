"""`agent-jobs webhooks` as a subprocess: add (the secret shown once), list, refuse an inside
URL with one line, disable, replay nothing, remove; a tenant sees only its own endpoints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent_jobs.cli", *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_webhooks_commands(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_JOBS_")}
    env["AGENT_JOBS_DATABASE_URL"] = f"sqlite:///{tmp_path / 'aj.db'}"
    env["AGENT_JOBS_WEBHOOK_ALLOW_NETWORKS"] = "127.0.0.1/32"
    assert _cli(env, "db", "upgrade").returncode == 0
    add = _cli(env, "webhooks", "add", "--tenant", "acme", "http://127.0.0.1:9/hook",
               "--events", "task.completed,approval.requested")  # fmt: skip
    assert add.returncode == 0, add.stderr
    endpoint = add.stdout.split()[0]
    assert endpoint.startswith("whe_") and "secret (shown once): whsec_" in add.stdout
    listed = _cli(env, "webhooks", "list", "--tenant", "acme")
    assert endpoint in listed.stdout and "whsec_" not in listed.stdout
    assert _cli(env, "webhooks", "list", "--tenant", "other").stdout == ""
    inside = _cli(env, "webhooks", "add", "--tenant", "acme", "https://10.0.0.7/x",
                  "--events", "task.completed")  # fmt: skip
    assert inside.returncode == 2
    assert inside.stderr.strip().splitlines() == [
        "agent-jobs: error: webhook url refused: 10.0.0.7 resolves to 10.0.0.7, a private address"
    ]
    other = _cli(env, "webhooks", "disable", "--tenant", "other", endpoint)
    assert other.returncode == 2 and "not found" in other.stderr
    off = _cli(env, "webhooks", "disable", "--tenant", "acme", endpoint)
    assert "DISABLED (disabled by its owner)" in off.stdout
    replay = _cli(env, "webhooks", "replay", "--tenant", "acme", "--endpoint", endpoint)
    assert replay.stdout.strip() == "0 dead deliveries made due again"
    assert _cli(env, "webhooks", "remove", "--tenant", "acme", endpoint).returncode == 0
    assert _cli(env, "webhooks", "list", "--tenant", "acme").stdout == ""
