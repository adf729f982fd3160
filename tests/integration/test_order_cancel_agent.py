"""The example order-cancellation agent (examples/order_cancel), written on `agent_jobs.agents`,
run by the real orchestrator over a real store (SQLite and Postgres) with `AgentHarness`: the
scripted model, the example's orders service, and workers that die between two steps."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from agent_jobs.core.contracts import Action
from agent_jobs.core.states import Status
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.store.schema import tasks
from agent_jobs.testing import AgentHarness, ScriptedModel, final_draft, tool_calls
from examples.order_cancel.agent import agent
from examples.order_cancel.model import scripted_model
from examples.order_cancel.orders import DB_ENV, Orders, orders

S = Status


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Orders]:
    monkeypatch.setenv(DB_ENV, str(tmp_path / "orders.sqlite3"))
    yield orders()


def harness(store: Any, model: ScriptedModel | None = None) -> AgentHarness:
    return AgentHarness(store, agent, model or ScriptedModel(rules=scripted_model))


def names(store: Any, task_id: str) -> list[str]:
    return [e.type for e in store.events(task_id)]


def cancel(order_id: str = "A-200", reason: str = "ordered twice") -> dict[str, str]:
    return {"order_id": order_id, "reason": reason}


def test_an_order_under_the_threshold_is_cancelled_and_the_reply_verified(
    store: Any, shop: Orders
) -> None:
    h = harness(store)
    task = h.submit_input(cancel("A-100"))
    done = h.settle(task.id)
    assert done.status is S.COMPLETED, done.outcome
    assert done.outcome is not None
    assert done.outcome["claims"] == [
        {"type": "order_cancelled", "order_id": "A-100", "refunded_minor": 4900}
    ]
    assert shop.cancel_calls() == 1 and len(shop.cancellations()) == 1
    seen = names(store, task.id)
    # Reads, the intent before the effect, usage and audit as events.
    assert seen.index("execute_tool orders.get") < seen.index("intent_recorded")
    assert seen.index("intent_recorded") < seen.index("execute_tool orders.cancel")
    assert seen.count("chat") == 3 and "approval_requested" not in seen


def test_above_100_a_person_approves_the_exact_action_and_execute_gets_the_grant(
    store: Any, shop: Orders
) -> None:
    h = harness(store)
    task = h.submit_input(cancel("A-200"))
    waiting = h.settle(task.id)
    assert waiting.status is S.APPROVAL_WAIT and shop.cancel_calls() == 0
    approval_id = h.approval_id(task.id)
    approval = store.approval(approval_id)
    pending = Action.model_validate(store.get(task.id).state["runtime"]["pending_action"])
    assert approval.action_hash == pending.action_hash
    assert pending.args == {"order_id": "A-200", "amount_minor": 25000, "currency": "EUR"}
    done = h.approve(task.id, "lead-7")
    assert done.status is S.COMPLETED
    # The stamp the executor checked came from execute's typed input: the grant and policy.
    (sent,) = [e for e in store.events(task.id) if e.type == "execute_tool orders.cancel"]
    assert sent.data["approval_id"] == approval_id
    assert sent.data["policy_version"] == "ORDER-CANCEL@1"
    assert shop.cancel_calls() == 1


def test_a_grant_does_not_cover_a_changed_amount(store: Any, shop: Orders) -> None:
    h = harness(store)
    task = h.submit_input(cancel("A-200"))
    h.settle(task.id)
    # The action waiting for its grant changes (a smaller amount) after the person saw it.
    state = store.get(task.id).state
    state["runtime"]["pending_action"]["args"]["amount_minor"] = 100
    with store.tx() as conn:
        conn.execute(update(tasks).where(tasks.c.id == task.id).values(state=state))
    h.orchestrator.decide_approval(h.approval_id(task.id), "lead-7", grant=True)
    h.run_until_idle()
    assert "approval_invalid" in names(store, task.id)
    assert shop.cancel_calls() == 0


def test_execute_refuses_arguments_that_are_not_the_decided_action(
    store: Any, shop: Orders
) -> None:
    harness(store)  # the agent's services
    decided = Action(
        tool="orders.cancel",
        tool_version=agent.tools.get("orders.cancel").version,  # type: ignore[union-attr]
        args={"order_id": "A-200", "amount_minor": 25000, "currency": "EUR"},
        idempotency_key="cancel:acme:A-200",
    )
    changed = decided.model_copy(update={"args": {**decided.args, "amount_minor": 24999}})
    inp = wf.StepInput(
        task_id="t1", tenant_id="acme", workflow="order_cancel@1", requester="r",
        idempotency_key="k", input={}, state={"request_id": "k"}, pinned={}, attempts=0,
        trace_id="tr", cancel_requested=False, emit=lambda _n, _d: None,
        decision=wf.EffectDecision(decided.action_hash, "ORDER-CANCEL@1", "apr_1"),
    )  # fmt: skip
    outcome = agent.execute(inp, changed)
    assert outcome == wf.EffectRejected(
        "action_hash_mismatch", "arguments differ from the action the policy decision was made on"
    )
    assert agent.execute(_without_decision(inp), decided) == wf.EffectRejected(
        "no_recorded_decision", "no policy decision was recorded"
    )
    assert shop.cancel_calls() == 0


def _without_decision(inp: wf.StepInput) -> wf.StepInput:
    from dataclasses import replace

    return replace(inp, decision=None)


def test_a_timeout_after_the_cancel_is_reconciled_by_key_without_a_second_cancel(
    store: Any, shop: Orders
) -> None:
    shop.arm("timeout_after_commit")
    h = harness(store)
    done = h.settle(h.submit_input(cancel("A-100")).id)
    assert done.status is S.COMPLETED, done.outcome
    seen = names(store, done.id)
    assert "effect_unknown" in seen and "reconciled_found" in seen
    assert done.outcome is not None and done.outcome["effects"][0]["reconciled"] is True
    assert shop.cancel_calls() == 1 and len(shop.cancellations()) == 1


@pytest.mark.parametrize("when", ["before_send", "after_send"])
def test_a_worker_dying_between_intent_and_outcome_is_recovered_once(
    store: Any, shop: Orders, when: str
) -> None:
    h = harness(store)
    h.crash_next_effect(when)
    task = h.submit_input(cancel("A-100"))
    stuck = h.settle(task.id, max_rounds=1)
    assert stuck.status is S.EXECUTING and len(h.crashes) == 1
    done = h.recover(task.id)
    assert done.status is S.COMPLETED, done.outcome
    assert len(shop.cancellations()) == 1
    # Sent once in all: found by key after it applied, sent again only when nothing was found.
    assert shop.cancel_calls() == 1
    found = "reconciled_found" if when == "after_send" else "retry_same_key"
    assert found in names(store, task.id)


def test_policy_denies_a_shipped_order_and_the_model_is_told(store: Any, shop: Orders) -> None:
    model = ScriptedModel(
        [
            tool_calls("orders.get", order_id="A-300"),
            tool_calls("orders.cancel", order_id="A-300", amount_minor=1500, currency="EUR"),
            final_draft("Order A-300 has shipped.", {"type": "not_cancelled", "order_id": "A-300"}),
        ]
    )
    h = harness(store, model)
    done = h.settle(h.submit_input(cancel("A-300")).id)
    assert done.status is S.COMPLETED
    (denied,) = [e for e in store.events(done.id) if e.type == "policy_denied"]
    assert denied.data["reason"] == "order_shipped"
    assert shop.cancel_calls() == 0
    told = [m.content for m in model.asked[-1].messages if m.role == "user"]
    assert any("Policy denied orders.cancel: order_shipped" in t for t in told)


def test_a_cancel_for_another_amount_than_the_orders_is_denied(store: Any, shop: Orders) -> None:
    model = ScriptedModel(
        [
            tool_calls("orders.get", order_id="A-100"),
            tool_calls("orders.cancel", order_id="A-100", amount_minor=99, currency="EUR"),
            final_draft("Not cancelled.", {"type": "not_cancelled", "order_id": "A-100"}),
        ]
    )
    h = harness(store, model)
    done = h.settle(h.submit_input(cancel("A-100")).id)
    denied = [e.data["reason"] for e in store.events(done.id) if e.type == "policy_denied"]
    assert denied == ["amount_is_not_the_order_total"] and shop.cancel_calls() == 0


def test_a_reply_claiming_what_did_not_happen_is_never_completed(store: Any, shop: Orders) -> None:
    lie = {"type": "order_cancelled", "order_id": "A-300", "refunded_minor": 1500}
    model = ScriptedModel(
        [tool_calls("orders.get", order_id="A-300"), final_draft("Cancelled!", lie)]
    )
    h = harness(store, model)
    done = h.settle(h.submit_input(cancel("A-300")).id)
    assert done.status is S.ESCALATED
    seen = names(store, done.id)
    assert "redraft_requested" in seen or seen.count("draft_ready") == 2
    assert "failed verification" in str(done.outcome)


def test_a_person_denying_the_cancel_is_told_to_the_model_and_nothing_is_cancelled(
    store: Any, shop: Orders
) -> None:
    h = harness(store)
    task = h.submit_input(cancel("A-200"))
    h.settle(task.id)
    done = h.approve(task.id, "lead-7", grant=False)
    assert done.status is S.COMPLETED, done.outcome
    assert done.outcome is not None
    assert done.outcome["claims"] == [{"type": "not_cancelled", "order_id": "A-200"}]
    assert shop.cancel_calls() == 0 and shop.get("A-200")["status"] == "open"


def test_the_operators_autonomy_lever_sends_an_allowed_cancel_to_a_person(
    store: Any, shop: Orders
) -> None:
    from datetime import UTC, datetime

    from agent_jobs.ops.live import install
    from agent_jobs.ops.switches import Kind, StaticSwitches, Switch, SwitchKey, SwitchSet

    at = datetime(2026, 3, 14, tzinfo=UTC)
    lever = Switch(SwitchKey(Kind("autonomy_threshold"), ""), 0, "oncall", "INC-9", at)
    previous = install(StaticSwitches(SwitchSet.of([lever])))
    try:
        h = harness(store)
        task = h.submit_input(cancel("A-100"))  # EUR 49.00: the policy alone allows it
        assert h.settle(task.id).status is S.APPROVAL_WAIT
    finally:
        install(previous)
    (asked,) = [e for e in store.events(task.id) if e.type == "approval_requested"]
    assert asked.data["reason"] == "operator autonomy cap 0" and shop.cancel_calls() == 0


def test_a_reply_about_another_order_than_the_one_asked_is_not_verified(
    store: Any, shop: Orders
) -> None:
    other = {"type": "not_cancelled", "order_id": "A-999"}
    h = harness(store, ScriptedModel([final_draft("A-999 was not cancelled.", other)]))
    done = h.settle(h.submit_input(cancel("A-100")).id)
    assert done.status is S.ESCALATED and shop.cancel_calls() == 0
