"""`agent_jobs.testing.FakeSystem` as an agent's business system in a user's test: a refusal by
the system is told to the model, a lost answer is reconciled by key, one effect per key."""

from __future__ import annotations

from typing import Any

from agent_jobs.agents import Agent, Claim, Facts, Policy
from agent_jobs.core.states import Status
from agent_jobs.testing import AgentHarness, FakeSystem, ScriptedModel, final_draft, tool_calls


class Refunded(Claim):
    order_id: str

    def holds(self, facts: Facts) -> bool:
        return facts.effect("refunds.create", order_id=self.order_id) is not None


class NotRefunded(Claim):
    order_id: str

    def holds(self, facts: Facts) -> bool:
        return facts.effect("refunds.create", order_id=self.order_id) is None


def refund_agent(system: FakeSystem) -> Agent:
    agent = Agent("fake_refund", prompt="Refund the order.", policy=Policy("FAKE@1"))

    @agent.effect("refunds.create", key="refund:{tenant_id}:{order_id}", lookup=system.lookup)
    def create(order_id: str, amount_minor: int, idempotency_key: str) -> dict[str, Any]:
        """Refund an order."""
        return system.apply(idempotency_key, lambda: {"order_id": order_id, "amount": amount_minor})

    agent.claim(Refunded)
    agent.claim(NotRefunded)
    return agent


def model() -> ScriptedModel:
    def rules(request: Any) -> dict[str, Any]:
        facts = request.facts
        if facts["effects"]:
            return final_draft("Refunded.", {"type": "refunded", "order_id": "O-1"})
        if facts["notes"]:
            return final_draft("Not refunded.", {"type": "not_refunded", "order_id": "O-1"})
        return tool_calls("refunds.create", order_id="O-1", amount_minor=500)

    return ScriptedModel(rules=rules)


def test_a_refusal_by_the_system_is_told_to_the_model(store: Any) -> None:
    system = FakeSystem()
    system.fail_next("reject:order_locked")
    scripted = model()
    h = AgentHarness(store, refund_agent(system), scripted)
    done = h.settle(h.submit_input({}).id)
    assert done.status is Status.COMPLETED and system.applied == 0
    assert done.outcome is not None and done.outcome["claims"][0]["type"] == "not_refunded"
    notes = [m.content for m in scripted.asked[-1].messages if m.role == "user"]
    assert any("The system refused refunds.create: order_locked" in n for n in notes)


def test_a_lost_answer_is_reconciled_and_applied_once(store: Any) -> None:
    system = FakeSystem()
    system.fail_next("timeout_after_commit")
    h = AgentHarness(store, refund_agent(system), model())
    done = h.settle(h.submit_input({}).id)
    assert done.status is Status.COMPLETED, done.outcome
    assert system.applied == 1 and list(system.effects) == ["refund:acme:O-1"]
    assert "reconciled_found" in [e.type for e in store.events(done.id)]
