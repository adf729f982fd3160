"""`agent-jobs webhooks`: add (the secret shown once), list, refuse an inside URL with one line,
disable, replay nothing, remove; a tenant sees only its own endpoints. The first command runs as
a real subprocess (the installed entry point); the rest in-process, the same `main`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_jobs.cli import main
from agent_jobs.config import settings
from agent_jobs.store import Store
from agent_jobs.store.migrate import upgrade


def test_webhooks_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'aj.db'}"
    store = Store.from_url(url)
    upgrade(store.engine)
    store.dispose()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_JOBS_")}
    env.update(AGENT_JOBS_DATABASE_URL=url, AGENT_JOBS_WEBHOOK_ALLOW_NETWORKS="127.0.0.1/32")
    add = subprocess.run(
        [sys.executable, "-m", "agent_jobs.cli", "webhooks", "add", "--tenant", "acme",
         "http://127.0.0.1:9/hook", "--events", "task.completed,approval.requested"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert add.returncode == 0, add.stderr
    endpoint = add.stdout.split()[0]
    assert endpoint.startswith("whe_") and "secret (shown once): whsec_" in add.stdout
    for name in [n for n in os.environ if n.startswith("AGENT_JOBS_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("AGENT_JOBS_"):
            monkeypatch.setenv(name, value)
    settings.cache_clear()
    try:

        def cli(*args: str) -> tuple[int, str, str]:
            code = main(["webhooks", *args])
            out = capsys.readouterr()
            return code, out.out, out.err

        code, out, _ = cli("list", "--tenant", "acme")
        assert endpoint in out and "whsec_" not in out
        assert cli("list", "--tenant", "other")[1] == ""
        code, _, err = cli(
            "add", "--tenant", "acme", "https://10.0.0.7/x", "--events", "task.completed"
        )
        assert code == 2
        assert err.strip().splitlines() == [
            "agent-jobs: error: webhook url refused: 10.0.0.7 resolves to 10.0.0.7, "
            "a private address"
        ]
        code, _, err = cli("disable", "--tenant", "other", endpoint)
        assert code == 2 and "not found" in err
        assert "DISABLED (disabled by its owner)" in cli("disable", "--tenant", "acme", endpoint)[1]
        replay = cli("replay", "--tenant", "acme", "--endpoint", endpoint)[1]
        assert replay.strip() == "0 dead deliveries made due again"
        assert cli("remove", "--tenant", "acme", endpoint)[0] == 0
        assert cli("list", "--tenant", "acme")[1] == ""
    finally:
        settings.cache_clear()
