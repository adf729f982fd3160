"""`agent-jobs bench failover`: Redis under Sentinel loses its primary under load; how soon
every runnable task moves again after the Sentinel elects the replica, with the default timings.

The bench owns everything it kills: two redis-servers (a primary and its replica) and one
`redis-sentinel` watching them, on free ports of 127.0.0.1, without persistence. The workers, beat
and the bench's own runtime reach the broker only through the Sentinel
(`AGENT_JOBS_BROKER_URL=sentinel://127.0.0.1:<port>/0`, agent_jobs' Sentinel transport: step acks
in memory and the ready ring, as on `redis://`). The load is `outage`'s: no-op tasks over four
tenants (half quick steps, half leased) and example payouts (one effect each). Then the primary
is SIGKILLed; the Sentinel notices after `DOWN_AFTER_MS` and promotes the replica.

Figures, from the event log (database timestamps): for every task runnable at the kill, the time
from the election to its next commit ("moving again"), median and max; the election's delay
after the kill; tasks lost; effects applied twice (ledger transfers sharing an idempotency key);
worker processes that exited.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import IO, Any

import redis

from agent_jobs.bench.common import progress as say
from agent_jobs.bench.common import require_services
from agent_jobs.bench.outage import (
    DRAIN_S,
    FLOWING_S,
    LEDGER,
    PAYOUTS_LEAD_S,
    STEPS,
    TENANTS,
    TIMING_VARIABLES,
    WORKERS,
    _figures,
    _fmt,
    _timings,
    _wait,
)
from agent_jobs.bench.procs import BeatProcess, WorkerProcess, start_workers, stop_all
from agent_jobs.bench.proxy import free_port
from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.errors import ConfigError
from agent_jobs.core.states import TERMINAL

MASTER = "ajbench"
DOWN_AFTER_MS = 1000  # the Sentinel calls the primary down after this long without an answer
ELECTION_TIMEOUT_S = 30.0


class SentinelSet:
    """A primary, its replica and one Sentinel (quorum 1), each a process of the bench's own."""

    def __init__(self, logdir: Path) -> None:
        self.server = shutil.which("redis-server")
        self.sentinel = shutil.which("redis-sentinel")
        if self.server is None or self.sentinel is None:
            raise ConfigError(
                "this bench needs redis-server and redis-sentinel on the PATH "
                "(Debian: apt-get install redis-sentinel)"
            )
        self.logdir = logdir
        self.ports = [free_port(), free_port()]
        self.sentinel_port = free_port()
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self._log: IO[bytes] = open(logdir / "redis.log", "ab")  # noqa: SIM115 - closed on exit

    @property
    def url(self) -> str:
        return f"sentinel://127.0.0.1:{self.sentinel_port}/0"

    def __enter__(self) -> SentinelSet:
        try:
            primary, replica = self.ports
            self._start(primary, [])
            self._start(replica, ["--replicaof", "127.0.0.1", str(primary)])
            _until(lambda: _info(replica).get("master_link_status") == "up", 30, "replication")
            conf = self.logdir / "sentinel.conf"
            conf.write_text(
                f"port {self.sentinel_port}\nbind 127.0.0.1\ndir {self.logdir}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {primary} 1\n"
                f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {MASTER} 10000\n"
                f"sentinel parallel-syncs {MASTER} 1\n"
            )
            assert self.sentinel is not None
            self.procs[self.sentinel_port] = subprocess.Popen(
                [self.sentinel, str(conf)], stdout=self._log, stderr=subprocess.STDOUT
            )
            _until(lambda: self._replicas_known() >= 1, 30, "the Sentinel to see the replica")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        self._log.close()

    def _start(self, port: int, extra: list[str]) -> None:
        assert self.server is not None
        self.procs[port] = subprocess.Popen(
            [self.server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.logdir), *extra],
            stdout=self._log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        _until(lambda: _ping(port), 15, f"redis-server on port {port}")

    def _sentinel(self) -> Any:
        return redis.Redis(port=self.sentinel_port, socket_timeout=1, socket_connect_timeout=1)

    def _replicas_known(self) -> int:
        with contextlib.suppress(redis.RedisError):
            return len(self._sentinel().execute_command("SENTINEL", "REPLICAS", MASTER))
        return 0

    def primary_port(self) -> int | None:
        with contextlib.suppress(redis.RedisError):
            got = self._sentinel().execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
            return int(got[1]) if got else None
        return None

    def kill_primary(self) -> int:
        """SIGKILL the current primary (no save, no goodbye); its port."""
        port = self.primary_port()
        if port is None:
            raise RuntimeError("the Sentinel names no primary")
        proc = self.procs[port]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return port

    def wait_elected(self, old: int, timeout_s: float = ELECTION_TIMEOUT_S) -> int:
        """Until the Sentinel names another primary and that server says it is one; its port."""

        def elected() -> bool:
            port = self.primary_port()
            return port not in (None, old) and _info(port or 0).get("role") == "master"

        _until(elected, timeout_s, "the Sentinel's election")
        port = self.primary_port()
        assert port is not None
        return port


def run(*, tasks: int = 20, progress: bool = True) -> dict[str, Any]:
    database_url, _ = require_services()
    if tasks < 2:
        raise ValueError("--tasks must be at least 2")
    logdir = Path(tempfile.mkdtemp(prefix="agent-jobs-failover-"))
    say(progress, f"logs in {logdir}")
    with SentinelSet(logdir) as redis_set:
        from agent_jobs.config import from_environ, settings  # noqa: PLC0415

        # This process's Celery app (its submissions, the workers' readiness pings) goes through
        # the Sentinel too: set before anything reads the app's settings.
        os.environ["AGENT_JOBS_BROKER_URL"] = redis_set.url
        os.environ["AGENT_JOBS_SENTINEL_MASTER"] = MASTER
        os.environ.pop("AGENT_JOBS_REDIS_URL", None)
        settings.cache_clear()
        env = _env(database_url, redis_set.url, logdir)
        cfg = from_environ(env)
        result = _scenario(redis_set, env, cfg, tasks=tasks, logdir=logdir, show=progress)
    result.update({"tasks": tasks, "workers": WORKERS, "steps": STEPS, "logs": str(logdir)})
    return result


def _env(database_url: str, broker_url: str, logdir: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith("AGENT_JOBS_") and k not in TIMING_VARIABLES
    }
    env.update({
        "AGENT_JOBS_DATABASE_URL": database_url,
        "AGENT_JOBS_BROKER_URL": broker_url,
        "AGENT_JOBS_SENTINEL_MASTER": MASTER,
        "AGENT_JOBS_QUEUE_PREFIX": f"failover{uuid.uuid4().hex[:6]}",
        "AGENT_JOBS_EXAMPLE_BACKEND": str(logdir / LEDGER),
    })  # fmt: skip
    env.pop("AGENT_JOBS_REDIS_URL", None)
    env.setdefault("AGENT_JOBS_TOOL_SECRET", secrets.token_urlsafe(32))
    return env


def _scenario(
    redis_set: SentinelSet, env: dict[str, str], cfg: Any, *, tasks: int, logdir: Path, show: bool
) -> dict[str, Any]:
    from agent_jobs.queue.runtime import build_runtime  # noqa: PLC0415
    from agent_jobs.store.admin import prepare  # noqa: PLC0415
    from agent_jobs.workflows.example_backend import ExampleBackend  # noqa: PLC0415

    prepare(cfg.database_url).dispose()
    rt = build_runtime(cfg)
    ledger = ExampleBackend(logdir / LEDGER)
    workers: list[WorkerProcess] = []
    try:
        workers = start_workers(env, WORKERS, logdir)
        with BeatProcess(env, logdir):
            rt.sweepers.dispatch()  # sets the broker's sentinel key for this new Redis
            store = rt.store

            def submit(tenant: str, workflow: str, data: dict[str, Any]) -> str:
                request = TaskRequest(workflow=workflow, input=data)
                key = f"f{time.time_ns()}"
                return str(rt.orchestrator.submit(tenant, key, request, requester="bench").task.id)

            warm = [submit(f"failover{t}", "noop@1", {"steps": 1}) for t in range(TENANTS)]
            _wait(lambda: all(store.get(t).status in TERMINAL for t in warm), 60, "the warm-up")
            ids = [
                submit(f"failover{i % TENANTS}", "noop@1",
                       {"steps": STEPS, **({"sleep_ms": 20} if i % 2 else {})})
                for i in range(tasks)
            ]  # fmt: skip
            time.sleep(FLOWING_S)
            for i in range(max(1, tasks // 2)):
                payout = {"account": f"acc_{i}", "amount_minor": 900, "reads": 1}
                ids.append(submit("failover-pay", "example@1", payout))
            time.sleep(PAYOUTS_LEAD_S)
            runnable = [t for t in ids if store.get(t).status not in TERMINAL]
            killed_at = store.db_now()
            old = redis_set.kill_primary()
            say(show, f"primary on port {old} killed ({len(runnable)} tasks runnable)")
            new = redis_set.wait_elected(old)
            elected_at = store.db_now()
            say(
                show,
                f"the Sentinel elected port {new}, {_secs(killed_at, elected_at):.2f} s after the kill",
            )
            deadline = time.monotonic() + DRAIN_S
            while time.monotonic() < deadline:
                if all(store.get(t).status in TERMINAL for t in ids):
                    break
                time.sleep(0.25)
        exits = [w.proc.returncode for w in workers if w.proc.poll() is not None]
        figures = _figures(store, ids, runnable, elected_at, ledger)
    finally:
        stop_all(workers)
        rt.store.dispose()
    figures.update({
        "timings": _timings(cfg),
        "election_s": round(_secs(killed_at, elected_at), 2),
        "worker_exits": len(exits),
    })  # fmt: skip
    return figures


def _secs(a: Any, b: Any) -> float:
    return float((b - a).total_seconds())


def _ping(port: int) -> bool:
    with contextlib.suppress(redis.RedisError):
        return bool(redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1).ping())
    return False


def _info(port: int) -> dict[str, Any]:
    with contextlib.suppress(redis.RedisError):
        got: dict[str, Any] = redis.Redis(
            port=port, socket_timeout=1, socket_connect_timeout=1
        ).info("replication")
        return got
    return {}


def _until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise RuntimeError(f"waited {timeout_s:g} s for {what}")


def render(r: dict[str, Any]) -> str:
    return "\n".join([
        f"bench failover: {r['tasks']} no-op tasks of {r['steps']} steps and {r['tasks'] // 2} payouts, "
        f"{r['workers']} workers and beat on a Sentinel's primary, which is SIGKILLed",
        f"  the Sentinel elected the replica        {r['election_s']:.2f} s after the kill "
        f"(down-after {DOWN_AFTER_MS} ms)",
        f"  moving again after the election        p50 {_fmt(r['moving_p50_s'])} s, max "
        f"{_fmt(r['moving_max_s'])} s over {r['moving_n']} of {r['runnable']} runnable tasks "
        f"({r['finished_during_outage']} finished meanwhile)",
        f"  lost {r['lost']}, effects applied twice {r['duplicate_effects']} "
        f"({r['transfers']} transfers), worker exits {r['worker_exits']}",
    ])  # fmt: skip
