"""An agent that applies two effects in one task (`Agent(max_effects=2)`): every guarantee of the
one-effect path holds for the second effect too, on SQLite and Postgres. Each test asserts what
the two fake business systems received (each effect applied once), not only the task's status.

The agent disables a lost laptop (device management) and orders its replacement (procurement,
above EUR 1,000 a person approves); the scripted model decides its next step from its facts.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from agent_jobs.agents import Agent, Claim, Facts, Policy, approval_above
from agent_jobs.core.contracts import Action
from agent_jobs.core.states import Status
from agent_jobs.ops.live import install
from agent_jobs.ops.switches import Kind, StaticSwitches, Switch, SwitchKey, SwitchSet
from agent_jobs.testing import AgentHarness, FakeSystem, ScriptedModel, final_draft, tool_calls

S = Status
DISABLE = "disable:acme:LT-7"
ORDER = "order:acme:LT-7"


class Disabled(Claim):
    device_id: str

    def holds(self, facts: Facts) -> bool:
        return facts.effect("devices.disable", device_id=self.device_id) is not None


class Ordered(Claim):
    device_id: str
    price_minor: int

    def holds(self, facts: Facts) -> bool:
        done = facts.effect("orders.create", device_id=self.device_id)
        return done is not None and done["price_minor"] == self.price_minor


class NotOrdered(Claim):
    device_id: str

    def holds(self, facts: Facts) -> bool:
        return facts.effect("orders.create", device_id=self.device_id) is None


def helpdesk(devices: FakeSystem, shop: FakeSystem, *, max_effects: int = 2) -> Agent:
    agent = Agent(
        "two_effects",
        prompt="Disable the lost laptop, then order its replacement.",
        policy=Policy("TWO@1", thresholds=[approval_above({"EUR": 1000_00}, amount="price_minor",
                                                          tools=["orders.create"])]),
        max_effects=max_effects,
    )  # fmt: skip

    @agent.effect("devices.disable", key="disable:{tenant_id}:{device_id}", lookup=devices.lookup)
    def disable(device_id: str, idempotency_key: str) -> dict[str, Any]:
        """Disable a device."""
        return devices.apply(idempotency_key, lambda: {"device_id": device_id, "state": "off"})

    @agent.effect("orders.create", key="order:{tenant_id}:{device_id}", lookup=shop.lookup)
    def order(device_id: str, price_minor: int, currency: str, idempotency_key: str) -> dict:
        """Order a replacement for a device."""
        return shop.apply(idempotency_key, lambda: {"device_id": device_id,
                                                    "price_minor": price_minor})  # fmt: skip

    for claim in (Disabled, Ordered, NotOrdered):
        agent.claim(claim)
    return agent


def plan(price: int = 900_00) -> Callable[[Any], dict[str, Any]]:
    """Disable, then order; once the order is refused, say so."""

    def rules(request: Any) -> dict[str, Any]:
        done = {e["tool"] for e in request.facts["effects"]}
        if "orders.create" in done:
            return final_draft(
                "Disabled and ordered.",
                {"type": "disabled", "device_id": "LT-7"},
                {"type": "ordered", "device_id": "LT-7", "price_minor": price},
            )
        refused = [n for n in request.facts["notes"] if "denied" in n or "refused" in n]
        if refused:
            return final_draft(
                "Disabled; no order.",
                {"type": "disabled", "device_id": "LT-7"},
                {"type": "not_ordered", "device_id": "LT-7"},
            )
        if "devices.disable" in done:
            return tool_calls("orders.create", device_id="LT-7", price_minor=price, currency="EUR")
        return tool_calls("devices.disable", device_id="LT-7")  # fmt: skip

    return rules


def harness(store: Any, rules: Any, **kw: Any) -> tuple[AgentHarness, FakeSystem, FakeSystem]:
    devices, shop = FakeSystem(), FakeSystem()
    h = AgentHarness(store, helpdesk(devices, shop, **kw), ScriptedModel(rules=rules))
    return h, devices, shop


def names(store: Any, task_id: str) -> list[str]:
    return [e.type for e in store.events(task_id)]


def until_first_applied(h: AgentHarness, task_id: str) -> None:
    """Run steps one by one until the first effect has committed (the second not yet asked)."""
    while "effect_committed" not in names(h.store, task_id):
        assert h.run_one() is not None or h.publisher.queue, "stopped before the first effect"


def test_two_effects_each_with_its_intent_decision_key_and_tool_event(store: Any) -> None:
    h, devices, shop = harness(store, plan())
    done = h.settle(h.submit_input({}).id)
    assert done.status is S.COMPLETED, done.outcome
    assert (devices.applied, list(devices.effects)) == (1, [DISABLE])
    assert (shop.applied, list(shop.effects)) == (1, [ORDER])
    seen = names(store, done.id)
    assert seen.count("intent_recorded") == 2 and seen.count("effect_committed") == 2
    sent = [e.data for e in store.events(done.id) if e.type.startswith("execute_tool")]
    assert [(d["tool"], d["step_scope"]) for d in sent] == [
        ("devices.disable", "execute"), ("orders.create", "execute")]  # fmt: skip
    rows = {e.idempotency_key: e.status for e in store.effects(done.id)}
    assert rows == {DISABLE: "committed", ORDER: "committed"}
    assert done.outcome is not None
    assert [e["tool"] for e in done.outcome["effects"]] == ["devices.disable", "orders.create"]
    assert [c["type"] for c in done.outcome["claims"]] == ["disabled", "ordered"]
    assert done.outcome["declined"] is None


def test_the_second_effect_s_approval_is_bound_to_its_own_hash(store: Any) -> None:
    h, devices, shop = harness(store, plan(1500_00))
    task = h.submit_input({})
    assert h.settle(task.id).status is S.APPROVAL_WAIT
    assert (devices.applied, shop.applied) == (1, 0)
    (approval,) = store.list_approvals("acme", task_id=task.id)
    version = h.agent.tools.get("orders.create").version
    args = {"device_id": "LT-7", "price_minor": 1500_00, "currency": "EUR"}
    second = Action(tool="orders.create", tool_version=version, idempotency_key=ORDER, args=args)
    assert approval.action_hash == second.action_hash
    done = h.approve(task.id)
    assert done.status is S.COMPLETED, done.outcome
    assert (devices.applied, shop.applied) == (1, 1)
    assert store.approval(approval.approval_id).status == "used"


def test_a_crash_before_the_second_send_is_reconciled_then_sent_once(store: Any) -> None:
    h, devices, shop = harness(store, plan())
    task = h.submit_input({})
    until_first_applied(h, task.id)
    h.crash_next_effect("before_send")
    assert h.settle(task.id).status is S.EXECUTING and shop.applied == 0
    done = h.recover(task.id)
    assert done.status is S.COMPLETED, done.outcome
    assert (devices.applied, shop.applied) == (1, 1) and list(shop.effects) == [ORDER]
    seen = names(store, task.id)
    assert "lease_lost_during_effect" in seen and "retry_same_key" in seen


def test_a_crash_after_the_second_send_is_found_by_its_key_not_sent_again(store: Any) -> None:
    h, devices, shop = harness(store, plan())
    task = h.submit_input({})
    until_first_applied(h, task.id)
    h.crash_next_effect("after_send")
    assert h.settle(task.id).status is S.EXECUTING and shop.applied == 1
    done = h.recover(task.id)
    assert done.status is S.COMPLETED, done.outcome
    assert (devices.applied, shop.applied) == (1, 1)
    assert "reconciled_found" in names(store, task.id) and "retry_same_key" not in names(
        store, task.id
    )
    assert done.outcome is not None and done.outcome["effects"][1]["reconciled"] is True


def test_an_unknown_outcome_of_the_second_is_reconciled_and_applied_once(store: Any) -> None:
    h, devices, shop = harness(store, plan())
    shop.fail_next("timeout_after_commit")
    done = h.settle(h.submit_input({}).id)
    assert done.status is S.COMPLETED, done.outcome
    assert (devices.applied, shop.applied) == (1, 1)
    seen = names(store, done.id)
    assert seen.count("effect_unknown") == 1 and "reconciled_found" in seen


def test_a_denial_of_the_second_after_the_first_was_applied(store: Any) -> None:
    h, devices, shop = harness(store, plan(1500_00))
    task = h.submit_input({})
    h.settle(task.id)
    done = h.approve(task.id, grant=False)
    assert done.status is S.COMPLETED, done.outcome
    assert (devices.applied, shop.applied) == (1, 0)
    assert done.outcome is not None
    assert [e["tool"] for e in done.outcome["effects"]] == ["devices.disable"]
    assert [c["type"] for c in done.outcome["claims"]] == ["disabled", "not_ordered"]
    assert done.outcome["declined"] == {
        "kind": "approval_denied", "tool": "orders.create", "reason": "", "code": None}  # fmt: skip


def test_a_reply_claiming_the_denied_second_effect_is_not_verified(store: Any) -> None:
    def rules(request: Any) -> dict[str, Any]:
        if request.facts["notes"] and any("denied" in n for n in request.facts["notes"]):
            return final_draft("Ordered.", {"type": "ordered", "device_id": "LT-7",
                                            "price_minor": 1500_00})  # fmt: skip
        return plan(1500_00)(request)

    h, devices, shop = harness(store, rules)
    task = h.submit_input({})
    h.settle(task.id)
    done = h.approve(task.id, grant=False)
    assert done.status is S.ESCALATED and "failed verification" in str(done.outcome)
    assert (devices.applied, shop.applied) == (1, 0)
    assert done.outcome is not None
    assert done.outcome["effects_committed"] == [{"tool": "devices.disable",
                                                  "idempotency_key": DISABLE}]  # fmt: skip


def test_cancelled_between_the_two_effects_says_which_were_applied(store: Any) -> None:
    h, devices, shop = harness(store, plan(1500_00))
    task = h.submit_input({})
    assert h.settle(task.id).status is S.APPROVAL_WAIT
    h.orchestrator.cancel(task.id, "acme")
    done = h.settle(task.id)
    assert done.status is S.CANCELLED and (devices.applied, shop.applied) == (1, 0)
    assert done.outcome is not None
    assert done.outcome["effects_committed"] == [
        {"tool": "devices.disable", "idempotency_key": DISABLE}]  # fmt: skip
    (approval,) = store.list_approvals("acme", task_id=task.id)
    assert approval.status == "void"


def test_escalated_between_the_two_effects_says_which_were_applied(store: Any) -> None:
    # After the first effect the model only reads its own input back: no progress.
    def rules(request: Any) -> dict[str, Any]:
        if request.facts["effects"]:
            return tool_calls("devices.status", device_id="LT-7")
        return tool_calls("devices.disable", device_id="LT-7")

    h, devices, shop = harness(store, rules)

    @h.agent.tool("devices.status")
    def status(device_id: str) -> dict[str, Any]:
        """A device's state."""
        return {"device_id": device_id, "state": "off"}

    done = h.settle(h.submit_input({}).id)
    assert done.status is S.ESCALATED and "no progress" in str(done.outcome)
    assert (devices.applied, shop.applied) == (1, 0)
    assert done.outcome is not None
    assert done.outcome["effects_committed"] == [
        {"tool": "devices.disable", "idempotency_key": DISABLE}]  # fmt: skip


def test_the_operators_levers_hold_the_second_effect(store: Any) -> None:
    h, devices, shop = harness(store, plan())
    task = h.submit_input({})
    until_first_applied(h, task.id)
    at = datetime(2026, 3, 14, tzinfo=UTC)
    cap = Switch(SwitchKey(Kind("autonomy_threshold"), ""), 0, "oncall", "INC-9", at)
    previous = install(StaticSwitches(SwitchSet.of([cap])))
    try:
        assert h.settle(task.id).status is S.APPROVAL_WAIT
    finally:
        install(previous)
    (asked,) = [e for e in store.events(task.id) if e.type == "approval_requested"]
    assert asked.data["tool"] == "orders.create"
    assert asked.data["reason"] == "operator autonomy cap 0"
    assert (devices.applied, shop.applied) == (1, 0)
    assert h.approve(task.id).status is S.COMPLETED and (devices.applied, shop.applied) == (1, 1)


def test_no_effect_past_max_effects_and_none_twice(store: Any) -> None:
    # The model asks for the first effect again, then a third: neither reaches a system.
    def rules(request: Any) -> dict[str, Any]:
        done = [e["tool"] for e in request.facts["effects"]]
        notes = " ".join(request.facts["notes"])
        if done == ["devices.disable"] and "already applied" not in notes:
            return tool_calls("devices.disable", device_id="LT-7")
        if len(done) == 2 and "Not available" not in notes:
            return tool_calls("devices.disable", device_id="LT-8")
        return plan()(request)

    h, devices, shop = harness(store, rules)
    done = h.settle(h.submit_input({}).id)
    assert done.status is S.COMPLETED, done.outcome
    assert (devices.applied, shop.applied, list(devices.effects)) == (1, 1, [DISABLE])
    seen = [e.data.get("note") for e in store.events(done.id) if e.type == "observed"]
    assert "effect already applied" in seen and "tool not offered" in seen


def test_a_second_effect_refused_is_not_proposed_again_with_other_arguments(store: Any) -> None:
    # The system refuses the order; the model tries a lower price under the same key. The key
    # already names the refused action: the model is told, the task does not fail.
    def rules(request: Any) -> dict[str, Any]:
        notes = " ".join(request.facts["notes"])
        if "cannot send it again" in notes:
            return plan()(request)  # drafts: "refused" is in the notes
        if "The system refused" in notes:
            return tool_calls("orders.create", device_id="LT-7", price_minor=800_00,
                              currency="EUR")  # fmt: skip
        return plan()(request)

    h, devices, shop = harness(store, rules)
    shop.fail_next("reject:out_of_stock")
    done = h.settle(h.submit_input({}).id)
    assert done.status is S.COMPLETED, done.outcome
    assert (devices.applied, shop.applied) == (1, 0)
    seen = names(store, done.id)
    assert seen.count("intent_recorded") == 2 and "step_failed" not in seen
    assert done.outcome is not None and done.outcome["declined"]["kind"] == "effect_rejected"
    assert [c["type"] for c in done.outcome["claims"]] == ["disabled", "not_ordered"]


def test_a_tool_lever_holds_the_second_effect_then_lets_it_go_once(store: Any) -> None:
    h, devices, shop = harness(store, plan())
    task = h.submit_input({})
    until_first_applied(h, task.id)
    at = datetime(2026, 3, 14, tzinfo=UTC)
    hold = Switch(SwitchKey(Kind.TOOL_DISABLED, "acme", "orders.create"), True, "oncall", "INC", at)
    previous = install(StaticSwitches(SwitchSet.of([hold])))
    try:
        h.run_until_idle()
        held = store.get(task.id)
        assert held.status is S.RETRY_WAIT and (devices.applied, shop.applied) == (1, 0)
        assert held.state["runtime"]["park"]["reason"] == "held_by_operator"
    finally:
        install(previous)
    done = h.settle(task.id)
    assert done.status is S.COMPLETED, done.outcome
    assert (devices.applied, shop.applied) == (1, 1)
