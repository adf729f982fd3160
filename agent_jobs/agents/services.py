"""What an agent talks to: the model gateway, the credential minter, the metrics observer.

Built on first use from the settings (never at import or registration: a worker registering
the agent must start while the model provider is down), or given by a test (`Agent.use`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent_jobs.core.errors import ConfigError
from agent_jobs.gateway import ModelGateway, ScriptedProvider
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
    agent's scripted model, when it has one, serving the `scripted` provider."""
    from agent_jobs.config import load_settings  # noqa: PLC0415 - read at first use
    from agent_jobs.obs.metrics import PrometheusObserver  # noqa: PLC0415 - see refund wiring
    from agent_jobs.workflows.refund.wiring import routes_and_providers  # noqa: PLC0415

    cfg = load_settings()
    routes, providers = routes_and_providers(cfg.model_routes)
    if scripted is not None:
        providers["scripted"] = ScriptedProvider(scripted)
    gateway = ModelGateway(routes, providers, model_slots=model_slots_for(cfg))
    try:
        gateway.route(route)
    except ConfigError as exc:  # the agent's route must exist before its first task
        raise ConfigError(f"agent model route {route}: {exc}") from None
    return AgentServices(gateway, HmacCredentialProvider.from_env(), PrometheusObserver())
