"""The model gateway: routes with pinned models, budgets, breakers, schema validation with one
repair, fallback for named step types, and token and cost accounting.

    gateway = ModelGateway(load_routes_file("routes.json"), {"openai": OpenAICompatProvider(...)})
    result = gateway.propose("support-tier2@2026-03", request)

The gateway imports nothing of the store, queue or orchestrator; `agent_jobs.gateway.testing`
has a fake OpenAI-compatible server for users' tests.
"""

from agent_jobs.gateway.breaker import BreakerState, CircuitBreaker
from agent_jobs.gateway.contracts import (
    CallRecord,
    Message,
    ModelRequest,
    ModelResult,
    TaskUsage,
    Timeouts,
    ToolSpec,
)
from agent_jobs.gateway.errors import (
    BudgetExceeded,
    GatewayError,
    InvalidModelOutput,
    ModelCapSaturated,
    ModelUnavailable,
    ProviderRejected,
)
from agent_jobs.gateway.gateway import ModelGateway
from agent_jobs.gateway.providers import (
    ChatResponse,
    OpenAICompatProvider,
    Provider,
    ScriptedProvider,
)
from agent_jobs.gateway.routes import (
    DEFAULT_ROUTE,
    DEFAULT_ROUTE_CONFIG,
    DEFAULT_ROUTE_KEY,
    Route,
    check_pinned_model,
    load_routes,
    load_routes_file,
)
from agent_jobs.gateway.schemas import PROPOSAL_V3
from agent_jobs.gateway.slots import InMemoryModelSlots, ModelSlots, RedisModelSlots
from agent_jobs.gateway.tokens import estimate_input_tokens, estimate_text_tokens

__all__ = [
    "DEFAULT_ROUTE",
    "DEFAULT_ROUTE_CONFIG",
    "DEFAULT_ROUTE_KEY",
    "PROPOSAL_V3",
    "BreakerState",
    "BudgetExceeded",
    "CallRecord",
    "ChatResponse",
    "CircuitBreaker",
    "GatewayError",
    "InMemoryModelSlots",
    "InvalidModelOutput",
    "Message",
    "ModelCapSaturated",
    "ModelGateway",
    "ModelRequest",
    "ModelResult",
    "ModelSlots",
    "ModelUnavailable",
    "OpenAICompatProvider",
    "Provider",
    "ProviderRejected",
    "RedisModelSlots",
    "Route",
    "ScriptedProvider",
    "TaskUsage",
    "Timeouts",
    "ToolSpec",
    "check_pinned_model",
    "estimate_input_tokens",
    "estimate_text_tokens",
    "load_routes",
    "load_routes_file",
]
