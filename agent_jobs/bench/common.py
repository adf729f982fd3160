"""What every benchmark needs: a Postgres database of its own, a clean broker, progress lines."""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from agent_jobs.config import load_settings
from agent_jobs.core.errors import ConfigError


def require_services() -> tuple[str, str]:
    """The benchmarks measure the production path: Postgres and Redis, from the environment."""
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
    return cfg.database_url, cfg.broker_url


def progress(enabled: bool, text: str) -> None:
    if enabled:
        print(f"  {time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def wait(check: Callable[[], Any], timeout_s: float, every_s: float = 0.05, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every_s)
    raise TimeoutError(f"benchmark timed out after {timeout_s:.0f} s {what}")


def bench_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for the worker processes: this process's AGENT_JOBS_* plus overrides."""
    env = {k: v for k, v in os.environ.items() if k.startswith("AGENT_JOBS_")}
    env.update(extra or {})
    return env
