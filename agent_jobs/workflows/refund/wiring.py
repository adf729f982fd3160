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
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_jobs.config import settings
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
    DEV_BASE_URL,
    ORDERS_URL,
    PAYMENTS_URL,
    POLICIES_URL,
    refund_registry,
)
from agent_jobs.workflows.refund.rules import RefundRules

SYSTEMS_URL = "AGENT_JOBS_SYSTEMS_URL"
MODEL_ROUTES = "AGENT_JOBS_MODEL_ROUTES"
ROUTE_KEY = DEFAULT_ROUTE.key  # support-tier2@2026-03: what new tasks are pinned to


@dataclass(frozen=True)
class RefundServices:
    """The ports one refund task uses. Thread-safe; shared by every task of a process."""

    gateway: ModelGateway
    tools: ToolRegistry
    credentials: CredentialProvider
    # Metrics: model calls, tokens and cost by route; tool calls by tool and outcome.
    observer: Observer = field(default_factory=NullObserver)


def systems_config(base_url: str, environ: Mapping[str, str] | None = None) -> SystemsConfig:
    """Every business system at `base_url`, unless its own variable says otherwise."""
    return SystemsConfig(
        defaults={ORDERS_URL: base_url, PAYMENTS_URL: base_url, POLICIES_URL: base_url},
        environ=environ,
    )


def _provider(name: str, spec: Mapping[str, Any]) -> Provider:
    kind = spec.get("type", "openai_compat")
    if kind != "openai_compat":
        raise ConfigError(f"provider {name}: unknown type {kind!r} (known: openai_compat)")
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
    """Build the services from `AGENT_JOBS_*` variables (see the module doc)."""
    env = os.environ if environ is None else environ
    routes, providers = routes_and_providers(env.get(MODEL_ROUTES) or None, rules)
    gateway = ModelGateway(routes, providers, model_slots=model_slots_for(settings()))
    gateway.route(ROUTE_KEY)  # a routes file without the pinned route fails here, not per task
    base = env.get(SYSTEMS_URL) or DEV_BASE_URL
    # `environ=None` keeps reading the process environment at call time for the per-system URLs.
    config = systems_config(base, None if environ is None else environ)
    # Imported here: prometheus_client must load after a worker chose its multiprocess mode.
    from agent_jobs.obs.metrics import PrometheusObserver  # noqa: PLC0415

    return RefundServices(
        gateway=gateway,
        tools=refund_registry(config),
        credentials=HmacCredentialProvider.from_env(env),
        observer=PrometheusObserver(),
    )


def scripted_services(
    base_url: str, rules: RefundRules | None = None, *, provider: ScriptedProvider | None = None
) -> RefundServices:
    """Services for tests and evals: every system at `base_url`, the scripted model, no env."""
    scripted = provider or ScriptedProvider(rules or RefundRules())
    return RefundServices(
        gateway=ModelGateway([DEFAULT_ROUTE], {"scripted": scripted}),
        tools=refund_registry(systems_config(base_url, environ={})),
        credentials=HmacCredentialProvider("agent-jobs-test-secret"),
    )
