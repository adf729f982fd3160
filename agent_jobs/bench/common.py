"""What every benchmark needs: a Postgres database of its own, a clean broker, progress lines."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from agent_jobs.bench.procs import BENCH_APP
from agent_jobs.config import load_settings
from agent_jobs.core.errors import ConfigError
from agent_jobs.core.polling import poll


def require_services(*, claim: bool = True) -> tuple[str, str]:
    """The benchmarks measure the production path: Postgres and Redis, from the environment.

    With `claim`, the configured database is the benchmark's to empty: created and marked now
    if it does not exist, else it must carry the mark or be named with `--wipe`; otherwise a
    one-line refusal (`WipeRefused`) before anything is started or touched."""
    cfg = load_settings()
    if not cfg.database_url.startswith(("postgresql", "postgres")):
        raise ConfigError(
            "benchmarks run on Postgres: set AGENT_JOBS_DATABASE_URL "
            "(e.g. postgresql://postgres@127.0.0.1:5432/agent_jobs_bench; `make bench` does)"
        )
    if not cfg.broker_url.startswith(("redis://", "rediss://")):
        raise ConfigError(
            "benchmarks run on Redis: set AGENT_JOBS_BROKER_URL (e.g. redis://127.0.0.1:6379/5)"
        )
    if claim:
        from agent_jobs.store.admin import claim_database  # noqa: PLC0415

        claim_database(cfg.database_url)
    return cfg.database_url, cfg.broker_url


def progress(enabled: bool, text: str) -> None:
    if enabled:
        print(f"  {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def abba(round_index: int, pair: list[Any]) -> list[Any]:
    """A pair in ABBA order: as given in even rounds, reversed in odd ones. The second of a pair
    runs on a database a round larger and a machine that drifted, so neither side is always
    second."""
    return pair if round_index % 2 == 0 else pair[::-1]


def wait(check: Callable[[], Any], timeout_s: float, every_s: float = 0.05, what: str = "") -> Any:
    return poll(check, timeout_s=timeout_s, every_s=every_s, what=what)


def bench_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for the worker processes: this process's AGENT_JOBS_* plus overrides."""
    env = {k: v for k, v in os.environ.items() if k.startswith("AGENT_JOBS_")}
    env.update(extra or {})
    return env


class Phase:
    """One measured configuration: a clean database, a queue prefix of its own (so no queue,
    directory entry or gate state of another phase leaks in), worker processes started with the
    given settings, and a runtime in this process built with the same settings."""

    def __init__(
        self,
        name: str,
        workers: int,
        show: bool,
        env: dict[str, str] | None = None,
        *,
        app: str | None = None,
        fresh: bool = True,
    ) -> None:
        import re  # noqa: PLC0415
        import tempfile  # noqa: PLC0415
        import uuid  # noqa: PLC0415
        from pathlib import Path  # noqa: PLC0415

        self.name = name
        self.show = show
        # The workers' Celery app (default: the bench app) and whether the database is emptied
        # on entry (a seeded one is kept).
        self.app = app or BENCH_APP
        self.fresh = fresh
        self.workers = workers
        # the label is for people ("1000 known, 50 active"); the log directory gets a plain slug
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "phase"
        self.env = {"AGENT_JOBS_QUEUE_PREFIX": f"bench{uuid.uuid4().hex[:6]}", **(env or {})}
        self.logdir = Path(tempfile.mkdtemp(prefix=f"agent-jobs-{slug}-"))
        self.procs: list[Any] = []
        self.rt: Any = None

    def __enter__(self) -> Phase:
        from agent_jobs.bench.procs import start_workers  # noqa: PLC0415
        from agent_jobs.config import from_environ  # noqa: PLC0415
        from agent_jobs.queue.runtime import build_runtime  # noqa: PLC0415
        from agent_jobs.store.admin import prepare  # noqa: PLC0415

        # This process's settings with the phase's variables on top, as its workers get them.
        cfg = from_environ({**os.environ, **self.env})
        if self.fresh:
            prepare(cfg.database_url).dispose()
        self.rt = build_runtime(cfg)
        progress(self.show, f"[{self.name}] {self.workers} worker processes, logs in {self.logdir}")
        self.procs = start_workers(bench_env(self.env), self.workers, self.logdir, app=self.app)
        return self

    def __exit__(self, *exc: object) -> None:
        from agent_jobs.bench.procs import stop_all  # noqa: PLC0415

        stop_all(self.procs)
        if self.rt is not None:
            self.rt.store.dispose()

    def submit(self, tenant: str, data: dict[str, Any], key: str | None = None) -> str:
        from agent_jobs.core.contracts import TaskRequest  # noqa: PLC0415

        request = TaskRequest(workflow="noop@1", input=data)
        key = key or f"b{time.time_ns()}"
        return str(self.rt.orchestrator.submit(tenant, key, request, requester="bench").task.id)

    def finish(self, ids: list[str], timeout_s: float = 1800) -> None:
        from agent_jobs.core.states import Status  # noqa: PLC0415

        store = self.rt.store
        wait(
            lambda: store.count_in_status(ids, Status.COMPLETED) == len(ids),
            timeout_s,
            0.1,
            "for tasks",
        )


def jain(values: list[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one takes everything."""
    total = sum(values)
    squares = sum(v * v for v in values)
    return (total * total) / (len(values) * squares) if squares else 1.0


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]
