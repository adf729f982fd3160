"""Workflows of a user's own, as a user loads them: `AGENT_JOBS_WORKFLOWS` (or an entry point)
names a module, and every process — the API, a worker and its forked children, beat, the CLI —
serves the same set; a module that cannot be loaded stops each at start with one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.core.states import TERMINAL, Status
from tests.support.live import wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PKG = "tests.support.user_workflows"
SETTING = "AGENT_JOBS_WORKFLOWS"
SECRET = "user-workflows-test-secret-0123456789abcdef"


def _env(tmp: Path, modules: str | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_JOBS_")}
    env.update({
        "AGENT_JOBS_DATABASE_URL": f"sqlite:///{tmp / 'aj.db'}",
        "AGENT_JOBS_EXAMPLE_BACKEND": str(tmp / "ledger.db"),
        "AGENT_JOBS_SWEEP_INTERVAL_S": "0.3",
        "AGENT_JOBS_DISPATCH_GRACE_S": "0.5",
        "AGENT_JOBS_JWT_SECRET": SECRET,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), extra.pop("PYTHONPATH", "")])),
    })  # fmt: skip
    if modules is not None:
        env[SETTING] = modules
    env.update(extra)
    return env


def _run(
    env: dict[str, str], *args: str, module: str = "agent_jobs.cli"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _ok(env: dict[str, str], *args: str, module: str = "agent_jobs.cli") -> str:
    proc = _run(env, *args, module=module)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _listed(env: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {row["workflow"]: row for row in json.loads(_ok(env, "workflows", "--json"))}


# -- (c) `agent-jobs workflows` ------------------------------------------------------------------


def test_the_workflows_command_lists_them_with_versions_and_origins(tmp_path: Path) -> None:
    env = _env(tmp_path, f"{PKG}.hello,{PKG}.registered")
    rows = _listed(env)
    assert rows["hello@2"] == {
        "workflow": "hello@2",
        "name": "hello",
        "version": 2,
        "origin": "module",
        "where": f"{PKG}.hello ({SETTING})",
    }
    assert rows["greeter@1"]["where"] == f"{PKG}.registered ({SETTING})"
    assert {rows[k]["origin"] for k in ("example@1", "noop@1", "refund_resolution@3")} == {
        "built-in"
    }
    text = _ok(env, "workflows").splitlines()
    assert text[0].split() == ["workflow", "version", "origin"]
    assert f"hello 2 module {PKG}.hello ({SETTING})" in [" ".join(line.split()) for line in text]


def test_an_entry_point_of_an_installed_distribution_is_loaded(tmp_path: Path) -> None:
    site = tmp_path / "site"
    info = site / "userdist-0.3.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: userdist\nVersion: 0.3\n")
    (info / "entry_points.txt").write_text(f"[agent_jobs.workflows]\nhi = {PKG}.hello\n")
    rows = _listed(_env(tmp_path, PYTHONPATH=str(site)))
    assert rows["hello@2"]["origin"] == "entry point"
    assert rows["hello@2"]["where"] == f"hi = {PKG}.hello, from userdist 0.3"

    (info / "entry_points.txt").write_text(f"[agent_jobs.workflows]\nhi = {PKG}.broken\n")
    proc = _run(_env(tmp_path, PYTHONPATH=str(site)), "workflows")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"agent-jobs: error: entry point 'hi' = '{PKG}.broken' (group agent_jobs.workflows, "
        "from userdist 0.3) did not import: RuntimeError: the greeting service is misconfigured"
    ]


# -- (d) a module that cannot be loaded: one line and a non-zero exit, at start -----------------


START = {
    "workflows": ["workflows"],
    "api": ["api", "--port", "0"],
    "worker": ["worker", "--", "--pool", "solo"],
    "run": ["run"],
    "submit": ["submit", "--tenant", "acme", "--key", "k1", "--workflow", "noop@1"],
}


@pytest.mark.parametrize("command", sorted(START))
@pytest.mark.parametrize(
    ("module", "says"),
    [
        ("broken", "did not import: RuntimeError: the greeting service is misconfigured"),
        ("empty", "registers no workflow"),
        ("conflicting", "workflow noop@1 is already registered"),
    ],
)
def test_a_module_that_cannot_be_loaded_stops_the_process_with_one_line(
    tmp_path: Path, command: str, module: str, says: str
) -> None:
    proc = _run(_env(tmp_path, f"{PKG}.hello,{PKG}.{module}"), *START[command])
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if SETTING in line]
    assert len(lines) == 1, proc.stderr
    assert f"{SETTING}: module '{PKG}.{module}'" in lines[0] and says in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout


def test_beat_stops_with_one_line_too(tmp_path: Path) -> None:
    env = _env(tmp_path, f"{PKG}.broken")
    schedule = str(tmp_path / "beat-schedule")
    proc = _run(env, "-A", "agent_jobs", "beat", "--schedule", schedule, module="celery")
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if SETTING in line]
    assert lines == [
        f"agent-jobs: {SETTING}: module '{PKG}.broken' did not import: "
        "RuntimeError: the greeting service is misconfigured"
    ]
    assert "Traceback" not in proc.stderr + proc.stdout


# -- (a) the API accepts them, (b) a worker runs them: embedded (SQLite) -----------------------


def _api_submit(env: dict[str, str], key: str, workflow: str, inp: dict[str, Any]) -> Any:
    out = _ok(env, "acme", key, workflow, json.dumps(inp), module=f"{PKG}.api_submit")
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[dict[str, str]]:
    """`agent-jobs run` (worker and beat, embedded) loading the user's modules."""
    env = _env(tmp_path, f"{PKG}.hello,{PKG}.registered")
    _ok(env, "db", "upgrade")
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_jobs.cli", "run", "--concurrency", "2"],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while "ready" not in proc.stdout.readline():
        assert time.monotonic() < deadline and proc.poll() is None, "agent-jobs run did not start"
    yield env
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)


def _wait_completed(env: dict[str, str], task_id: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        task = dict(json.loads(_ok(env, "status", task_id, "--json")))
        return task if task["status"] in {s.value for s in TERMINAL} else None

    task: dict[str, Any] = wait_until(f"task {task_id} terminal", done, 60, every_s=0.3)
    assert task["status"] == "COMPLETED", task
    return task


def test_the_api_accepts_them_and_an_embedded_worker_runs_them(runner: dict[str, str]) -> None:
    env = runner
    r = _api_submit(env, "k-hello", "hello@2", {"who": "Ada"})
    assert r["status"] == 202, r
    task = _wait_completed(env, r["body"]["task_id"])
    assert task["outcome"] == {"greeting": "hello, Ada", "by": "hello"}
    # The CLI's own submit loads them too (a `register()` module this time).
    task_id = _ok(env, "submit", "--tenant", "acme", "--key", "k-g", "--workflow", "greeter@1")
    task = _wait_completed(env, task_id.strip())
    assert task["outcome"] == {"greeting": "hello, world", "by": "greeter"}


# -- (a) and (b) on Postgres and Redis: the API process and a prefork worker's children ---------


@pytest.mark.postgres
@pytest.mark.redis
def test_a_prefork_workers_children_run_what_the_api_accepted(
    pg_database: str, redis_url: str, tmp_path: Path
) -> None:
    from agent_jobs.bench.procs import WorkerProcess
    from tests.support.live import live_runtime

    modules = f"{PKG}.hello,{PKG}.registered"
    with live_runtime(AGENT_JOBS_DATABASE_URL=pg_database) as (rt, live_env):
        worker_env = {**live_env, SETTING: modules, "PYTHONPATH": str(ROOT)}
        worker = WorkerProcess(worker_env, name="uw1", log=tmp_path / "uw1.log", concurrency=2)
        try:
            worker.wait_ready()
            api_env = {
                **os.environ,
                **worker_env,
                "AGENT_JOBS_JWT_SECRET": SECRET,
            }
            ids = []
            for key, workflow in (("k-h", "hello@2"), ("k-g", "greeter@1")):
                r = _api_submit(api_env, key, workflow, {"who": "Grace"})
                assert r["status"] == 202, r
                ids.append(r["body"]["task_id"])

            def done() -> bool:
                rt.sweepers.all()  # beat's job: the worker under test runs none
                return all(rt.store.get(t).status in TERMINAL for t in ids)

            wait_until("both tasks terminal", done, 120, every_s=0.3)
            log = (tmp_path / "uw1.log").read_text()
            for task_id, by in zip(ids, ("hello", "greeter"), strict=True):
                task = rt.store.get(task_id)
                assert task.status is Status.COMPLETED, (task, log[-3000:])
                assert task.outcome == {"greeting": "hello, Grace", "by": by}
        finally:
            worker.stop()
