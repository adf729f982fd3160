"""Settings: one schema, each setting declared once — its environment name, type, default,
bounds and help. Defaults give the embedded mode: nothing to install.

Every variable is `AGENT_JOBS_<FIELD NAME>`. `load_settings()` reads them, validates them all
and reports every bad value, one line each; nothing else in the package reads an `AGENT_JOBS_*`
variable. The README's "Configuration" table is generated from this schema
(`agent-jobs config --markdown`; a test fails when the two differ).
"""

from __future__ import annotations

import ipaddress
import os
import threading
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agent_jobs.core.errors import ConfigError
from agent_jobs.core.identity import lease_owner_for
from agent_jobs.redis_clients import is_sentinel
from agent_jobs.settings_parse import PREFIX as PREFIX  # noqa: PLC0414 - re-exported
from agent_jobs.settings_parse import env_name as env_name  # noqa: PLC0414 - re-exported
from agent_jobs.settings_parse import (
    one_line_each,
    parse_module_names,
    parse_per_tenant,
    parse_rate_limits,
)

EMBEDDED_DATABASE_URL = "sqlite:///agent_jobs.db"
EMBEDDED_BROKER_URL = "memory://localhost/"
# In the embedded mode one process holds broker, worker and beat: sweep often, presume a lost
# dispatch quickly. Applied where the variable is not set.
EMBEDDED_DEFAULTS = {"sweep_interval_s": 1.0, "dispatch_grace_s": 2.0}


def _setting(default: Any, help: str, *, shown: str | None = None, **bounds: Any) -> Any:
    """A field of the schema: its default, what it means, and (for the table) how the default
    reads when the value itself says little (`unset`, `host:pid`, ...)."""
    extra: dict[str, Any] | None = {"shown": shown} if shown is not None else None
    return Field(default, description=help, json_schema_extra=extra, **bounds)


class Settings(BaseModel):
    """The process's settings. Frozen: change one with `with_overrides` (tests, benches)."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)

    # -- where things are ---------------------------------------------------------------------
    database_url: str = _setting(
        EMBEDDED_DATABASE_URL,
        "Postgres in production (`postgresql://...`, psycopg2); SQLite embedded",
        min_length=1,
    )
    broker_url: str = _setting(
        EMBEDDED_BROKER_URL,
        "Redis in production (`redis://host:6379/0`); in-process embedded",
        min_length=1,
    )
    redis_url: str | None = _setting(
        None,
        "tenant directory, rate buckets, semaphores",
        shown="the broker's, if Redis",
    )
    sentinel_master: str = _setting(
        "mymaster",
        "the Redis Sentinel service name, when the broker URL is `sentinel://host:26379` "
        "(several sentinels: `sentinel://h1:26379;sentinel://h2:26379`)",
        min_length=1,
    )
    # -- how long a database call may wait (Postgres) ----------------------------------------
    # An API answer waits at most about POOL_TIMEOUT + CONNECT_TIMEOUT, or STATEMENT_TIMEOUT
    # once its statement runs; past that it is a 503, never a hang.
    db_connect_timeout_s: int = _setting(
        5, "opening a Postgres connection (libpq counts at least 2)", ge=1, le=300
    )
    db_pool_timeout_s: float = _setting(
        5.0, "waiting for a free connection of the process's pool", gt=0, le=300
    )
    db_statement_timeout_s: float = _setting(
        30.0,
        "a statement's run time, enforced by the server; `0`: none (migrations and benchmark "
        "seeding lift it for themselves)",
        ge=0,
    )
    db_lock_timeout_s: float = _setting(
        10.0,
        "a statement's wait for a row or table lock; `0`: none. Both timeouts are sent as the "
        "connection's `options`: behind a pooler that refuses it (PgBouncer without "
        "`ignore_startup_parameters = options`) set both to `0` and set them on the role",
        ge=0,
    )
    queue_prefix: str = _setting(
        "aj",
        "queue names `aj.t.<tenant>`, Redis keys `aj:...`, the control exchange",
        pattern=r"^[a-z0-9][a-z0-9_-]{0,31}$",
    )
    routing: str = _setting(
        "tenant",
        "`shared` puts every step on one queue — only for the fairness baseline",
        pattern=r"^(tenant|shared)$",
    )
    # -- leases, sweepers, retries -------------------------------------------------------------
    lease_ttl_s: float = _setting(
        30.0, "lease length; renewed every third of it while a step waits", ge=1
    )
    sweep_interval_s: float = _setting(
        5.0,
        "beat's interval for every sweeper (retention: at least 300 s)",
        shown="`5` (embedded `1`)",
        gt=0,
    )
    dispatch_grace_s: float = _setting(
        60.0,
        "a dispatch older than this, with no lease, is repeated",
        shown="`60` (embedded `2`)",
        ge=0,
    )
    outage_wait_s: float = _setting(
        60.0,
        "a step that cannot reach the database keeps its message and tries again, with backoff, "
        "for at most this long (not counted as a failed attempt), then fails as any step; `0`: "
        "at once, leaving the task to the sweepers",
        ge=0,
    )
    outage_retry_max_s: float = _setting(
        2.0,
        "the longest pause between those tries: a step moves again at most this long after "
        "the database answers",
        gt=0,
    )
    max_attempts: int = _setting(
        5, "consecutive failed attempts of a step before FAILED and a dead letter", ge=1
    )
    retry_base_s: float = _setting(2.0, "exponential backoff's base, with equal jitter", gt=0)
    retry_max_s: float = _setting(300.0, "exponential backoff's cap", gt=0)
    max_reconcile_attempts: int = _setting(
        5, "failed lookups, or sends of one key, before ESCALATED", ge=1
    )
    throttle_max_wait_s: float = _setting(
        600.0,
        "total wait for a provider that throttles a side effect (429/503 + Retry-After) "
        "before ESCALATED",
        ge=0,
    )
    max_steps: int = _setting(10_000, "steps per task before ESCALATED", ge=1)
    sweep_batch: int = _setting(500, "rows per sweeper transaction", ge=1)
    rejected_retention_days: float = _setting(
        30.0,
        "Celery-native submissions that created nothing are kept this long (why, for "
        "operators), then pruned; `0` keeps them",
        ge=0,
    )
    task_retention_days: float = _setting(
        30.0,
        "finished tasks (and their events, effects, approvals) are kept this long, then "
        "archived and pruned by the archive sweeper; `0` keeps them forever. Pruning frees a "
        "task's idempotency key: keep it longer than any client retries",
        ge=0,
    )
    archive_dir: str = _setting(
        "agent_jobs_archive",
        "where pruned tasks are archived (gzip'd JSON Lines, one task per line); `none`: "
        "prune without an archive",
        min_length=1,
    )
    queue_sync_interval_s: float = _setting(
        1.0, "how often a worker re-reads the tenant directory", gt=0
    )
    worker_id: str | None = _setting(None, "the lease owner's name", shown="`host:pid`")
    pg_prepare: bool = _setting(
        True,
        "prepare the hot path's statements once per Postgres connection; `0` behind a pooler "
        "that does not keep sessions (PgBouncer in transaction mode)",
    )
    step_row_max_bytes: int = _setting(
        8192,
        "a quick step's commit hands the task's new row to the next step's message (signed with "
        "a key kept in the database) when the next step is quick too and the row's JSON is at "
        "most this long, so that step needs no read; `0`: never",
        ge=0,
    )
    # -- workflows of your own ----------------------------------------------------------------
    workflows: tuple[str, ...] = _setting(
        (),
        "modules of your own workflows, imported by every process (API, worker, beat, CLI) at "
        "start: `mypkg.workflows,other.mod`; each defines a `workflows` list or calls "
        "`agent_jobs.workflows.register(...)` (entry points of group `agent_jobs.workflows` "
        "are loaded too)",
        shown="—",
    )
    # -- webhooks (notify/) ---------------------------------------------------------------------
    webhook_allow_networks: tuple[str, ...] = _setting(
        (),
        "private, loopback or link-local networks a webhook URL may reach (refused otherwise, "
        "at registration and after DNS at each connect): `10.20.0.0/16,127.0.0.1/32`",
        shown="—",
    )
    webhook_allow_http: bool = _setting(
        False, "`1`: plain `http://` webhook URLs outside the embedded mode", shown="off"
    )
    webhook_timeout_s: float = _setting(5.0, "webhook connect and read timeouts", gt=0, le=60)
    webhook_max_endpoints: int = _setting(10, "webhook endpoints per tenant", ge=1, le=1000)
    webhook_disable_after_s: float = _setting(
        86400.0, "a webhook endpoint failing this long is disabled until its owner enables it", gt=0
    )
    # -- Celery and the CLI --------------------------------------------------------------------
    step_acks: str = _setting(
        "memory",
        "`memory`: a step message's ack is kept in the worker's memory (its loss is covered by "
        "the task row's dispatch record and the sweepers; two Redis round trips fewer per step); "
        "`broker`: kombu's unacked bookkeeping in Redis, as for any Celery task",
        pattern=r"^(memory|broker)$",
    )
    task_events: bool = _setting(
        False,
        "`1`: Celery task events (Flower's task pages; three extra publishes per step)",
        shown="off",
    )
    celery_config: str | None = _setting(
        None,
        "a module whose lower-case attributes override Celery settings (see `celeryconfig.py`)",
        shown="—",
    )
    debug: bool = _setting(False, "`1`: the CLI shows tracebacks (as `--debug`)", shown="—")
    # -- the business systems, the model, tools ---------------------------------------------
    systems_url: str = _setting(
        "http://127.0.0.1:8090",
        "the business systems (`agent-jobs sim serve` listens there)",
        min_length=1,
    )
    orders_url: str | None = _setting(None, "the orders system, if not at `SYSTEMS_URL`")
    payments_url: str | None = _setting(None, "the payments system, if not at `SYSTEMS_URL`")
    policies_url: str | None = _setting(None, "the policies system, if not at `SYSTEMS_URL`")
    model_routes: str | None = _setting(
        None,
        "a JSON routes file (OpenAI-compatible providers)",
        shown="built-in scripted route",
    )
    release_eval_runs: int = _setting(
        5,
        "runs per case a release's eval needs (full golden and safety suites) to unlock promote",
        ge=1,
        le=100,
    )
    guardrails_interval_s: float = _setting(
        10.0,
        "beat's interval for the release guardrails: a canary worse than the incumbent is "
        "reverted within about this long of the breach",
        gt=0,
        le=3600,
    )
    eval_child_timeout_s: float = _setting(
        3600.0,
        "how long a release eval (or shadow run) process may run: past it the process is "
        "killed and every case it had not finished is recorded as errored (the gate fails)",
        gt=0,
    )
    canary_stuck_after_s: float = _setting(
        900.0,
        "a release's task not finished that has not moved for this long (parked, or its "
        "lease lapsing) counts as a failure in the guardrails' escalation rate; a task waiting "
        "for a person's approval is never stuck",
        gt=0,
    )
    tool_secret: str | None = Field(
        None,
        description="HMAC secret for per-call tool credentials; a worker refuses to start "
        "without it outside the embedded mode",
        json_schema_extra={"shown": "unset (embedded: a development default, with a warning)"},
        repr=False,  # never in logs
    )
    confirm_lag_s: float = _setting(
        10.0,
        "how long the refund agent's confirmation read may lag the write before it escalates",
        ge=0,
        le=3600,
    )
    example_backend: str = _setting(
        "agent_jobs_example_ledger.db", "the example workflow's ledger file", min_length=1
    )
    held_poll_max_s: float = _setting(
        60.0,
        "a task an operator's lever holds, or a step its workflow deferred, tries again after "
        "2 s, then twice as long each time, up to this long: its writes while held, and how "
        "long it may take to notice the hold lifted",
        ge=2,
        le=3600,
    )
    # -- the dispatch gate ---------------------------------------------------------------------
    tenant_idle_s: float = _setting(
        60.0, "a tenant idle this long, with an empty queue, is no longer consumed", ge=0
    )
    tenant_cap: int = _setting(0, "steps in flight per tenant; `0`: no cap", ge=0)
    tenant_caps: tuple[tuple[str, int], ...] = _setting(
        (), "per-tenant caps: `acme=5,beta=2`", shown="—"
    )
    fair_share: bool = _setting(
        False, "cost-weighted fair share between tenants (step time / weight)", shown="off"
    )
    tenant_weights: tuple[tuple[str, float], ...] = _setting(
        (), "fair-share weights: `gold=4`", shown="—"
    )
    fair_quantum_s: float = _setting(0.25, "how far ahead of the lowest a tenant may run (s)", gt=0)
    slot_ttl_s: float = _setting(
        300.0, "a gate or model slot whose holder died comes back after this", gt=0
    )
    model_cap: int = _setting(0, "model calls in flight across all workers; `0`: no cap", ge=0)
    # -- service interfaces (API, auth, admission, metrics) ----------------------------------
    # JWT: HS256 with a shared secret (development), RS256 with a public key (production). Only
    # the algorithms whose key is configured are accepted; with neither, every token is refused.
    jwt_secret: str | None = Field(
        None,
        description="HS256 secret (at least 32 bytes); outside the embedded mode the API "
        "refuses to start without it or an RS256 public key",
        json_schema_extra={"shown": "unset"},
        repr=False,  # never in logs
    )
    jwt_public_key: str | None = _setting(None, "RS256 public key (PEM)", shown="unset")
    jwt_public_key_file: str | None = _setting(
        None, "a file holding the RS256 public key", shown="unset"
    )
    jwt_audience: str = _setting("agent-jobs", "the required `aud` claim", min_length=1)
    jwt_issuer: str = _setting("agent-jobs", "the required `iss` claim", min_length=1)
    jwt_tenant_claim: str = _setting("tenant", "the claim naming the tenant", min_length=1)
    jwt_roles_claim: str = _setting("roles", "the claim listing the roles", min_length=1)
    jwt_leeway_s: float = _setting(30.0, "clock skew allowed on `exp`/`nbf`", ge=0)
    api_max_body_bytes: int = _setting(
        262_144, "request bodies above this are refused with 413 before parsing", ge=1024
    )
    api_request_timeout_s: float = _setting(
        60.0,
        "an API answer that has not started after this long is a 503 (retry later), whatever "
        "it waits on; above the `DB_*_TIMEOUT_S`, which answer sooner; `0`: no deadline",
        ge=0,
    )
    api_host: str = _setting("127.0.0.1", "the API's address", min_length=1)
    api_port: int = _setting(8000, "the API's port", ge=1, le=65535)
    api_metrics_port: int | None = _setting(
        None,
        "the port, on `API_HOST`, the API serves `/metrics` on",
        shown="unset (no API metrics)",
        ge=1,
        le=65535,
    )
    rate_per_s: float = _setting(10.0, "admission token bucket's rate; `0` turns it off", ge=0)
    rate_burst: int = _setting(20, "admission token bucket's burst", ge=0)
    rate_limits: tuple[tuple[str, float, int], ...] = _setting(
        (), "per-tenant rate and burst: `acme=5:10`", shown="—"
    )
    submit_max_retries: int = _setting(5, "Celery-native submits retried on an empty bucket", ge=0)
    worker_metrics_port: int | None = _setting(
        None, "the port `agent-jobs worker` serves metrics on", shown="unset", ge=1, le=65535
    )
    flower_refresh_s: float = _setting(
        5.0, "how often `agent-jobs flower` re-reads the workers' queues", gt=0
    )

    # -- parsing of the compact per-tenant forms ----------------------------------------------

    @field_validator("rate_limits", mode="before")
    @classmethod
    def _rate_limits(cls, raw: Any) -> Any:
        return parse_rate_limits(raw)

    @field_validator("tenant_caps", "tenant_weights", mode="before")
    @classmethod
    def _per_tenant(cls, raw: Any) -> Any:
        return parse_per_tenant(raw)

    @field_validator("workflows", mode="before")
    @classmethod
    def _module_names(cls, raw: Any) -> Any:
        return parse_module_names(raw)

    @field_validator("webhook_allow_networks", mode="before")
    @classmethod
    def _networks(cls, raw: Any) -> Any:
        if isinstance(raw, str):
            raw = [part.strip() for part in raw.split(",") if part.strip()]
        for net in raw:
            ipaddress.ip_network(net, strict=False)  # ValueError names the bad one
        return tuple(raw)

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.jwt_secret is not None and len(self.jwt_secret.encode()) < 32:
            # RFC 7518 3.2: an HS256 key must be at least as long as the hash (256 bits).
            raise ValueError("JWT_SECRET must be at least 32 bytes")
        if self.retry_max_s < self.retry_base_s:
            raise ValueError("RETRY_MAX_S must not be below RETRY_BASE_S")
        return self

    # -- derived values ------------------------------------------------------------------------

    def lease_owner(self) -> str:
        """This thread's lease owner: the worker's name made unique per process and thread."""
        name = self.worker_id or f"{os.uname().nodename}:{os.getpid()}"
        return lease_owner_for(name, os.getpid(), threading.get_native_id())

    @property
    def embedded(self) -> bool:
        return self.broker_url.startswith("memory://")

    @property
    def directory_redis_url(self) -> str | None:
        """REDIS_URL, else the broker's Redis (a server, or the Sentinels that know it)."""
        if self.redis_url:
            return self.redis_url
        if self.broker_url.startswith(("redis://", "rediss://")) or is_sentinel(self.broker_url):
            return self.broker_url
        return None

    def system_url(self, system: str) -> str:
        """The base URL of one business system (`orders`, `payments`, `policies`)."""
        own = getattr(self, f"{system}_url", None)
        return str(own or self.systems_url).rstrip("/")

    def public_key(self) -> str | None:
        """The RS256 public key: inline (`\\n` for new lines) or read from its file."""
        if self.jwt_public_key:
            return self.jwt_public_key.replace("\\n", "\n")
        if not self.jwt_public_key_file:
            return None
        try:
            with open(self.jwt_public_key_file, encoding="utf-8") as f:
                return f.read()
        except OSError as exc:
            raise ConfigError(
                f"{PREFIX}JWT_PUBLIC_KEY_FILE={self.jwt_public_key_file!r}: {exc.strerror}"
            ) from None

    def with_overrides(self, **changes: object) -> Settings:
        """A copy with some values changed, validated like the environment's."""
        return _validated({**self.model_dump(), **changes})


def _validated(data: Mapping[str, Any]) -> Settings:
    try:
        return Settings.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(one_line_each(exc, data)) from None


def from_environ(environ: Mapping[str, str]) -> Settings:
    """Settings from an environment mapping: each field from its variable; unset or empty means
    the default (embedded-mode defaults where the broker is in-process)."""
    data: dict[str, Any] = {}
    for name in Settings.model_fields:
        raw = environ.get(env_name(name))
        if raw is not None and raw.strip() != "":
            data[name] = raw.strip() if name not in ("jwt_secret", "tool_secret") else raw
    broker = data.get("broker_url", EMBEDDED_BROKER_URL)
    if str(broker).startswith("memory://"):
        for name, value in EMBEDDED_DEFAULTS.items():
            data.setdefault(name, value)
    return _validated(data)


def load_settings() -> Settings:
    """Build settings from the process's `AGENT_JOBS_*` environment variables."""
    return from_environ(os.environ)


@lru_cache(maxsize=1)
def settings() -> Settings:
    """The process-wide settings, read on first use."""
    return load_settings()


def markdown_table() -> str:
    """The README's configuration table, generated from the schema."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        shown = extra.get("shown")
        if shown is None:
            value = field.default
            if isinstance(value, bool):
                value = "1" if value else "0"
            elif isinstance(value, float) and value.is_integer():
                value = int(value)
            shown = "unset" if value is None else f"`{value}`"
        bounds = _bounds(field.metadata)
        help_ = (field.description or "") + (f" ({bounds})" if bounds else "")
        rows.append(f"| `{env_name(name)}` | {shown} | {help_} |")
    return "\n".join(rows)


def _bounds(metadata: list[Any]) -> str:
    out = []
    for m in metadata:
        for attr, word in (("ge", "≥"), ("gt", ">"), ("le", "≤")):
            value = getattr(m, attr, None)
            if value is not None:
                out.append(f"{word} {value}")
    return ", ".join(out)
