"""The generic tool-calling step against a hostile model: whatever a proposal holds (odd
Unicode, NUL, megabytes, invented tools, effects bundled with reads), a step returns a decision,
never raises, never runs an effect itself, and every effect it proposes is keyed by the
template over exactly the arguments the policy will see."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_jobs.agents import Agent, Policy
from agent_jobs.core.hashing import derive_idempotency_key
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.testing import ScriptedModel, tool_calls
from agent_jobs.tools import HmacCredentialProvider

SENT: list[Any] = []


def build(model: ScriptedModel) -> Agent:
    agent = Agent("hostile", prompt="p", policy=Policy("H@1"), max_model_calls=3)

    @agent.tool("orders.get")
    def get(order_id: str) -> dict[str, Any]:
        """Read."""
        return {"order_id": order_id, "status": "open"}

    @agent.effect("orders.cancel", key="cancel:{tenant_id}:{order_id}", lookup=lambda k: None)
    def cancel(order_id: str, amount_minor: int) -> dict[str, Any]:
        """Cancel."""
        SENT.append(order_id)
        return {}

    return agent.use(gateway=model.gateway(), credentials=HmacCredentialProvider("x" * 32))


def step_input(agent: Agent, state: dict[str, Any] | None = None) -> wf.StepInput:
    inp = wf.StepInput(
        task_id="t1", tenant_id="acme", workflow="hostile@1", requester="r",
        idempotency_key="req-1", input={}, state={}, pinned=agent.pinned(), attempts=0,
        trace_id="tr", cancel_requested=False, emit=lambda _n, _d: None,
    )  # fmt: skip
    from dataclasses import replace

    return replace(inp, state=state if state is not None else agent.start(inp))


VALUES = st.none() | st.booleans() | st.integers() | st.text() | st.text(min_size=2000)
ARGS = st.dictionaries(st.sampled_from(["order_id", "amount_minor", "extra"]) | st.text(), VALUES)
TOOLS = st.sampled_from(["orders.get", "orders.cancel", "orders.cancel.by_key", "x", "\x00"])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(TOOLS, ARGS), min_size=1, max_size=4))
def test_any_proposal_becomes_a_decision_and_effects_only_through_act(
    calls: list[tuple[str, dict[str, Any]]],
) -> None:
    proposal = {"kind": "tool_calls", "calls": [{"tool": t, "args": a} for t, a in calls]}
    agent = build(ScriptedModel([proposal]))
    inp = step_input(agent)
    decision = agent.decide(inp)
    assert not SENT  # a step never sends an effect; only the orchestrator's execute does
    assert isinstance(decision, wf.Observe | wf.Act | wf.Retry), decision
    if isinstance(decision, wf.Act):
        action = decision.action
        assert len(calls) == 1 and action.tool == "orders.cancel"
        assert set(action.args) == {"order_id", "amount_minor"}
        trusted = {"tenant_id": "acme", "task_id": "t1", "request_id": "req-1"}
        template = "cancel:{tenant_id}:{order_id}"
        assert action.idempotency_key == derive_idempotency_key(
            template, {**action.args, **trusted}
        )


def test_a_model_that_makes_no_progress_is_stopped_after_its_bound() -> None:
    agent = build(ScriptedModel([tool_calls("orders.get", order_id="A")]))
    inp = step_input(agent)
    for _ in range(3):
        decision = agent.decide(inp)
        assert isinstance(decision, wf.Observe)
        inp = step_input(agent, decision.state)
    stopped = agent.decide(inp)
    assert isinstance(stopped, wf.Escalate) and "3 calls" in stopped.reason


def test_a_task_pinned_to_another_prompt_is_not_run_by_this_worker() -> None:
    agent = build(ScriptedModel([tool_calls("orders.get", order_id="A")]))
    inp = step_input(agent)
    from dataclasses import replace

    old = replace(inp, pinned={**inp.pinned, "prompt": "hostile@000000000000"})
    assert isinstance(agent.decide(old), wf.Fail)
