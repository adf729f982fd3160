"""An agent's model may propose several effects together, as a plan (on SQLite and Postgres):
each is still its own `Act` — its key, the policy's decision over the facts of its turn, an
approval bound to its own hash — the next one only once the one before is applied, with no
model call between them; a refusal drops the rest of the plan. The console's evidence shows the
whole plan to the person asked. Each test asserts what the two fake systems received."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from agent_jobs.console.agent_evidence import agent_evidence
from agent_jobs.core.states import Status
from agent_jobs.ops.live import install
from agent_jobs.ops.switches import Kind, StaticSwitches, Switch, SwitchKey, SwitchSet
from agent_jobs.testing import final_draft
from tests.integration.test_agent_two_effects import ORDER, harness

S = Status
BOTH = {
    "kind": "tool_calls",
    "rationale": "",
    "calls": [
        {"tool": "devices.disable", "args": {"device_id": "LT-7"}},
        {"tool": "orders.create",
         "args": {"device_id": "LT-7", "price_minor": 1500_00, "currency": "EUR"}},
    ],
}  # fmt: skip


def planner(request: Any) -> dict[str, Any]:
    """Both effects in one proposal; then the reply, saying what the facts show."""
    done = {e["tool"] for e in request.facts["effects"]}
    if not request.facts["notes"] and not done:
        return BOTH
    claims = [{"type": "disabled", "device_id": "LT-7"}] if "devices.disable" in done else []
    if "orders.create" in done:
        claims.append({"type": "ordered", "device_id": "LT-7", "price_minor": 1500_00})
    else:
        claims.append({"type": "not_ordered", "device_id": "LT-7"})
    return final_draft("Done.", *claims)


def test_a_plan_of_two_runs_each_as_its_own_act_with_one_model_call(store: Any) -> None:
    h, devices, shop = harness(store, planner)
    task = h.submit_input({})
    assert h.settle(task.id).status is S.APPROVAL_WAIT  # the order, above EUR 1,000
    assert (devices.applied, shop.applied) == (1, 0)
    assert len(h.model.asked) == 1  # the plan, then no model call for its second effect
    (approval,) = store.list_approvals("acme", task_id=task.id)
    assert approval.tool == "orders.create" and approval.args["price_minor"] == 1500_00
    shown = agent_evidence(store.get(task.id).state)
    assert shown is not None
    assert [(p["tool"], p["status"]) for p in shown["plan"]] == [
        ("devices.disable", "applied"), ("orders.create", "proposed")]  # fmt: skip
    done = h.approve(task.id)
    assert done.status is S.COMPLETED, done.outcome
    assert (devices.applied, shop.applied) == (1, 1)
    assert [e.type for e in store.events(task.id)].count("intent_recorded") == 2
    assert {e.idempotency_key for e in store.effects(task.id)} == {"disable:acme:LT-7", ORDER}


def test_the_person_asked_for_the_first_sees_the_whole_plan_and_a_denial_drops_the_rest(
    store: Any,
) -> None:
    h, devices, shop = harness(store, planner)
    at = datetime(2026, 3, 14, tzinfo=UTC)
    cap = Switch(SwitchKey(Kind("autonomy_threshold"), ""), 0, "oncall", "INC-9", at)
    previous = install(StaticSwitches(SwitchSet.of([cap])))
    try:
        task = h.submit_input({})
        assert h.settle(task.id).status is S.APPROVAL_WAIT  # the disable: every effect asks
        shown = agent_evidence(store.get(task.id).state)
        assert shown is not None
        assert [(p["tool"], p["status"]) for p in shown["plan"]] == [
            ("devices.disable", "proposed"), ("orders.create", "planned")]  # fmt: skip
        done = h.approve(task.id, grant=False)
    finally:
        install(previous)
    assert done.status is S.COMPLETED, done.outcome
    assert (devices.applied, shop.applied) == (0, 0)
    assert len(store.list_approvals("acme", task_id=task.id)) == 1  # the order was never asked
    notes = [m.content for m in h.model.asked[-1].messages if m.role == "user"]
    assert any("The rest of the plan was not sent: orders.create" in n for n in notes)


def test_a_plan_longer_than_the_task_may_apply_is_not_started(store: Any) -> None:
    three = {**BOTH, "calls": [*BOTH["calls"], {"tool": "devices.disable",
                                                "args": {"device_id": "LT-8"}}]}  # fmt: skip

    def rules(request: Any) -> dict[str, Any]:
        if not request.facts["notes"]:
            return three
        return final_draft("Nothing done.", {"type": "not_ordered", "device_id": "LT-7"})

    h, devices, shop = harness(store, rules)
    done = h.settle(h.submit_input({}).id)
    assert done.status is S.COMPLETED, done.outcome
    assert (devices.applied, shop.applied) == (0, 0)
    assert "plan too long" in [e.data.get("note") for e in store.events(done.id)]
