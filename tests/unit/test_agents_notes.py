"""What an agent's model is told when its task comes back (a person denied the effect, nobody
approved it in time): one plain sentence naming the effect it proposed."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent_jobs.agents import Agent, Policy
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.testing import ScriptedModel, final_draft, tool_calls
from agent_jobs.tools import HmacCredentialProvider


def build(model: ScriptedModel) -> Agent:
    agent = Agent("notes", prompt="p", policy=Policy("N@1"))

    @agent.effect("orders.cancel", key="cancel:{tenant_id}:{order_id}", lookup=lambda k: None)
    def cancel(order_id: str) -> dict[str, Any]:
        """Cancel."""
        return {"order_id": order_id}

    return agent.use(gateway=model.gateway(), credentials=HmacCredentialProvider("x" * 32))


def step_input(agent: Agent, state: dict[str, Any] | None = None, **kw: Any) -> wf.StepInput:
    inp = wf.StepInput(
        task_id="t1", tenant_id="acme", workflow="notes@1", requester="r",
        idempotency_key="req-1", input={}, state={}, pinned=agent.pinned(), attempts=0,
        trace_id="tr", cancel_requested=False, emit=lambda _n, _d: None,
    )  # fmt: skip
    return replace(inp, state=state if state is not None else agent.start(inp), **kw)


def told(model: ScriptedModel) -> list[str]:
    return [m.content for m in model.asked[-1].messages if m.role == "user"][1:]


def test_a_denial_names_the_effect_the_task_proposed() -> None:
    model = ScriptedModel([tool_calls("orders.cancel", order_id="A-1"), final_draft("No.")])
    agent = build(model)
    act = agent.decide(step_input(agent))
    assert isinstance(act, wf.Act)
    denied = wf.Resumed("approval_denied", detail={"approval_id": "ap1", "approver": "b"})
    agent.decide(step_input(agent, act.state, resumed=denied))
    assert told(model) == ["A person denied the proposed orders.cancel."]


def test_a_denial_of_an_unknown_effect_reads_as_a_sentence() -> None:
    model = ScriptedModel([final_draft("No.")])
    agent = build(model)
    expired = wf.Resumed("approval_denied", detail={"approval_id": "ap1"})
    agent.decide(step_input(agent, resumed=expired))
    assert told(model) == ["A person denied the proposed effect."]
