"""An agent's outcome says how it got there: how many drafts the verifier sent back, and, when
it ends without the effect it proposed, why (a person's denial, the policy's, the system's
rejection), on SQLite and Postgres."""

from __future__ import annotations

from typing import Any

from agent_jobs.agents import Agent, Call, Claim, Decision, Facts, Policy, deny
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


def refund_agent(system: FakeSystem, policy: Policy | None = None) -> Agent:
    agent = Agent("outcome_refund", prompt="Refund the order.", policy=policy)

    @agent.effect("refunds.create", key="refund:{tenant_id}:{order_id}", lookup=system.lookup)
    def create(order_id: str, amount_minor: int, idempotency_key: str) -> dict[str, Any]:
        """Refund an order."""
        return system.apply(idempotency_key, lambda: {"order_id": order_id, "amount": amount_minor})

    agent.claim(Refunded)
    agent.claim(NotRefunded)
    return agent


def rules(request: Any) -> dict[str, Any]:
    """Refund O-1; once told no, say it was not refunded."""
    facts = request.facts
    if facts["effects"]:
        return final_draft("Refunded.", {"type": "refunded", "order_id": "O-1"})
    if facts["notes"]:
        return final_draft("Not refunded.", {"type": "not_refunded", "order_id": "O-1"})
    return tool_calls("refunds.create", order_id="O-1", amount_minor=500)


def test_a_person_s_denial_is_why_it_declined(store: Any) -> None:
    system = FakeSystem()
    h = AgentHarness(store, refund_agent(system), ScriptedModel(rules=rules))
    task = h.submit_input({})
    assert h.settle(task.id).status is Status.APPROVAL_WAIT
    done = h.approve(task.id, grant=False)
    assert done.status is Status.COMPLETED and system.applied == 0
    assert done.outcome is not None and done.outcome["redrafts"] == 0
    assert done.outcome["declined"] == {
        "kind": "approval_denied", "tool": "refunds.create", "reason": "", "code": None,
    }  # fmt: skip


def test_the_policy_s_denial_and_the_system_s_rejection_are_why_it_declined(store: Any) -> None:
    def never(call: Call, facts: Facts) -> Decision:
        return deny("refunds_frozen")

    system = FakeSystem()
    h = AgentHarness(store, refund_agent(system, Policy("NO@1", rules=[never])),
                     ScriptedModel(rules=rules))  # fmt: skip
    done = h.settle(h.submit_input({}, key="k-policy").id)
    assert done.outcome is not None and done.outcome["declined"]["kind"] == "policy_denied"
    assert done.outcome["declined"]["reason"] == "refunds_frozen"

    system.fail_next("reject:order_locked")
    h = AgentHarness(store, refund_agent(system, Policy("YES@1")), ScriptedModel(rules=rules))
    done = h.settle(h.submit_input({}, key="k-system").id)
    assert done.outcome is not None and done.outcome["declined"]["kind"] == "effect_rejected"
    assert done.outcome["declined"]["code"] == "order_locked" and system.applied == 0


def test_an_applied_effect_declines_nothing_and_redrafts_are_counted(store: Any) -> None:
    system = FakeSystem()
    model = ScriptedModel(
        [
            tool_calls("refunds.create", order_id="O-1", amount_minor=500),
            final_draft("Not refunded.", {"type": "not_refunded", "order_id": "O-1"}),  # false
            final_draft("Refunded.", {"type": "refunded", "order_id": "O-1"}),
        ]
    )
    h = AgentHarness(store, refund_agent(system, Policy("YES@1")), model)
    done = h.settle(h.submit_input({}).id)
    assert done.status is Status.COMPLETED and system.applied == 1
    assert done.outcome is not None
    assert done.outcome["redrafts"] == 1 and done.outcome["declined"] is None
