"""The commands that only read (`status`, `events`, `approvals`, `dead-letters`) open the store
alone: no Celery, broker or operator switches, so each answers about half a second sooner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CODE = """
import sys
from agent_jobs.cli import main
from agent_jobs.store import Store
from agent_jobs.store.migrate import upgrade
upgrade(Store.from_url(sys.argv[1]).engine)
codes = [main(args) for args in (
    ["status", "tsk_x"], ["events", "tsk_x"], ["approvals"], ["dead-letters"]
)]
print(codes, sorted(m for m in sys.modules if m.split(".")[0] == "celery")[:3])
"""


def test_reading_commands_load_no_celery(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'aj.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_JOBS_")}
    env["AGENT_JOBS_DATABASE_URL"] = url
    run = subprocess.run(
        [sys.executable, "-c", CODE, url],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    # two unknown tasks (exit 2, one line each), two empty lists; and Celery never imported
    assert run.stdout.strip() == "[2, 2, 0, 0] []", (run.stdout, run.stderr)
    assert run.stderr.count("not found") == 2, run.stderr


HELP = """
import sys
from agent_jobs.cli import build_parser
build_parser()
heavy = ("sqlalchemy", "celery", "kombu", "redis", "requests")
print(sorted({m.split(".")[0] for m in sys.modules} & set(heavy)),
      sorted(m for m in sys.modules if m.startswith(("agent_jobs.store", "agent_jobs.gateway",
             "agent_jobs.queue", "agent_jobs.orchestrator."))
             and m != "agent_jobs.orchestrator.sweep_kinds"))
"""


def test_the_command_tree_is_built_without_the_runtime() -> None:
    """`--help`, a usage error and every command's start cost only the parser: each command
    imports the store, the broker or the gateway when it runs (it imported all of them before,
    about 0.6 s on every invocation)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_JOBS_")}
    run = subprocess.run(
        [sys.executable, "-c", HELP], env=env, capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[] []", run.stdout
