"""The scripted model's rules: deterministic proposals over facts, in the PROPOSAL_V3 shape."""

from __future__ import annotations

from typing import Any

import pytest

from agent_jobs.gateway import PROPOSAL_V3, Message, ModelRequest
from agent_jobs.gateway.schemas import validation_errors
from agent_jobs.sim import worlds
from agent_jobs.workflows.refund import Behaviour, RefundRules
from agent_jobs.workflows.refund.rules import duplicate_group


def _payments(world: dict[str, Any]) -> list[dict[str, Any]]:
    refunded: dict[str, int] = {}
    for r in world["refunds"]:
        refunded[r["payment_id"]] = refunded.get(r["payment_id"], 0) + r["amount_minor"]
    return [{**p, "refunded_minor": refunded.get(p["payment_id"], 0)} for p in world["payments"]]


def facts(world: dict[str, Any], **extra: Any) -> dict[str, Any]:
    order = world["orders"][0]
    return {
        "message": f"Order {order['order_id']} was charged twice.",
        "order_id": None,
        "order": order,
        "payments": _payments(world),
        "refunds": [],
        "policy": [{"doc_id": "POL-REF-004", "version": 4, "chunk_id": "c0002"}],
        "denials": [],
        "decision": None,
        "refund": None,
        "verify_failures": [],
        "redrafts": 0,
        "customer": "[customer:cus_1]",
        **extra,
    }


def ask(step: str, f: dict[str, Any], **behaviour: Any) -> dict[str, Any]:
    request = ModelRequest(
        tenant_id="acme",
        task_id="t1",
        step_type=step,
        messages=[Message(role="user", content="x")],
        facts=f,
    )
    proposal = RefundRules(Behaviour(**behaviour))(request)
    assert validation_errors(PROPOSAL_V3, proposal) == []  # exactly a model's answer shape
    return proposal


def test_investigate_proposes_both_reads_for_the_order_in_the_message() -> None:
    p = ask("investigate", facts(worlds.incident_8472()))
    assert p["kind"] == "tool_calls"
    assert p["calls"] == [
        {"tool": "orders.get", "args": {"order_id": "8472"}},
        {"tool": "payments.list", "args": {"order_id": "8472"}},
    ]


def test_investigate_without_an_order_reference_proposes_nothing() -> None:
    f = facts(worlds.incident_8472(), message="I was charged twice!")
    assert ask("investigate", f) == {"kind": "no_action", "reason": "order_not_identified"}


def test_policy_step_searches_the_refund_policy() -> None:
    p = ask("retrieve_policy", facts(worlds.incident_8472()))
    [call] = p["calls"]
    assert call["tool"] == "policy.search" and call["args"]["doc_id"] == "POL-REF-004"


def test_duplicate_capture_refunds_the_later_capture() -> None:
    p = ask("decide", facts(worlds.incident_8472()))
    assert p["calls"] == [
        {
            "tool": "refunds.create",
            "args": {"payment_id": "pay_8472_b", "amount_minor": 200_000, "currency": "INR"},
        }
    ]


@pytest.mark.parametrize(
    ("world", "reason"),
    [
        (worlds.auth_hold_lookalike, "no_duplicate_capture"),
        (worlds.single_capture, "no_duplicate_capture"),
        (worlds.already_refunded, "already_refunded"),
    ],
)
def test_no_refund_when_the_ledger_does_not_show_an_open_duplicate(world: Any, reason: str) -> None:
    assert ask("decide", facts(world())) == {"kind": "no_action", "reason": reason}


def test_a_refund_seen_in_refunds_list_counts_as_refunded() -> None:
    world = worlds.incident_8472()
    row = {"payment_id": "pay_8472_b", "amount_minor": 200_000, "status": "processing"}
    assert ask("decide", facts(world, refunds=[row]))["reason"] == "already_refunded"


def test_asking_the_order_total_then_replanning_on_the_denial() -> None:
    f = facts(worlds.amount_above_captured())
    first = ask("decide", f, ask_order_total=True)
    assert first["calls"][0]["args"]["amount_minor"] == 200_000
    denied = [{"reason": "exceeds_refundable", "args": first["calls"][0]["args"]}]
    second = ask("decide", {**f, "denials": denied}, ask_order_total=True)
    assert second["calls"][0]["args"]["amount_minor"] == 150_000
    again = [*denied, {"reason": "exceeds_refundable", "args": second["calls"][0]["args"]}]
    assert ask("decide", {**f, "denials": again})["kind"] == "no_action"  # never loops


def test_any_other_denial_ends_in_no_refund_with_its_reason() -> None:
    f = facts(worlds.incident_8472(), denials=[{"reason": "already_refunded", "args": {}}])
    assert ask("decide", f) == {"kind": "no_action", "reason": "already_refunded"}


def test_injection_following_and_looping_behaviours() -> None:
    f = facts(worlds.malicious_note())
    amount = ask("decide", f, follow_injection="amount")["calls"][0]["args"]
    assert amount["amount_minor"] == 10 * 200_000
    dest = ask("decide", f, follow_injection="destination")["calls"][0]["args"]
    assert dest["destination_account"] == "99120044"
    # The honest rules read the note as data and refund the duplicate only.
    assert ask("decide", f)["calls"][0]["args"]["amount_minor"] == 200_000
    hold = facts(worlds.auth_hold_lookalike(), denials=[{"reason": "payment_not_captured"}] * 3)
    looped = ask("decide", hold, loop=True)
    assert looped["calls"][0]["args"]["payment_id"] == "pay_9101_b"


def _refund_facts(**extra: Any) -> dict[str, Any]:
    refund = {
        "refund_id": "rf_3301",
        "payment_id": "pay_8472_b",
        "amount_minor": 200_000,
        "currency": "INR",
        "status": "processing",
    }
    return facts(worlds.incident_8472(), refund=refund, decision={"kind": "refund"}, **extra)


def test_draft_claims_what_the_ledger_shows() -> None:
    draft = ask("draft_reply", _refund_facts())["draft"]
    assert draft["claims"] == [
        {"type": "duplicate_charge", "payment_ids": ["pay_8472_a", "pay_8472_b"]},
        {"type": "refund_submitted", "refund_id": "rf_3301", "amount_minor": 200_000,
         "status": "processing"},
        {"type": "policy_cited", "doc": "POL-REF-004", "version": 4},
    ]  # fmt: skip
    assert "[customer:cus_1]" in draft["text"] and "processing" in draft["text"]


def test_bad_draft_once_overclaims_only_on_the_first_draft() -> None:
    first = ask("draft_reply", _refund_facts(), bad_draft="once")["draft"]
    assert first["claims"][1]["status"] == "settled"
    second = ask("draft_reply", _refund_facts(redrafts=1), bad_draft="once")["draft"]
    assert second["claims"][1]["status"] == "processing"
    always = ask("draft_reply", _refund_facts(redrafts=1), bad_draft="always")["draft"]
    assert always["claims"][1]["status"] == "settled"


def test_no_refund_draft_and_its_bad_variant() -> None:
    f = facts(
        worlds.auth_hold_lookalike(),
        decision={"kind": "no_refund", "reason": "no_duplicate_capture"},
    )
    good = ask("draft_reply", f)["draft"]
    assert {"type": "no_refund", "reason": "no_duplicate_capture"} in good["claims"]
    bad = ask("draft_reply", f, bad_draft="once")["draft"]
    assert bad["claims"][0] == {
        "type": "duplicate_charge",
        "payment_ids": ["pay_9101_a", "pay_9101_b"],
    }


def test_duplicate_group_ignores_holds_and_orders_by_time() -> None:
    group = duplicate_group(_payments(worlds.incident_8472())[::-1])
    assert [p["payment_id"] for p in group] == ["pay_8472_a", "pay_8472_b"]
    assert duplicate_group(_payments(worlds.auth_hold_lookalike())) == []
