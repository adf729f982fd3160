"""The processes benchmarks start: worker processes and beat for benchmarks, the chaos run and
acceptance tests, and a redis-server of a bench's own."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import redis

from agent_jobs.bench.proxy import free_port
from agent_jobs.config import load_settings
from agent_jobs.core.errors import ConfigError


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
        wrap: list[str] | None = None,
    ) -> None:
        """`wrap`: a command that runs the worker's (e.g. `ip netns exec NAME`)."""
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
            [*(wrap or []), *cmd],
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


class PrivateRedis:
    """A redis-server of the bench's own on a free port, without persistence: everything the
    bench flushes or kills is its own. `kill` is a SIGKILL, and `start` after it brings up an
    empty server on the same port."""

    def __init__(self, logdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise ConfigError("this bench needs redis-server on the PATH (a broker of its own)")
        self.binary = binary
        self.port = free_port()
        self.logdir = logdir
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def __enter__(self) -> PrivateRedis:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.kill()
        if self._log is not None:
            self._log.close()

    def start(self, timeout_s: float = 15.0) -> None:
        if self._log is None:
            self._log = open(self.logdir / "redis.log", "ab")  # noqa: SIM115 - closed on exit
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.logdir)],
            stdout=self._log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        client = redis.Redis(port=self.port, socket_timeout=1, socket_connect_timeout=1)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server exited at start (see {self.logdir})")
                with contextlib.suppress(redis.RedisError):
                    if client.ping():
                        return
                time.sleep(0.02)
        finally:
            client.close()
        raise RuntimeError(f"redis-server on port {self.port} not answering after {timeout_s} s")

    def kill(self) -> None:
        """SIGKILL: no save, no goodbye to its clients."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


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
    """User + system CPU seconds a live process has used, to the nanosecond; 0.0 once it is gone.

    Read from the process's CPU-time clock (what glibc's `clock_getcpuclockid` builds: the pid
    complemented, shifted by three, or-ed with CPUCLOCK_SCHED), which Linux lets any process read.
    `/proc/<pid>/stat` counts whole 10 ms ticks, so a smoke run of a few steps read 0.0 there; it
    stays the fallback where the clock cannot be read.
    """
    try:
        return time.clock_gettime((~pid << 3) | 2)
    except (OSError, OverflowError):
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def workers_cpu(workers: list[WorkerProcess]) -> float:
    """CPU seconds used so far by benchmark workers (solo pool: one process each)."""
    return sum(cpu_seconds(w.proc.pid) for w in workers)
