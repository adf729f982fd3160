"""One approval for a plan of effects (`Agent(approve_plan=True)`), on SQLite and Postgres.

The model proposes two effects in one answer: disable a lost laptop (policy allows it) and order
its replacement (above EUR 1,000: a person). With `approve_plan` one approval shows both before
anything is sent; the decision covers the group, stored as one grant per action hash, each used
once at its turn with its own intent, policy re-check and lever check. Each test asserts what
the two fake business systems received, not only the task's status.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select, update

from agent_jobs.core.contracts import Action
from agent_jobs.core.errors import SelfApproval
from agent_jobs.core.states import Status
from agent_jobs.ops.live import install
from agent_jobs.ops.switches import Kind, StaticSwitches, Switch, SwitchKey, SwitchSet
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.store.schema import approvals, webhook_deliveries
from agent_jobs.store.webhooks import WebhookStore
from agent_jobs.testing import AgentHarness, FakeSystem, ScriptedModel
from tests.integration.test_agent_effect_plan import planner
from tests.integration.test_agent_two_effects import DISABLE, ORDER, helpdesk, names

S = Status


def harness(store: Any) -> tuple[AgentHarness, FakeSystem, FakeSystem]:
    devices, shop = FakeSystem(), FakeSystem()
    agent = helpdesk(devices, shop)
    agent.approve_plan = True
    return AgentHarness(store, agent, ScriptedModel(rules=planner)), devices, shop


def asked(h: AgentHarness, store: Any) -> tuple[Any, list[Any]]:
    """Submit; the task parks on one approval of the whole plan, nothing sent yet."""
    task = h.submit_input({})
    assert h.settle(task.id).status is S.APPROVAL_WAIT
    group = store.approval_group(h.approval_id(task.id), "acme")
    return task, group


def sent(store: Any, task_id: str) -> list[str]:
    """The effects the task sent, in order (its tool calls in the execute scope)."""
    calls = [e.data for e in store.events(task_id) if e.type.startswith("execute_tool")]
    return [c["tool"] for c in calls if c.get("step_scope") == "execute"]


def test_one_approval_shows_the_plan_and_a_grant_sends_each_once_in_order(store: Any) -> None:
    h, devices, shop = harness(store)
    task, group = asked(h, store)
    assert (devices.applied, shop.applied) == (0, 0)  # the person sees the plan before any send
    assert names(store, task.id).count("approval_requested") == 1
    assert [(a.tool, a.status) for a in group] == [
        ("devices.disable", "pending"), ("orders.create", "pending")]  # fmt: skip
    assert {a.group_id for a in group} == {group[0].approval_id}
    assert group[1].args == {"device_id": "LT-7", "price_minor": 1500_00, "currency": "EUR"}
    assert "EUR" in group[1].reason and len({a.action_hash for a in group}) == 2
    done = h.approve(task.id)
    assert done.status is S.COMPLETED, done.outcome
    assert (devices.applied, list(devices.effects)) == (1, [DISABLE])
    assert (shop.applied, list(shop.effects)) == (1, [ORDER])
    assert sent(store, task.id) == ["devices.disable", "orders.create"]
    used = store.approval_group(group[1].approval_id, "acme")
    assert [(a.status, a.approver) for a in used] == [("used", "approver-1")] * 2
    assert names(store, task.id).count("approval_requested") == 1  # never asked again
    assert len(h.model.asked) == 2  # the plan, then the reply


def test_a_denial_of_the_group_sends_none_and_the_task_says_so(store: Any) -> None:
    h, devices, shop = harness(store)
    task, group = asked(h, store)
    # Deciding any approval of the group decides the group.
    h.orchestrator.decide_approval(group[1].approval_id, "approver-1", grant=False)
    done = h.settle(task.id)
    assert done.status is S.COMPLETED, done.outcome
    assert (devices.applied, shop.applied) == (0, 0) and sent(store, task.id) == []
    assert [a.status for a in store.approval_group(group[0].approval_id)] == ["denied"] * 2
    assert done.outcome is not None and done.outcome["effects"] == []
    assert done.outcome["declined"]["kind"] == "approval_denied"


def test_the_requester_cannot_decide_the_group(store: Any) -> None:
    h, devices, shop = harness(store)
    _, group = asked(h, store)
    for approval in group:
        with pytest.raises(SelfApproval):
            h.orchestrator.decide_approval(approval.approval_id, " Tester", grant=True)
    assert [a.status for a in store.approval_group(group[0].approval_id)] == ["pending"] * 2
    assert (devices.applied, shop.applied) == (0, 0)


def test_the_group_expires_whole(store: Any) -> None:
    h, devices, shop = harness(store)
    task, group = asked(h, store)
    _expire(h, task.id)
    done = h.settle(task.id)
    assert [a.status for a in store.approval_group(group[0].approval_id)] == ["expired"] * 2
    assert (devices.applied, shop.applied) == (0, 0)
    assert done.status is S.COMPLETED, (done.status, names(store, task.id))
    assert done.outcome is not None and done.outcome["declined"]["kind"] == "approval_expired"


def _expire(h: AgentHarness, task_id: str) -> None:
    """The group's shared expiry passes (rewritten in SQL, not slept through); the sweeper runs."""
    with h.store.tx() as conn:
        conn.execute(
            update(approvals)
            .where(approvals.c.task_id == task_id)
            .values(expires_at=datetime(2000, 1, 1, tzinfo=UTC))
        )
    for dispatch in h.store.sweep_expired_approvals(100):
        h.publisher.publish(dispatch)


def test_an_argument_changed_after_the_grant_is_not_sent_and_a_person_is_asked_again(
    store: Any,
) -> None:
    h, devices, shop = harness(store)
    decide = h.agent.decide

    def changed(inp: wf.StepInput) -> wf.StepDecision:
        """The workflow's later step proposes the order at another price than was approved."""
        d = decide(inp)
        if isinstance(d, wf.Act) and d.action.tool == "orders.create":
            args = {**d.action.args, "price_minor": 1600_00}
            return replace(d, action=Action(**{**d.action.model_dump(), "args": args}))
        return d

    h.agent.decide = changed  # type: ignore[method-assign]
    task, group = asked(h, store)
    h.approve(task.id)
    assert store.get(task.id).status is S.APPROVAL_WAIT
    assert (devices.applied, shop.applied) == (1, 0)  # the changed order was not sent
    again = store.list_approvals("acme", task_id=task.id, status="pending")
    assert [(a.tool, a.args["price_minor"], a.group_id) for a in again] == [
        ("orders.create", 1600_00, None)]  # fmt: skip
    assert store.approval(group[1].approval_id).status == "granted"  # its grant stays unused
    h.approve(task.id)  # (the scripted reply then claims the plan's price: not verified)
    assert (devices.applied, shop.applied) == (1, 1)  # sent once, as approved the second time
    assert shop.effects[ORDER]["price_minor"] == 1600_00


def test_a_lever_pulled_between_the_two_holds_the_second(store: Any) -> None:
    h, devices, shop = harness(store)
    task, group = asked(h, store)
    h.orchestrator.decide_approval(group[0].approval_id, "approver-1", grant=True)
    while "effect_committed" not in names(store, task.id):
        assert h.run_one() is not None or h.publisher.queue, "stopped before the first effect"
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
    assert (devices.applied, shop.applied) == (1, 1) and list(shop.effects) == [ORDER]


def test_a_worker_dying_between_the_two_sends_resends_neither_twice(store: Any) -> None:
    h, devices, shop = harness(store)
    task, group = asked(h, store)
    h.orchestrator.decide_approval(group[0].approval_id, "approver-1", grant=True)
    while "effect_committed" not in names(store, task.id):
        assert h.run_one() is not None or h.publisher.queue, "stopped before the first effect"
    h.crash_next_effect("before_send")
    assert h.settle(task.id).status is S.EXECUTING and (devices.applied, shop.applied) == (1, 0)
    done = h.recover(task.id)
    assert done.status is S.COMPLETED, done.outcome
    assert (devices.applied, list(devices.effects)) == (1, [DISABLE])
    assert (shop.applied, list(shop.effects)) == (1, [ORDER])
    assert [a.status for a in store.approval_group(group[0].approval_id)] == ["used"] * 2


def test_the_approval_requested_webhook_names_every_effect_of_the_plan(store: Any) -> None:
    """A receiver posting the approval to a chat sees the whole plan: each effect's approval id,
    tool, hash, amount and reason, in the plan's order, and never an argument that is not the
    amount (the redaction rule)."""
    tenant = f"plan-{uuid.uuid4().hex[:8]}"  # its own: the outbox remembers a tenant's endpoints
    WebhookStore(store.engine).create_endpoint(
        tenant, "https://hooks.example.com/x", ["approval.requested"], "", "whsec_AA"
    )
    h, _, _ = harness(store)
    task = h.submit_input({}, tenant=tenant)
    assert h.settle(task.id).status is S.APPROVAL_WAIT
    group = store.approval_group(h.approval_id(task.id), tenant)
    d = webhook_deliveries
    q = select(d.c.body).where((d.c.task_id == task.id) & (d.c.event_type == "approval.requested"))
    with store.engine.connect() as conn:
        [body] = [json.loads(b) for (b,) in conn.execute(q)]
    listed = body["data"]["group"]
    assert [(e["approval_id"], e["tool"], e["action_hash"]) for e in listed] == [
        (a.approval_id, a.tool, a.action_hash) for a in group
    ]
    assert listed[1]["price_minor"] == 1500_00 and listed[1]["currency"] == "EUR"
    assert "EUR" in listed[1]["policy_reason"]
    assert "LT-7" not in json.dumps(body)  # the device id is an argument, not an amount
