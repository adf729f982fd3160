"""What an agent talks to: the model gateway, the credential minter, the metrics observer.

Built on first use from the settings (never at import or registration: a worker registering
the agent must start while the model provider is down), or given by a test (`Agent.use`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_jobs.agents.routes import routes_and_providers
from agent_jobs.core.errors import ConfigError
from agent_jobs.gateway import ModelGateway, ModelRequest, ProviderRejected, ScriptedProvider
from agent_jobs.gateway.providers.scripted import Rules
from agent_jobs.gateway.slots import model_slots_for
from agent_jobs.orchestrator.ports import NullObserver, Observer
from agent_jobs.tools import CredentialProvider, HmacCredentialProvider


@dataclass(frozen=True)
class AgentServices:
    """The ports an agent's tasks use; thread-safe, shared by every task of a process."""

    gateway: ModelGateway
    credentials: CredentialProvider
    observer: Observer = field(default_factory=NullObserver)


def services_from_settings(route: str, scripted: Rules | None) -> AgentServices:
    """The gateway of `AGENT_JOBS_MODEL_ROUTES` (or the built-in scripted route), with the
    agent's scripted model serving the `scripted` provider. An agent without one is refused
    by that provider (the task fails, naming why) rather than answered by another's script."""
    from agent_jobs.config import load_settings  # noqa: PLC0415 - read at first use

    # Imported here: prometheus_client must load after a worker chose its multiprocess mode.
    from agent_jobs.obs.metrics import PrometheusObserver  # noqa: PLC0415

    cfg = load_settings()
    routes, providers = routes_and_providers(
        cfg.model_routes, ScriptedProvider(scripted or _unscripted)
    )
    gateway = ModelGateway(routes, providers, model_slots=model_slots_for(cfg))
    try:
        gateway.route(route)
    except ConfigError as exc:  # the agent's route must exist before its first task
        raise ConfigError(f"agent model route {route}: {exc}") from None
    return AgentServices(gateway, HmacCredentialProvider.from_env(), PrometheusObserver())


def _unscripted(request: ModelRequest) -> Mapping[str, Any]:
    raise ProviderRejected(
        404,
        "this agent declares no scripted model (Agent(scripted_model=...))",
        provider="scripted",
    )
