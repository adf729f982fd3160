"""What a model call leaves on a task, for every workflow: the `chat` event of each billed call
(tokens, cost, route, model; never prompt or completion content), the call records read back
from those events (the cost table, traces), and the tool specs a model is shown.

Neutral: the refund workflow and declared agents both write and read these, so the console, the
traces, the evals and the cost arithmetic see one shape whichever workflow made the call.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

from agent_jobs.core.contracts import EventView
from agent_jobs.gateway import CallRecord, ToolSpec
from agent_jobs.orchestrator.ports import Observer
from agent_jobs.tools import ToolDescriptor

CHAT_EVENT = "chat"


def chat_event(call: CallRecord, *, route: str, step_type: str, outcome: str) -> dict[str, Any]:
    """The `chat` span of one billed call: what it cost, never what it said."""
    return {
        "gen_ai.operation.name": "chat",
        "step_type": step_type,
        "route": route,
        "provider": call.provider,
        "model": call.model,
        "input_tokens": call.input_tokens,
        "output_tokens": call.output_tokens,
        "cached_input_tokens": call.cached_input_tokens,
        "tokens_reported": call.tokens_reported,
        "cost_inr": str(call.cost),
        "latency_ms": call.latency_ms,
        "purpose": call.purpose,
        "fallback": call.fallback,
        "outcome": outcome,
    }


def calls_from_events(events: Iterable[EventView]) -> list[CallRecord]:
    """The billed calls of a task, from its `chat` events (the gateway's own figures)."""
    out = []
    for e in events:
        if e.type != CHAT_EVENT:
            continue
        d = e.data
        out.append(
            CallRecord(
                input_tokens=int(d.get("input_tokens", 0)),
                output_tokens=int(d.get("output_tokens", 0)),
                cached_input_tokens=int(d.get("cached_input_tokens", 0)),
                provider=str(d.get("provider", "")),
                model=str(d.get("model", "")),
                purpose="repair" if d.get("purpose") == "repair" else "propose",
                fallback=bool(d.get("fallback", False)),
                tokens_reported=bool(d.get("tokens_reported", True)),
                cost=Decimal(str(d.get("cost_inr", "0"))),
                latency_ms=int(d.get("latency_ms", 0)),
            )
        )
    return out


def tool_specs(descriptors: Iterable[ToolDescriptor]) -> list[ToolSpec]:
    """What the model is shown of the tools: name, description, argument schema. No more."""
    return [_tool_spec(d) for d in descriptors]


@functools.lru_cache(maxsize=1024)
def _tool_spec(d: ToolDescriptor) -> ToolSpec:
    """One spec per registered descriptor, made once: the gateway then finds the same schema
    objects on every call and reuses what it derived from them (core/memo.py). Descriptors are
    frozen, and compare by identity."""
    return ToolSpec(name=d.name, description=d.description, parameters=dict(d.args_schema))


def record_calls(
    emit: Any,
    calls: Iterable[CallRecord],
    *,
    route: str,
    step_type: str,
    outcome: str,
    observer: Observer,
) -> None:
    """Each model call as a `chat` event (`emit`: the step input's) and a metric; a step refused
    before any billed call (budget, breaker, provider down) still counts one, with its outcome."""
    calls = list(calls)
    for call in calls:
        emit(CHAT_EVENT, chat_event(call, route=route, step_type=step_type, outcome=outcome))
        observer.model_call(
            route,
            outcome,
            input_tokens=call.input_tokens,
            output_tokens=call.output_tokens,
            cached_input_tokens=call.cached_input_tokens,
            cost=call.cost,
        )
    if not calls:
        observer.model_call(route, outcome)
