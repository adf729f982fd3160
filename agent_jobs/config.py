"""Settings, read once from the environment. Defaults give the embedded mode: nothing to install.

Every variable is prefixed `AGENT_JOBS_`; the README's "Configuration" table lists them all.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

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
    # "tenant": one queue per tenant (the design). "shared": every step on one queue — only so
    # that the fairness benchmark can show what per-tenant queues buy.
    routing: str = "tenant"
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
    # A provider that throttles a side effect (429/503 + Retry-After, nothing applied) is waited
    # for, with the same key, at most this long in total; then the task is escalated.
    throttle_max_wait_s: float = 600.0
    sweep_batch: int = 500
    # Submissions that created nothing are kept this long for operators to see why, then
    # pruned by the retention sweeper; 0 keeps them forever.
    rejected_retention_days: float = 30.0
    # A task that takes more steps than this is escalated: no workflow may loop forever.
    max_steps: int = 10_000
    # How often a worker re-reads the tenant directory to consume newly active tenant queues.
    queue_sync_interval_s: float = 1.0
    # Lease owner name; None means "host:pid" of the process that claims (set after a fork).
    worker_id: str | None = None

    # -- service interfaces (API, auth, admission, metrics) ------------------------------------
    # JWT: HS256 with a shared secret (development), RS256 with a public key (production). Only
    # the algorithms whose key is configured are accepted; with neither, every token is refused.
    jwt_secret: str | None = field(default=None, repr=False)  # never in logs
    jwt_public_key: str | None = None
    jwt_audience: str = "agent-jobs"
    jwt_issuer: str = "agent-jobs"
    jwt_tenant_claim: str = "tenant"
    jwt_roles_claim: str = "roles"
    jwt_leeway_s: float = 30.0
    # Request bodies above this many bytes are refused with 413 before they are parsed.
    api_max_body_bytes: int = 262_144
    api_host: str = "127.0.0.1"
    api_port: int = 8000
    # Admission: a token bucket per tenant (rate tokens/s, burst tokens); rate 0 turns it off.
    rate_per_s: float = 10.0
    rate_burst: int = 20
    # Per-tenant overrides: ((tenant, rate_per_s, burst), ...).
    rate_limits: tuple[tuple[str, float, int], ...] = ()
    # Celery-native submissions retry this many times on an empty bucket, then are rejected.
    submit_max_retries: int = 5
    # `agent-jobs worker` serves its processes' metrics on this port (None: no exporter).
    worker_metrics_port: int | None = None
    # The API serves /metrics on this port of `api_host`, never on its public port (None: off).
    api_metrics_port: int | None = None
    # `agent-jobs flower` re-inspects the workers this often, so new tenant queues show up.
    flower_refresh_s: float = 5.0
    # A worker stops consuming a tenant's queue after it has been idle this long (and is empty).
    tenant_idle_s: float = 60.0
    # The dispatch gate (queue/gate.py). Steps in flight per tenant: 0 means no cap.
    tenant_cap: int = 0
    tenant_caps: tuple[tuple[str, int], ...] = ()
    # Cost-weighted fair share between tenants (step time / weight), and its quantum in seconds.
    fair_share: bool = False
    tenant_weights: tuple[tuple[str, float], ...] = ()
    fair_quantum_s: float = 0.25
    # A gate slot (or model slot) whose holder died comes back after this long.
    slot_ttl_s: float = 300.0
    # Model calls in flight across all workers (the seed's "concurrency cap of 40"); 0: no cap.
    model_cap: int = 0

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


def _rate_limits(raw: str | None) -> tuple[tuple[str, float, int], ...]:
    """`acme=5:10,beta=0.5:2` -> ((acme, 5.0, 10), (beta, 0.5, 2)): rate per second and burst."""
    if not raw:
        return ()
    out: list[tuple[str, float, int]] = []
    for raw_item in raw.split(","):
        item = raw_item.strip()
        if not item:
            continue
        try:
            tenant, spec = item.split("=", 1)
            rate, burst = spec.split(":", 1)
            entry = (tenant.strip(), float(rate), int(burst))
        except ValueError:
            raise ConfigError(
                f"AGENT_JOBS_RATE_LIMITS: {item!r} is not tenant=rate:burst (e.g. acme=5:10)"
            ) from None
        if entry[1] < 0 or entry[2] < 0:
            raise ConfigError(f"AGENT_JOBS_RATE_LIMITS: {item!r} must not be negative")
        out.append(entry)
    return tuple(out)


def _per_tenant(name: str, cast: type[Any]) -> tuple[tuple[str, Any], ...]:
    """`acme=5,beta=2` -> (("acme", 5), ("beta", 2)); a malformed entry is a configuration error."""
    out = []
    for item in (os.environ.get(name) or "").split(","):
        if not item.strip():
            continue
        tenant, sep, value = item.partition("=")
        try:
            if not sep or not tenant.strip():
                raise ValueError(item)
            parsed = cast(value.strip())
            if parsed < 0:
                raise ValueError(item)
        except ValueError:
            raise ConfigError(
                f"{name}: {item.strip()!r} is not tenant=value (e.g. acme=5)"
            ) from None
        out.append((tenant.strip(), parsed))
    return tuple(out)


def _public_key(env: os._Environ[str]) -> str | None:
    inline = env.get("AGENT_JOBS_JWT_PUBLIC_KEY")
    if inline:
        return inline.replace("\\n", "\n")
    path = env.get("AGENT_JOBS_JWT_PUBLIC_KEY_FILE")
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"AGENT_JOBS_JWT_PUBLIC_KEY_FILE={path!r}: {exc.strerror}") from None


def _optional_int(name: str) -> int | None:
    raw = os.environ.get(name)
    return None if raw is None or raw == "" else _int(name, 0)


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
        routing=env.get("AGENT_JOBS_ROUTING") or defaults.routing,
        lease_ttl_s=_float("AGENT_JOBS_LEASE_TTL_S", defaults.lease_ttl_s),
        sweep_interval_s=_float("AGENT_JOBS_SWEEP_INTERVAL_S", defaults.sweep_interval_s),
        dispatch_grace_s=_float("AGENT_JOBS_DISPATCH_GRACE_S", defaults.dispatch_grace_s),
        max_attempts=_int("AGENT_JOBS_MAX_ATTEMPTS", defaults.max_attempts),
        retry_base_s=_float("AGENT_JOBS_RETRY_BASE_S", defaults.retry_base_s),
        retry_max_s=_float("AGENT_JOBS_RETRY_MAX_S", defaults.retry_max_s),
        max_reconcile_attempts=_int(
            "AGENT_JOBS_MAX_RECONCILE_ATTEMPTS", defaults.max_reconcile_attempts
        ),
        throttle_max_wait_s=_float(
            "AGENT_JOBS_THROTTLE_MAX_WAIT_S", defaults.throttle_max_wait_s
        ),
        sweep_batch=_int("AGENT_JOBS_SWEEP_BATCH", defaults.sweep_batch),
        rejected_retention_days=_float(
            "AGENT_JOBS_REJECTED_RETENTION_DAYS", defaults.rejected_retention_days
        ),
        max_steps=_int("AGENT_JOBS_MAX_STEPS", defaults.max_steps),
        queue_sync_interval_s=_float(
            "AGENT_JOBS_QUEUE_SYNC_INTERVAL_S", defaults.queue_sync_interval_s
        ),
        worker_id=env.get("AGENT_JOBS_WORKER_ID") or None,
        jwt_secret=env.get("AGENT_JOBS_JWT_SECRET") or None,
        jwt_public_key=_public_key(env),
        jwt_audience=env.get("AGENT_JOBS_JWT_AUDIENCE") or defaults.jwt_audience,
        jwt_issuer=env.get("AGENT_JOBS_JWT_ISSUER") or defaults.jwt_issuer,
        jwt_tenant_claim=env.get("AGENT_JOBS_JWT_TENANT_CLAIM") or defaults.jwt_tenant_claim,
        jwt_roles_claim=env.get("AGENT_JOBS_JWT_ROLES_CLAIM") or defaults.jwt_roles_claim,
        jwt_leeway_s=_float("AGENT_JOBS_JWT_LEEWAY_S", defaults.jwt_leeway_s),
        api_max_body_bytes=_int("AGENT_JOBS_API_MAX_BODY_BYTES", defaults.api_max_body_bytes),
        api_host=env.get("AGENT_JOBS_API_HOST") or defaults.api_host,
        api_port=_int("AGENT_JOBS_API_PORT", defaults.api_port),
        rate_per_s=_float("AGENT_JOBS_RATE_PER_S", defaults.rate_per_s),
        rate_burst=_int("AGENT_JOBS_RATE_BURST", defaults.rate_burst),
        rate_limits=_rate_limits(env.get("AGENT_JOBS_RATE_LIMITS")),
        submit_max_retries=_int("AGENT_JOBS_SUBMIT_MAX_RETRIES", defaults.submit_max_retries),
        worker_metrics_port=_optional_int("AGENT_JOBS_WORKER_METRICS_PORT"),
        api_metrics_port=_optional_int("AGENT_JOBS_API_METRICS_PORT"),
        flower_refresh_s=_float("AGENT_JOBS_FLOWER_REFRESH_S", defaults.flower_refresh_s),
        tenant_idle_s=_float("AGENT_JOBS_TENANT_IDLE_S", defaults.tenant_idle_s),
        tenant_cap=_int("AGENT_JOBS_TENANT_CAP", defaults.tenant_cap),
        tenant_caps=_per_tenant("AGENT_JOBS_TENANT_CAPS", int),
        fair_share=env.get("AGENT_JOBS_FAIR_SHARE", "") in ("1", "true", "on"),
        tenant_weights=_per_tenant("AGENT_JOBS_TENANT_WEIGHTS", float),
        fair_quantum_s=_float("AGENT_JOBS_FAIR_QUANTUM_S", defaults.fair_quantum_s),
        slot_ttl_s=_float("AGENT_JOBS_SLOT_TTL_S", defaults.slot_ttl_s),
        model_cap=_int("AGENT_JOBS_MODEL_CAP", defaults.model_cap),
    )
    if settings.lease_ttl_s < 1:
        raise ConfigError("AGENT_JOBS_LEASE_TTL_S must be at least 1 second")
    if settings.routing not in ("tenant", "shared"):
        raise ConfigError("AGENT_JOBS_ROUTING must be 'tenant' or 'shared'")
    if settings.max_attempts < 1:
        raise ConfigError("AGENT_JOBS_MAX_ATTEMPTS must be at least 1")
    if settings.jwt_secret is not None and len(settings.jwt_secret.encode()) < 32:
        # RFC 7518 3.2: an HS256 key must be at least as long as the hash (256 bits).
        raise ConfigError("AGENT_JOBS_JWT_SECRET must be at least 32 bytes")
    if settings.api_max_body_bytes < 1024:
        raise ConfigError("AGENT_JOBS_API_MAX_BODY_BYTES must be at least 1024")
    return settings


@lru_cache(maxsize=1)
def settings() -> Settings:
    """The process-wide settings, read on first use."""
    return load_settings()
