"""Settings, read once from the environment. Defaults give the embedded mode: nothing to install.

Every variable is prefixed `AGENT_JOBS_`; the README's "Configuration" table lists them all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import lru_cache

from agent_jobs.core.errors import ConfigError

EMBEDDED_DATABASE_URL = "sqlite:///agent_jobs.db"
EMBEDDED_BROKER_URL = "memory://localhost/"


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not a number") from exc
    if value < 0:
        raise ConfigError(f"{name}={raw!r} must not be negative")
    return value


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not an integer") from exc


@dataclass(frozen=True)
class Settings:
    database_url: str = EMBEDDED_DATABASE_URL
    broker_url: str = EMBEDDED_BROKER_URL
    # Redis for the tenant directory and the broker-loss sentinel; defaults to the broker's URL
    # when the broker is Redis, else nothing (embedded: in-process directory).
    redis_url: str | None = None
    queue_prefix: str = "aj"
    # Lease: a step renews it by heartbeat every third of the TTL while it waits on I/O.
    lease_ttl_s: float = 30.0
    # Beat runs every sweeper at this interval.
    sweep_interval_s: float = 5.0
    # A runnable task with no lease whose last dispatch is older than this is re-dispatched.
    dispatch_grace_s: float = 60.0
    # Retry policy for steps that fail transiently (RETRY_WAIT), then dead letter.
    max_attempts: int = 5
    retry_base_s: float = 2.0
    retry_max_s: float = 300.0
    # EXEC_UNKNOWN: reconcile reads that fail are retried this many times, then ESCALATED.
    max_reconcile_attempts: int = 5
    sweep_batch: int = 500
    # A task that takes more steps than this is escalated: no workflow may loop forever.
    max_steps: int = 10_000
    # How often a worker re-reads the tenant directory to consume newly active tenant queues.
    queue_sync_interval_s: float = 1.0
    # Lease owner name; None means "host:pid" of the process that claims (set after a fork).
    worker_id: str | None = None

    def lease_owner(self) -> str:
        return self.worker_id or f"{os.uname().nodename}:{os.getpid()}"

    @property
    def embedded(self) -> bool:
        return self.broker_url.startswith("memory://")

    @property
    def directory_redis_url(self) -> str | None:
        if self.redis_url:
            return self.redis_url
        if self.broker_url.startswith(("redis://", "rediss://")):
            return self.broker_url
        return None

    def with_overrides(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]


def load_settings() -> Settings:
    """Build settings from `AGENT_JOBS_*` environment variables (unset means the default)."""
    env = os.environ
    defaults = Settings()
    if (env.get("AGENT_JOBS_BROKER_URL") or defaults.broker_url).startswith("memory://"):
        # One process holds broker, worker and beat: sweep often, presume loss quickly.
        defaults = replace(defaults, sweep_interval_s=1.0, dispatch_grace_s=2.0)
    settings = Settings(
        database_url=env.get("AGENT_JOBS_DATABASE_URL") or defaults.database_url,
        broker_url=env.get("AGENT_JOBS_BROKER_URL") or defaults.broker_url,
        redis_url=env.get("AGENT_JOBS_REDIS_URL") or None,
        queue_prefix=env.get("AGENT_JOBS_QUEUE_PREFIX") or defaults.queue_prefix,
        lease_ttl_s=_float("AGENT_JOBS_LEASE_TTL_S", defaults.lease_ttl_s),
        sweep_interval_s=_float("AGENT_JOBS_SWEEP_INTERVAL_S", defaults.sweep_interval_s),
        dispatch_grace_s=_float("AGENT_JOBS_DISPATCH_GRACE_S", defaults.dispatch_grace_s),
        max_attempts=_int("AGENT_JOBS_MAX_ATTEMPTS", defaults.max_attempts),
        retry_base_s=_float("AGENT_JOBS_RETRY_BASE_S", defaults.retry_base_s),
        retry_max_s=_float("AGENT_JOBS_RETRY_MAX_S", defaults.retry_max_s),
        max_reconcile_attempts=_int(
            "AGENT_JOBS_MAX_RECONCILE_ATTEMPTS", defaults.max_reconcile_attempts
        ),
        sweep_batch=_int("AGENT_JOBS_SWEEP_BATCH", defaults.sweep_batch),
        max_steps=_int("AGENT_JOBS_MAX_STEPS", defaults.max_steps),
        queue_sync_interval_s=_float(
            "AGENT_JOBS_QUEUE_SYNC_INTERVAL_S", defaults.queue_sync_interval_s
        ),
        worker_id=env.get("AGENT_JOBS_WORKER_ID") or None,
    )
    if settings.lease_ttl_s < 1:
        raise ConfigError("AGENT_JOBS_LEASE_TTL_S must be at least 1 second")
    if settings.max_attempts < 1:
        raise ConfigError("AGENT_JOBS_MAX_ATTEMPTS must be at least 1")
    return settings


@lru_cache(maxsize=1)
def settings() -> Settings:
    """The process-wide settings, read on first use."""
    return load_settings()
