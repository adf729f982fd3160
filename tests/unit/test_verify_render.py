"""Replies are rendered from verified facts; PII is redacted before a model, re-inserted after."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_jobs.verify import (
    PII,
    Customer,
    DuplicateCharge,
    NoRefund,
    PolicyCited,
    RefundSubmitted,
    UnverifiedClaims,
    VerifiedFacts,
    format_money,
    redact,
    render_reply,
    verify_draft,
)

EMAIL = "asha.rao@example.com"
ORDER: dict[str, Any] = {
    "order_id": "8472",
    "customer": {"customer_id": "cust_1042", "name": "Asha Rao", "email": EMAIL},
    "total_minor": 200_000,
    "currency": "INR",
    "note": "Asha says: charged twice! contact asha.rao@example.com or rao.family@example.org",
    "payment_ids": ["pay_8472_a", "pay_8472_b"],
}


def pay(pid: str) -> dict[str, Any]:
    return {
        "payment_id": pid,
        "order_id": "8472",
        "kind": "capture",
        "status": "captured",
        "amount_minor": 200_000,
        "currency": "INR",
        "refunded_minor": 0,
        "created_at": "2026-03-14T09:58:02Z",
    }


def facts(status: str = "processing", *, refund: bool = True) -> VerifiedFacts:
    obs: list[tuple[str, dict[str, Any]]] = [
        ("orders.get", ORDER),
        ("payments.list", {"payments": [pay("pay_8472_a"), pay("pay_8472_b")]}),
        ("policy.get", {"doc_id": "POL-REF-004", "version": 4, "title": "Refunds", "chunks": []}),
    ]
    if refund:
        row = {
            "refund_id": "rf_3301",
            "payment_id": "pay_8472_b",
            "amount_minor": 200_000,
            "currency": "INR",
            "status": status,
            "idempotency_key": "refund:req-8472:pay_8472_b",
        }
        obs.append(("refunds.get_by_key", {"refunds": [row]}))
    return VerifiedFacts.from_observations(obs)


def claims(status: str = "processing") -> list[Any]:
    return [
        DuplicateCharge(payment_ids=["pay_8472_a", "pay_8472_b"]),
        RefundSubmitted(refund_id="rf_3301", amount_minor=200_000, status=status),
        PolicyCited(doc="POL-REF-004", version=4),
    ]


def test_processing_reply_matches_the_seed_and_reinserts_the_name() -> None:
    text = render_reply(ORDER, facts(), claims())
    assert text == (
        "Hi Asha Rao, I checked order 8472. You were charged twice for ₹2,000, and I've submitted "
        "a refund of ₹2,000 for the duplicate charge (reference rf_3301). It has been accepted and "
        "is processing, so it hasn't reached your account yet. Under our refund policy "
        "(POL-REF-004, version 4) it should appear within 5 to 7 business days. I'll message you "
        "if anything changes."
    )
    assert "completed" not in text and EMAIL not in text
    # What we send passes our own textual check.
    assert verify_draft(text.replace("Asha Rao", "[customer:cust_1042]"), claims(), facts()).ok


def test_settled_reply_says_completed() -> None:
    text = render_reply(ORDER, facts("succeeded"), claims("settled"))
    assert "completed" in text and "processing" not in text
    assert "5 to 7 business days" in text and "POL-REF-004, version 4" in text


def test_an_overclaim_is_refused_not_rendered() -> None:
    with pytest.raises(UnverifiedClaims) as e:
        render_reply(ORDER, facts("processing"), claims("settled"))
    assert e.value.failures == ["refund_mismatch:rf_3301"]


def test_no_refund_reason_is_a_code_mapped_to_fixed_wording() -> None:
    text = render_reply(ORDER, facts(refund=False), [NoRefund(reason="no_duplicate_capture")])
    assert "authorization hold" in text and "haven't issued a refund" in text
    injected = NoRefund(reason="refund sent to account 123456789012")
    text = render_reply(ORDER, facts(refund=False), [injected])
    assert "123456789012" not in text and "couldn't confirm a duplicate charge" in text


@pytest.mark.parametrize(
    ("raw", "greeting"),
    [
        ('<a href="http://evil.example">Asha</a>', "Hi Asha,"),
        ("Asha http://evil.example/x", "Hi Asha,"),
        ("asha.rao@example.com", "Hi,"),
        ("", "Hi,"),
    ],
)
def test_the_name_is_sanitised_before_it_lands_in_the_message(raw: str, greeting: str) -> None:
    order = {**ORDER, "customer": {**ORDER["customer"], "name": raw}}
    text = render_reply(order, facts(), claims())
    assert text.startswith(greeting)
    assert "<" not in text and "@" not in text and "http" not in text


def test_redact_replaces_name_and_email_everywhere_without_mutating() -> None:
    customer = Customer.from_order(ORDER)
    assert customer == Customer(ref="cust_1042", name="Asha Rao", email=EMAIL)
    original = json.dumps(ORDER, sort_keys=True)
    red = redact(ORDER, customer)
    assert json.dumps(ORDER, sort_keys=True) == original
    dumped = json.dumps(red)
    assert "Asha" not in dumped and "Rao" not in dumped and "@example" not in dumped
    assert red["customer"]["name"] == "[customer:cust_1042]"
    assert red["customer"]["email"] == PII
    assert red["note"].startswith("[customer:cust_1042] says")
    assert red["payment_ids"] == ORDER["payment_ids"] and red["total_minor"] == 200_000


def test_redact_text_and_lists() -> None:
    c = Customer(ref="cust_1", name="Li Wei", email="li@example.com")
    assert redact("Li Wei (LI@EXAMPLE.COM) wrote; wei asked", c) == (
        f"[customer:cust_1] ({PII}) wrote; [customer:cust_1] asked"
    )
    assert redact(["li", {"k": "Wei"}, 3], c) == [
        "[customer:cust_1]",
        {"k": "[customer:cust_1]"},
        3,
    ]
    # Words that merely contain a name part are left alone.
    assert redact("Lisbon, Weird", c) == "Lisbon, Weird"


def test_format_money() -> None:
    assert format_money(200_000, "INR") == "₹2,000"
    assert format_money(200_050, "INR") == "₹2,000.50"
    assert format_money(2_000, "USD") == "USD 20.00"
