"""What every demo needs: a throwaway embedded environment, worker processes to start and kill,
waiting on conditions, and printing a task's timeline."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from agent_jobs.config import settings
from agent_jobs.core.contracts import EventView
from agent_jobs.core.identity import worker_name
from agent_jobs.core.polling import poll
from agent_jobs.core.states import Status


class DemoEnv:
    """A temporary directory holding the SQLite database and the simulated systems' files, and
    the `AGENT_JOBS_*` variables that point this process (and its child workers) at them."""

    def __init__(
        self, *, lease_ttl_s: float = 2.0, keep: bool = False, extra: dict[str, str] | None = None
    ) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="agent-jobs-demo-"))
        self.keep = keep
        self.env = {
            "AGENT_JOBS_DATABASE_URL": f"sqlite:///{self.dir / 'agent_jobs.db'}",
            "AGENT_JOBS_BROKER_URL": "memory://localhost/",
            "AGENT_JOBS_REDIS_URL": "",
            "AGENT_JOBS_EXAMPLE_BACKEND": str(self.dir / "ledger.db"),
            "AGENT_JOBS_LEASE_TTL_S": str(lease_ttl_s),
            "AGENT_JOBS_SWEEP_INTERVAL_S": "0.5",
            "AGENT_JOBS_DISPATCH_GRACE_S": "1",
            "AGENT_JOBS_WORKER_ID": "w-12",
            **(extra or {}),
        }
        self._saved: dict[str, str | None] = {}
        self.procs: list[subprocess.Popen[str]] = []

    def __enter__(self) -> DemoEnv:
        for k, v in self.env.items():
            self._saved[k] = os.environ.get(k)
            os.environ[k] = v
        settings.cache_clear()
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        for k, old in self._saved.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old
        settings.cache_clear()
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)

    def spawn_worker(self, name: str, concurrency: int = 2) -> subprocess.Popen[str]:
        """A separate worker process (`agent-jobs run`) with its own in-process broker; it finds
        its work through the shared database, as a restarted embedded worker does."""
        env = {**os.environ, "AGENT_JOBS_WORKER_ID": name}
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent_jobs.cli", "run", "--concurrency", str(concurrency)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.procs.append(proc)
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"worker {name} exited before it was ready (code {proc.poll()})")
            if "ready" in line:
                return proc
        raise RuntimeError(f"worker {name} did not start in time")

    @staticmethod
    def kill(proc: subprocess.Popen[str]) -> None:
        """SIGKILL: no cleanup, no lease release, no goodbye — a lost worker."""
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def wait_for(
    what: str, check: Callable[[], Any], timeout_s: float = 60.0, every_s: float = 0.05
) -> Any:
    return poll(check, timeout_s=timeout_s, every_s=every_s, what=what)


class Printer:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.t0 = time.monotonic()

    def step(self, text: str) -> None:
        if not self.quiet:
            print(f"[{time.monotonic() - self.t0:6.2f}s] {text}", flush=True)

    def line(self, text: str = "") -> None:
        print(text, flush=True)


def timeline(
    events: list[EventView],
    detail: Callable[[EventView], str] | None = None,
    *,
    type_width: int = 28,
) -> list[str]:
    """The task's trace, as an on-call engineer reads it: offsets, moves, who moved it, and
    `detail` of each event (by default its reason, key, approval and error fields)."""
    if not events:
        return []
    describe = detail or _detail
    t0 = events[0].at
    rows = []
    for e in events:
        offset = (e.at - t0).total_seconds()
        move = (
            f"{e.from_status.value if e.from_status else '':>12} -> {e.to_status.value:<13}"
            if e.to_status
            else " " * 30
        )
        by = worker_name(str(e.data.get("by") or e.data.get("approver") or ""))
        rows.append(
            f"  +{offset:7.3f}s  {move} {e.type:<{type_width}} {by:<8} {describe(e)}".rstrip()
        )
    return rows


def _detail(e: EventView) -> str:
    keys = ("reason", "idempotency_key", "approval_id", "code", "detail")
    return " ".join(f"{k}={v}" for k, v in e.data.items() if k in keys)


def reconciling(store: Any, task_id: str, owner: str) -> bool:
    """`owner` holds the task while it is in EXEC_UNKNOWN: the lookup by key is under way."""
    task = store.get(task_id)
    held_by = worker_name(task.lease_owner) if task.lease_owner else None
    return bool(task.status is Status.EXEC_UNKNOWN and held_by == owner)
