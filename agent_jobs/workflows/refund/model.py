"""The model decision points: one gateway call, its accounting, and what a failure means.

After every call, billed or not, the gateway's `usage_after` is written into the state the step
commits, so budgets hold across retries, resumes and workers; each billed call also becomes a
`chat` event (tokens, cost, route, model; never prompt or completion content). What a gateway
error does to the task is decided here, from its type:

- `BudgetExceeded`: the task stops, ESCALATED to a person (never a retry: that is the loop);
- `ModelUnavailable`, `InvalidModelOutput`: RETRY_WAIT with backoff (or the provider's hint);
- `ProviderRejected`, an unknown pinned route or prompt: FAILED (configuration, not chance).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent_jobs.agents.chat import CHAT_EVENT as CHAT_EVENT  # noqa: PLC0414 - re-exported
from agent_jobs.agents.chat import calls_from_events as calls_from_events  # noqa: PLC0414 - re-exported
from agent_jobs.agents.chat import record_calls, tool_specs
from agent_jobs.agents.model import after_gateway_error
from agent_jobs.core.copies import deep_copy
from agent_jobs.core.errors import ConfigError, InvalidInput
from agent_jobs.gateway import (
    CallRecord,
    GatewayError,
    ModelCapSaturated,
    ModelRequest,
)
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.orchestrator.ports import Observer
from agent_jobs.tools import ToolDescriptor
from agent_jobs.verify import redact
from agent_jobs.workflows.refund import state as st
from agent_jobs.workflows.refund.agent import REFUND
from agent_jobs.workflows.refund.prompts import bounded, build_messages
from agent_jobs.workflows.refund.wiring import RefundServices


@dataclass(frozen=True)
class Asked:
    """A validated proposal, and the state with the call recorded in it."""

    state: dict[str, Any]
    proposal: dict[str, Any]


def _record(
    inp: wf.StepInput,
    state: dict[str, Any],
    *,
    route: str,
    step_type: str,
    calls: tuple[CallRecord, ...],
    usage: Any,
    outcome: str,
    observer: Observer,
) -> None:
    st.record_usage(state, usage, calls, step_type)
    record_calls(
        inp.emit, calls, route=route, step_type=step_type, outcome=outcome, observer=observer
    )


def ask(
    services: RefundServices,
    inp: wf.StepInput,
    state: dict[str, Any],
    step_type: str,
    *,
    tools: list[ToolDescriptor],
    facts: dict[str, Any],
    extra: str = "",
) -> Asked | wf.StepDecision:
    """One model decision point. Returns the proposal, or the decision a failure calls for."""
    state = deep_copy(state)
    route = str(inp.pinned.get("model_route") or REFUND.model_route)
    prompt = inp.pinned.get("prompt")
    if prompt != REFUND.prompt_version:
        return wf.Fail(
            f"task is pinned to prompt {prompt!r}; this worker ships {REFUND.prompt_version}"
        )
    who = st.customer(state)
    request = ModelRequest(
        tenant_id=inp.tenant_id,
        task_id=inp.task_id,
        step_type=step_type,
        messages=build_messages(state, step_type, who, extra),
        tools=tool_specs(tools),
        usage=st.usage(state),
        # Redacted like the messages: only the scripted model reads facts, but nothing personal
        # should depend on which provider a route happens to name.
        facts={**redact(bounded(facts), who), "customer": who.placeholder},
    )
    try:
        result = services.gateway.propose(route, request)
    except ModelCapSaturated:
        # Not a failure: the orchestrator holds the task (no worker) until a slot frees.
        raise
    except GatewayError as exc:
        _record(
            inp,
            state,
            route=route,
            step_type=step_type,
            calls=exc.calls,
            usage=exc.usage_after,
            outcome=exc.code,
            observer=services.observer,
        )
        return after_gateway_error(exc, state)
    except (ConfigError, InvalidInput) as exc:
        return wf.Fail(f"model route {route}: {exc}", state)
    _record(
        inp,
        state,
        route=result.route,
        step_type=step_type,
        calls=result.calls,
        usage=result.usage_after,
        outcome="ok",
        observer=services.observer,
    )
    st.append(
        state,
        {
            "kind": "model",
            "step": step_type,
            "proposal": result.proposal,
            "model": result.model,
            "fallback": result.fallback,
            "repaired": result.repaired,
        },
    )
    return Asked(state, result.proposal)
