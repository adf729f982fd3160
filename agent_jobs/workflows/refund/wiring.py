"""What the refund workflow talks to, built from configuration: gateway, tools, credentials.

Built on first use, never at import or registration: a worker that registers the workflow must
start even when the business systems are down, and `default_registry()` must not read files.

Configuration (environment):

- `AGENT_JOBS_SYSTEMS_URL`: base URL of the business systems (default `http://127.0.0.1:8090`,
  where `agent-jobs sim serve` listens). `AGENT_JOBS_ORDERS_URL`, `AGENT_JOBS_PAYMENTS_URL` and
  `AGENT_JOBS_POLICIES_URL` override it per system.
- `AGENT_JOBS_MODEL_ROUTES`: a JSON file of model routes (`gateway.load_routes` format), with an
  optional `"providers"` object naming OpenAI-compatible providers:
  `{"providers": {"local": {"type": "openai_compat", "base_url": "http://127.0.0.1:8000/v1",
  "api_key_env": null, "response_format": "json_object"}}, "routes": [...]}`.
  Unset: the built-in route `support-tier2@2026-03`, served by the scripted model.
- `AGENT_JOBS_TOOL_SECRET`: the HMAC secret of tool credentials (see `tools.credentials`).
- `AGENT_JOBS_CONFIRM_LAG_S`: how long (seconds, default 10) the confirmation read after a refund
  may lag the write, i.e. not show the refund yet, before the task escalates. 0 escalates at once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_jobs.config import Settings, from_environ, load_settings
from agent_jobs.core.errors import ConfigError
from agent_jobs.gateway import (
    DEFAULT_ROUTE,
    ModelGateway,
    OpenAICompatProvider,
    Provider,
    Route,
    ScriptedProvider,
    load_routes,
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
from agent_jobs.workflows.refund.rules import RefundRules

SYSTEMS_URL = "AGENT_JOBS_SYSTEMS_URL"
MODEL_ROUTES = "AGENT_JOBS_MODEL_ROUTES"
CONFIRM_LAG = "AGENT_JOBS_CONFIRM_LAG_S"
DEFAULT_CONFIRM_LAG_S = 10.0
ROUTE_KEY = DEFAULT_ROUTE.key  # support-tier2@2026-03: what new tasks are pinned to


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


def _provider(name: str, spec: Mapping[str, Any]) -> Provider:
    kind = spec.get("type", "openai_compat")
    if kind == "factory":
        # `"factory": "module:function"` returning a Provider: how evals add adversarial models.
        import importlib  # noqa: PLC0415

        module, _, attr = str(spec.get("factory") or "").partition(":")
        try:
            made: Provider = getattr(importlib.import_module(module), attr)()
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigError(f"provider {name}: factory {spec.get('factory')!r}: {exc}") from exc
        return made
    if kind != "openai_compat":
        raise ConfigError(f"provider {name}: unknown type {kind!r} (known: openai_compat, factory)")
    base_url = spec.get("base_url")
    if not isinstance(base_url, str):
        raise ConfigError(f"provider {name}: base_url is required")
    key_env = spec.get("api_key_env", "OPENAI_API_KEY")
    fmt = spec.get("response_format", "json_schema")
    if fmt not in ("json_schema", "json_object", "none"):
        raise ConfigError(f"provider {name}: response_format {fmt!r} is not supported")
    return OpenAICompatProvider(base_url, key_env, name=name, response_format=fmt)


def routes_and_providers(
    path: str | None, rules: RefundRules | None = None
) -> tuple[dict[str, Route], dict[str, Provider]]:
    """Routes from `path` (or the built-in one) and the providers they name.

    The scripted provider is always present under `scripted`, so a routes file may keep a
    scripted route next to real ones (for evals).
    """
    providers: dict[str, Provider] = {"scripted": ScriptedProvider(rules or RefundRules())}
    if not path:
        return {ROUTE_KEY: DEFAULT_ROUTE}, providers
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{MODEL_ROUTES}={path}: cannot read routes: {exc}") from exc
    if isinstance(data, Mapping):
        for name, spec in dict(data.get("providers") or {}).items():
            if name == "scripted":
                raise ConfigError("provider name 'scripted' is reserved for the scripted model")
            providers[str(name)] = _provider(str(name), spec)
    return load_routes(data), providers


def services_from_env(
    environ: Mapping[str, str] | None = None, *, rules: RefundRules | None = None
) -> RefundServices:
    """Build the services from the settings (the process's, or those of `environ`)."""
    cfg = load_settings() if environ is None else from_environ(environ)
    routes, providers = routes_and_providers(cfg.model_routes, rules)
    gateway = ModelGateway(routes, providers, model_slots=model_slots_for(cfg))
    gateway.route(ROUTE_KEY)  # a routes file without the pinned route fails here, not per task
    # Imported here: prometheus_client must load after a worker chose its multiprocess mode.
    from agent_jobs.obs.metrics import PrometheusObserver  # noqa: PLC0415

    return RefundServices(
        gateway=gateway,
        tools=refund_registry(systems_from_settings(cfg)),
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
