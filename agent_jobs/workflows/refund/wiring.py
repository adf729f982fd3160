"""What the refund workflow talks to, built from configuration: gateway, tools, credentials.

Built on first use, never at import or registration: a worker that registers the workflow must
start even when the business systems are down, and `default_registry()` must not read files.

Configuration (environment):

- `AGENT_JOBS_SYSTEMS_URL`: base URL of the business systems (default `http://127.0.0.1:8090`,
  where `agent-jobs sim serve` listens). `AGENT_JOBS_ORDERS_URL`, `AGENT_JOBS_PAYMENTS_URL` and
  `AGENT_JOBS_POLICIES_URL` override it per system.
- `AGENT_JOBS_MODEL_ROUTES`: a JSON file of model routes and providers (`agents.routes`).
  Unset: the built-in route `support-tier2@2026-03`, served by the refund's scripted model.
- `AGENT_JOBS_TOOL_SECRET`: the HMAC secret of tool credentials (see `tools.credentials`).
- `AGENT_JOBS_CONFIRM_LAG_S`: how long (seconds, default 10) the confirmation read after a refund
  may lag the write, i.e. not show the refund yet, before the task escalates. 0 escalates at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from agent_jobs.agents import routes as agent_routes
from agent_jobs.agents.routes import MODEL_ROUTES as MODEL_ROUTES  # noqa: PLC0414 - re-exported
from agent_jobs.config import Settings, from_environ, load_settings
from agent_jobs.gateway import (
    DEFAULT_ROUTE,
    ModelGateway,
    Provider,
    Route,
    ScriptedProvider,
)
from agent_jobs.gateway.slots import model_slots_for
from agent_jobs.orchestrator.ports import NullObserver, Observer
from agent_jobs.tools import (
    CredentialProvider,
    HmacCredentialProvider,
    SystemsConfig,
    ToolRegistry,
)
from agent_jobs.tools.refund_tools import (
    ORDERS_URL,
    PAYMENTS_URL,
    POLICIES_URL,
    refund_registry,
)
from agent_jobs.workflows.refund.agent import REFUND
from agent_jobs.workflows.refund.rules import RefundRules

SYSTEMS_URL = "AGENT_JOBS_SYSTEMS_URL"
CONFIRM_LAG = "AGENT_JOBS_CONFIRM_LAG_S"
DEFAULT_CONFIRM_LAG_S = 10.0
ROUTE_KEY = REFUND.model_route  # support-tier2@2026-03: what new tasks are pinned to


@dataclass(frozen=True)
class RefundServices:
    """The ports one refund task uses. Thread-safe; shared by every task of a process."""

    gateway: ModelGateway
    tools: ToolRegistry
    credentials: CredentialProvider
    # Metrics: model calls, tokens and cost by route; tool calls by tool and outcome.
    observer: Observer = field(default_factory=NullObserver)
    # A ledger read may lag its write: how long the confirmation read may miss the refund.
    confirm_lag_s: float = DEFAULT_CONFIRM_LAG_S
    # Wall-clock seconds, to measure that window across steps and workers (tests inject one).
    clock: Callable[[], float] = field(default=time.time)
    # How the executor waits between attempts of a read (a simulator moves its virtual clock).
    sleep: Callable[[float], None] = field(default=time.sleep)
    # Reads proposed together run on threads; False runs them one after the other on the
    # step's thread, in order (a deterministic simulator: one thread, one seed).
    parallel_reads: bool = True


def confirm_lag_s(environ: Mapping[str, str]) -> float:
    """`AGENT_JOBS_CONFIRM_LAG_S` of `environ`, validated by the settings schema (0 to 3600)."""
    return from_environ(environ).confirm_lag_s


def systems_config(base_url: str, environ: Mapping[str, str] | None = None) -> SystemsConfig:
    """Every business system at `base_url`, unless `environ` names its own URL."""
    return SystemsConfig(
        defaults={ORDERS_URL: base_url, PAYMENTS_URL: base_url, POLICIES_URL: base_url},
        environ=environ,
    )


def systems_from_settings(cfg: Settings) -> SystemsConfig:
    """Each business system where the settings put it (`SYSTEMS_URL`, or its own URL)."""
    return SystemsConfig(
        environ={
            ORDERS_URL: cfg.system_url("orders"),
            PAYMENTS_URL: cfg.system_url("payments"),
            POLICIES_URL: cfg.system_url("policies"),
        }
    )


def routes_and_providers(
    path: str | None, rules: RefundRules | None = None
) -> tuple[dict[str, Route], dict[str, Provider]]:
    """Routes from `path` (or the built-in one) and the providers they name, with the refund
    agent's scripted model under `scripted` (`agents.routes.routes_and_providers`)."""
    return agent_routes.routes_and_providers(path, ScriptedProvider(rules or RefundRules()))


def services_from_env(
    environ: Mapping[str, str] | None = None, *, rules: RefundRules | None = None
) -> RefundServices:
    """Build the services from the settings (the process's, or those of `environ`)."""
    cfg = load_settings() if environ is None else from_environ(environ)
    routes, providers = routes_and_providers(cfg.model_routes, rules)
    gateway = ModelGateway(routes, providers, model_slots=model_slots_for(cfg))
    gateway.route(ROUTE_KEY)  # a routes file without the pinned route fails here, not per task
    tools = refund_registry(systems_from_settings(cfg))
    REFUND.check(tools)  # the tools this process registers are the ones tasks are pinned to
    # Imported here: prometheus_client must load after a worker chose its multiprocess mode.
    from agent_jobs.obs.metrics import PrometheusObserver  # noqa: PLC0415

    return RefundServices(
        gateway=gateway,
        tools=tools,
        credentials=HmacCredentialProvider.from_env(environ),
        observer=PrometheusObserver(),
        confirm_lag_s=cfg.confirm_lag_s,
    )


def scripted_services(
    base_url: str,
    rules: RefundRules | None = None,
    *,
    provider: ScriptedProvider | None = None,
    confirm_lag_s: float = DEFAULT_CONFIRM_LAG_S,
    clock: Callable[[], float] = time.time,
) -> RefundServices:
    """Services for tests and evals: every system at `base_url`, the scripted model, no env."""
    scripted = provider or ScriptedProvider(rules or RefundRules())
    return RefundServices(
        gateway=ModelGateway([DEFAULT_ROUTE], {"scripted": scripted}),
        tools=refund_registry(systems_config(base_url, environ={})),
        credentials=HmacCredentialProvider("agent-jobs-test-secret"),
        confirm_lag_s=confirm_lag_s,
        clock=clock,
    )
