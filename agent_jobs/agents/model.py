"""The model decision point of an agent's step: one gateway call with the step's own tools, its
accounting, and what a failure means for the task.

The output schema is the agent's own: a `tool_calls` proposal, or a `final_draft` whose claims
are the agent's declared claim types (nothing refund-specific). After every call, billed or not,
the gateway's usage is written into the state the step commits (budgets hold across retries,
resumes and workers) and each billed call becomes a `chat` event (tokens, cost, route, model;
never prompt or completion content). A gateway error maps to the task as for every workflow:
budget spent: ESCALATED; provider down or output invalid after repair: RETRY_WAIT; provider
refusal or an unknown pinned route: FAILED.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent_jobs.agents.chat import record_calls, tool_specs
from agent_jobs.agents.claims import Claim, claim_schema
from agent_jobs.agents.facts import Facts
from agent_jobs.core.errors import ConfigError, InvalidInput
from agent_jobs.core.text import cut
from agent_jobs.gateway import (
    BudgetExceeded,
    CallRecord,
    GatewayError,
    InvalidModelOutput,
    Message,
    ModelCapSaturated,
    ModelGateway,
    ModelRequest,
    ModelUnavailable,
    TaskUsage,
)
from agent_jobs.gateway.schemas import variant
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.orchestrator.ports import NullObserver, Observer
from agent_jobs.tools import ToolDescriptor

# What one tool result or note may take of the prompt, and how many the prompt replays.
MAX_ENTRY_CHARS = 4000
MAX_TRANSCRIPT = 40
_NONEMPTY = {"type": "string", "minLength": 1}


def proposal_schema(claims: Sequence[type[Claim]]) -> dict[str, Any]:
    """What the agent's model may answer: tool calls, or a final draft with declared claims."""
    claim_items: dict[str, Any] = (
        {"anyOf": [claim_schema(c) for c in claims]} if claims else {"type": "object"}
    )
    calls = {
        "type": "array",
        "minItems": 1,
        "maxItems": 8,
        "items": {
            "type": "object",
            "properties": {"tool": _NONEMPTY, "args": {"type": "object"}},
            "required": ["tool", "args"],
            "additionalProperties": False,
        },
    }
    draft = {
        "type": "object",
        "properties": {"text": _NONEMPTY, "claims": {"type": "array", "items": claim_items}},
        "required": ["text", "claims"],
        "additionalProperties": False,
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "agent_proposal_v1",
        "type": "object",
        "required": ["kind"],
        "properties": {"kind": {"enum": ["tool_calls", "final_draft"]}},
        "allOf": [
            variant("tool_calls", {"calls": calls, "rationale": {"type": "string"}}, ["calls"]),
            variant("final_draft", {"draft": draft}, ["draft"]),
        ],
    }


def after_gateway_error(exc: GatewayError, state: dict[str, Any]) -> wf.StepDecision:
    """What a step decides when its model call failed (recorded already): a spent budget
    escalates, an unavailable provider or an output that failed its checks is retried (after the
    provider's hint, if any), and a refusal fails the task. Every agent's model step maps them
    alike, the refund agent's included."""
    if isinstance(exc, BudgetExceeded):
        return wf.Escalate(f"model budget exhausted: {exc}", state)
    if isinstance(exc, ModelUnavailable):
        return wf.Retry(str(exc), state, exc.retry_after_s)
    if isinstance(exc, InvalidModelOutput):
        return wf.Retry(str(exc), state)
    return wf.Fail(f"the model provider refused the request: {exc}", state)


@dataclass(frozen=True)
class Asked:
    """A validated proposal, and the state with the call's accounting in it."""

    state: dict[str, Any]
    proposal: dict[str, Any]


def usage(state: Mapping[str, Any]) -> TaskUsage:
    return TaskUsage.model_validate((state.get("model") or {}).get("usage") or {})


def _entry(text: Any) -> str:
    raw = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
    return cut(raw, MAX_ENTRY_CHARS)


def messages(prompt: str, state: Mapping[str, Any], step: str) -> list[Message]:
    """The system prompt, the task's input, then what happened so far (tool results are data:
    they travel as `tool` messages, never as instructions)."""
    out = [
        Message(role="system", content=prompt),
        Message(role="user", content=_entry({"input": state.get("input"), "step": step})),
    ]
    for item in list(state.get("transcript") or [])[-MAX_TRANSCRIPT:]:
        if item.get("role") == "tool":
            out.append(Message(role="tool", name=str(item["tool"]), content=_entry(item["result"])))
        elif item.get("role") == "assistant":
            out.append(Message(role="assistant", content=_entry(item["proposal"])))
        else:
            out.append(Message(role="user", content=_entry(item.get("note"))))
    return out


def _record(
    inp: wf.StepInput,
    state: dict[str, Any],
    *,
    route: str,
    step: str,
    calls: tuple[CallRecord, ...],
    after: TaskUsage | None,
    outcome: str,
    observer: Observer,
) -> None:
    model = dict(state.get("model") or {})
    if after is not None:
        model["usage"] = after.model_dump(mode="json")
    state["model"] = model
    record_calls(inp.emit, calls, route=route, step_type=step, outcome=outcome, observer=observer)


def ask(
    gateway: ModelGateway,
    inp: wf.StepInput,
    state: dict[str, Any],
    *,
    route: str,
    prompt: str,
    step: str,
    tools: Sequence[ToolDescriptor],
    schema: dict[str, Any],
    observer: Observer | None = None,
) -> Asked | wf.StepDecision:
    """One model call offering `tools`. Returns the proposal, or the decision a failure calls
    for (the state then carries the accounting of what was billed)."""
    observer = observer or NullObserver()
    facts = {**Facts.of(state).as_dict(), "step": step, "notes": _notes(state)}
    request = ModelRequest(
        tenant_id=inp.tenant_id,
        task_id=inp.task_id,
        step_type=step,
        messages=messages(prompt, state, step),
        tools=tool_specs(tools),
        output_schema=schema,
        usage=usage(state),
        facts=facts,
    )
    try:
        result = gateway.propose(route, request)
    except ModelCapSaturated:
        raise  # not a failure: the orchestrator holds the task until a model slot frees
    except GatewayError as exc:
        _record(
            inp,
            state,
            calls=exc.calls,
            after=exc.usage_after,
            outcome=exc.code,
            route=route,
            step=step,
            observer=observer,
        )
        return after_gateway_error(exc, state)
    except (ConfigError, InvalidInput) as exc:
        return wf.Fail(f"model route {route}: {exc}", state)
    _record(
        inp,
        state,
        calls=result.calls,
        after=result.usage_after,
        outcome="ok",
        route=route,
        step=step,
        observer=observer,
    )
    return Asked(state, result.proposal)


def _notes(state: Mapping[str, Any]) -> list[Any]:
    return [t.get("note") for t in state.get("transcript") or [] if t.get("role") == "note"][-10:]
