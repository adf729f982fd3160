"""The production Celery app registers the platform's tasks and nothing of the benchmarks'; the
bench app (`celery -A agent_jobs.bench.app`) is the same app with the benchmark tasks added.
Checked in a fresh interpreter: in this one another test may have imported the bench tasks."""

from __future__ import annotations

import json
import subprocess
import sys


def _tasks(module: str) -> set[str]:
    code = (
        f"import json; from {module} import app\n"
        "app.loader.import_default_modules()\n"
        "print(json.dumps(sorted(n for n in app.tasks if not n.startswith('celery.'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_production_app_has_no_benchmark_tasks() -> None:
    production = _tasks("agent_jobs.celery")
    assert {"agent_jobs.step", "agent_jobs.submit", "agent_jobs.sweep.lease"} <= production
    assert not {n for n in production if n.startswith("agent_jobs.bench")}
    bench = _tasks("agent_jobs.bench.app")
    assert production < bench
    assert bench - production == {n for n in bench if n.startswith("agent_jobs.bench")}
