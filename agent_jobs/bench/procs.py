"""Worker processes for benchmarks, the chaos run and acceptance tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from agent_jobs.config import load_settings


def control_for(prefix: str) -> Any:
    """Celery's remote control on the control exchange of `prefix` (celery_config names the
    exchange by the queue prefix, so deployments sharing a Redis never steer each other)."""
    from celery.app.control import Control  # noqa: PLC0415

    from agent_jobs.queue.app import app  # noqa: PLC0415

    saved = app.conf.control_exchange
    app.conf.control_exchange = prefix
    try:
        return Control(app)
    finally:
        app.conf.control_exchange = saved


PRODUCTION_APP = "agent_jobs"
BENCH_APP = "agent_jobs.bench.app"  # the production app plus the benchmarks' own tasks


class WorkerProcess:
    """`celery -A <app> worker` as a real process group that can be SIGKILLed; by default the
    production app, exactly as an operator starts it."""

    def __init__(
        self,
        env: dict[str, str],
        *,
        name: str,
        log: Path,
        pool: str = "prefork",
        concurrency: int = 2,
        loglevel: str = "INFO",
        queues: list[str] | None = None,
        app: str = PRODUCTION_APP,
    ) -> None:
        self.name = name
        self.log = log
        # The child's prefix: its own environment, else this process's settings.
        child_env = env  # the worker's own variables, not this process's settings
        self.prefix = child_env.get("AGENT_JOBS_QUEUE_PREFIX") or load_settings().queue_prefix
        self._out: IO[str] = open(log, "w")  # noqa: SIM115 - closed in stop()
        cmd = [
            sys.executable, "-m", "celery", "-A", app, "worker",
            "--pool", pool, "--concurrency", str(concurrency),
            "--hostname", f"{name}@%h", "--loglevel", loglevel,
            "--without-mingle", "--without-gossip", "--without-heartbeat",
        ]  # fmt: skip
        if queues:
            cmd += ["--queues", ",".join(queues)]
        self.proc = subprocess.Popen(
            cmd,
            env={**os.environ, **env, "AGENT_JOBS_WORKER_ID": name},
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: SIGKILL takes the pool with it
        )

    @property
    def nodename(self) -> str:
        return f"{self.name}@{socket.gethostname()}"

    def wait_ready(self, timeout_s: float = 60) -> None:
        """Until the worker answers a control ping (works at any log level)."""
        control = control_for(self.prefix)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker {self.name} exited:\n{self.log.read_text()[-3000:]}")
            if control.ping(destination=[self.nodename], timeout=0.5):
                return
        raise RuntimeError(f"worker {self.name} not ready after {timeout_s} s")

    def sigkill(self) -> None:
        """The whole process group at once: no cleanup, no lease release, no ack."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout_s: float = 30) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._out.close()


def bench_worker(
    env: dict[str, str],
    name: str,
    logdir: Path,
    *,
    pool: str = "solo",
    concurrency: int = 1,
    app: str = BENCH_APP,
) -> WorkerProcess:
    """One benchmark worker, logging to `logdir/<name>.log` (not waited for)."""
    return WorkerProcess(
        env,
        name=name,
        log=logdir / f"{name}.log",
        pool=pool,
        concurrency=concurrency,
        loglevel="WARNING",
        app=app,
    )


def start_workers(
    env: dict[str, str],
    count: int,
    logdir: Path,
    *,
    pool: str = "solo",
    concurrency: int = 1,
    app: str = BENCH_APP,
) -> list[WorkerProcess]:
    """Benchmark workers: by default on the bench app, which knows the floor and chain tasks."""
    workers = [
        bench_worker(env, f"bench{i}", logdir, pool=pool, concurrency=concurrency, app=app)
        for i in range(count)
    ]
    try:
        for w in workers:
            w.wait_ready()
    except BaseException:
        stop_all(workers)  # never leave half a pool running in its own session
        raise
    return workers


class BeatProcess:
    """`celery -A <app> beat` as a process of its own session, running every sweeper on the
    schedule the settings in `env` give; its schedule file and log in `logdir`."""

    def __init__(self, env: dict[str, str], logdir: Path, *, app: str = PRODUCTION_APP) -> None:
        self._out: IO[str] = open(logdir / "beat.log", "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", app, "beat",
             "--schedule", str(logdir / "beat"), "--loglevel", "WARNING"],
            env={**os.environ, **env}, stdout=self._out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip

    def __enter__(self) -> BeatProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self, timeout_s: float = 20) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._out.close()


def stop_all(workers: list[WorkerProcess]) -> None:
    for w in workers:
        w.stop()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a live process has used (Linux `/proc`; 0.0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def workers_cpu(workers: list[WorkerProcess]) -> float:
    """CPU seconds used so far by benchmark workers (solo pool: one process each)."""
    return sum(cpu_seconds(w.proc.pid) for w in workers)
