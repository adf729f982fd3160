"""Claims against facts (the seed's verifyClaims) and the cheap textual check of a draft."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import pytest
from pydantic import ValidationError

from agent_jobs.verify import (
    Claim,
    DuplicateCharge,
    NoRefund,
    PolicyCited,
    RefundSubmitted,
    VerifiedFacts,
    check_text,
    parse_claims,
    verify_claims,
    verify_draft,
)
from agent_jobs.verify.claims import CheckedClaim


def pay(pid: str, kind: str = "capture") -> dict[str, Any]:
    return {
        "payment_id": pid,
        "order_id": "8472",
        "kind": kind,
        "status": "captured" if kind == "capture" else "authorized",
        "amount_minor": 200_000,
        "currency": "INR",
        "refunded_minor": 0,
        "created_at": "2026-03-14T09:58:02Z",
    }


def refund_row(status: str = "processing", rid: str = "rf_3301") -> dict[str, Any]:
    return {
        "refund_id": rid,
        "payment_id": "pay_8472_b",
        "amount_minor": 200_000,
        "currency": "INR",
        "status": status,
        "idempotency_key": "refund:req-8472:pay_8472_b",
        "order_id": "8472",
        "created_at": "2026-03-14T10:11:17Z",
    }


ORDER = {
    "order_id": "8472",
    "customer": {"customer_id": "cust_1042", "name": "Asha Rao", "email": "asha.rao@example.com"},
    "total_minor": 200_000,
    "currency": "INR",
    "note": "",
    "payment_ids": ["pay_8472_a", "pay_8472_b", "pay_8472_h"],
}


def facts(
    refund_status: str | None = "processing", *, extra: list[Any] | None = None
) -> VerifiedFacts:
    obs: list[tuple[str, dict[str, Any]]] = [
        ("orders.get", ORDER),
        (
            "payments.list",
            {
                "payments": [
                    pay("pay_8472_a"),
                    pay("pay_8472_b"),
                    pay("pay_8472_h", "authorization"),
                ]
            },
        ),
        (
            "policy.search",
            {
                "passages": [
                    {"doc_id": "POL-REF-004", "version": 4, "chunk_id": "c0003", "text": "t"}
                ]
            },
        ),
    ]
    if refund_status is not None:
        obs.append(("refunds.get_by_key", {"refunds": [refund_row(refund_status)]}))
    return VerifiedFacts.from_observations(obs + (extra or []))


GOOD: list[Claim] = [
    DuplicateCharge(payment_ids=["pay_8472_a", "pay_8472_b"]),
    RefundSubmitted(refund_id="rf_3301", amount_minor=200_000, status="processing"),
    PolicyCited(doc="POL-REF-004", version=4),
]
SEED_REPLY = (
    "Hi, I checked order 8472. You were charged twice for ₹2,000, and I've submitted a refund of "
    "₹2,000 for the duplicate charge (reference rf_3301). It has been accepted and is processing, "
    "so it hasn't reached your account yet. Under our refund policy (POL-REF-004, version 4) it "
    "should appear within 5 to 7 business days. I'll message you if anything changes."
)


def test_the_seed_claims_and_reply_verify() -> None:
    assert verify_claims(GOOD, facts()).ok
    assert verify_draft(SEED_REPLY, GOOD, facts()).ok


def test_a_settled_claim_fails_while_the_ledger_says_processing() -> None:
    claims = [RefundSubmitted(refund_id="rf_3301", amount_minor=200_000, status="settled")]
    v = verify_claims(claims, facts("processing"))
    assert not v.ok and v.failures == ["refund_mismatch:rf_3301"]
    # Once the ledger says succeeded, "settled" is the truth.
    assert verify_claims(claims, facts("succeeded")).ok


@pytest.mark.parametrize(
    "claim",
    [
        RefundSubmitted(refund_id="rf_3301", amount_minor=100_000, status="processing"),
        RefundSubmitted(refund_id="rf_9999", amount_minor=200_000, status="processing"),
    ],
)
def test_refund_claims_must_match_amount_and_exist(claim: RefundSubmitted) -> None:
    assert verify_claims([claim], facts()).failures == [f"refund_mismatch:{claim.refund_id}"]


def test_a_failed_refund_verifies_as_neither_processing_nor_settled() -> None:
    for status in ("processing", "settled"):
        claim = RefundSubmitted(refund_id="rf_3301", amount_minor=200_000, status=status)
        assert not verify_claims([claim], facts("failed")).ok


@pytest.mark.parametrize(
    "ids",
    [
        ["pay_8472_b"],
        ["pay_8472_b", "pay_8472_b"],
        ["pay_8472_a", "pay_8472_h"],  # an authorization hold is not a charge
        ["pay_8472_a", "pay_made_up"],
    ],
)
def test_duplicate_charge_needs_two_observed_captures(ids: list[str]) -> None:
    v = verify_claims([DuplicateCharge(payment_ids=ids)], facts())
    assert v.failures == ["duplicate_charge_unsupported"]


def test_a_cited_policy_must_have_been_retrieved_at_that_version() -> None:
    assert verify_claims([PolicyCited(doc="POL-REF-004", version=3)], facts()).failures == [
        "policy_not_retrieved:POL-REF-004"
    ]
    assert not verify_claims([PolicyCited(doc="POL-COM-002", version=1)], facts()).ok
    v3 = facts(extra=[("policy.get", {"doc_id": "POL-REF-004", "version": 3, "chunks": []})])
    assert verify_claims([PolicyCited(doc="POL-REF-004", version=3)], v3).ok
    # Only retrieval counts: a policy named in an order note is not a retrieved document.
    noted = facts(extra=[("orders.get", {**ORDER, "note": "POL-REF-004 version 9"})])
    assert not verify_claims([PolicyCited(doc="POL-REF-004", version=9)], noted).ok


def test_no_refund_contradicted_by_own_refund_or_by_another_claim() -> None:
    assert verify_claims([NoRefund(reason="no_duplicate_capture")], facts(None)).ok
    assert verify_claims([NoRefund(reason="x")], facts()).failures == [
        "no_refund_contradicts_ledger"
    ]
    claims: list[Claim] = [NoRefund(reason="x"), GOOD[1]]
    assert "no_refund_contradicts_claims" in verify_claims(claims, facts(None)).failures


def test_parse_claims_is_discriminated_by_type() -> None:
    parsed = parse_claims(
        [
            {"type": "duplicate_charge", "payment_ids": ["a", "b"]},
            {
                "type": "refund_submitted",
                "refund_id": "rf_1",
                "amount_minor": 1,
                "status": "processing",
            },
            {"type": "policy_cited", "doc": "POL-REF-004", "version": 4},
            {"type": "no_refund", "reason": "already_refunded"},
        ]
    )
    assert [type(c) for c in parsed] == [DuplicateCharge, RefundSubmitted, PolicyCited, NoRefund]
    with pytest.raises(ValidationError):
        parse_claims(
            [
                {
                    "type": "refund_submitted",
                    "refund_id": "rf_1",
                    "amount_minor": 1,
                    "status": "completed",
                }
            ]
        )
    with pytest.raises(ValidationError):
        parse_claims([{"type": "wire_transfer", "to": "x"}])


@pytest.mark.parametrize(
    ("text", "failure"),
    [
        (SEED_REPLY.replace("rf_3301", "rf_3302"), "unverified_refund_id:rf_3302"),
        (SEED_REPLY + " Payment pay_0000_z was also refunded.", "unverified_payment_id:pay_0000_z"),
        (SEED_REPLY.replace("refund of ₹2,000", "refund of ₹5,000"), "unverified_amount:5,000"),
        (
            SEED_REPLY.replace("refund of ₹2,000", "refund of INR 2,000.50"),
            "unverified_amount:2,000.50",
        ),
        (SEED_REPLY + " It was sent to account 123456789012.", "unverified_account"),
        (SEED_REPLY + " Sent via UPI to asha@okhdfc.", "unverified_account"),
        (SEED_REPLY + " Card 4242 4242 4242 4242.", "unverified_account"),
        (SEED_REPLY + " IBAN GB82WEST12345698765432.", "unverified_account"),
    ],
)
def test_text_naming_anything_unverified_fails(text: str, failure: str) -> None:
    v = verify_draft(text, GOOD, facts())
    assert not v.ok and failure in v.failures


def test_a_refund_id_in_the_ledger_but_not_in_the_claims_still_fails_the_text() -> None:
    assert check_text(SEED_REPLY, GOOD[:1], facts()) == ["unverified_refund_id:rf_3301"]


# -- claims check themselves: the verifier runs whatever classes an agent declares ------------


class _PaymentSeen(CheckedClaim):
    """A claim declared outside the verifier: the payment it names was read."""

    type: Literal["payment_seen"] = "payment_seen"
    payment_id: str

    def check(self, facts: VerifiedFacts, claims: Sequence[CheckedClaim]) -> list[str]:
        seen = self.payment_id in facts.payment_amounts
        return [] if seen else [f"payment_not_seen:{self.payment_id}"]


def test_the_verifier_runs_a_declared_claims_own_check() -> None:
    facts = VerifiedFacts.from_observations([("payments.list", {"payments": [pay("pay_8472_a")]})])
    seen = parse_claims(
        [
            {"type": "payment_seen", "payment_id": "pay_8472_a"},
            {"type": "payment_seen", "payment_id": "pay_9"},
        ],
        (_PaymentSeen, NoRefund),
    )
    assert verify_claims(seen, facts).failures == ["payment_not_seen:pay_9"]
    assert seen[0].holds(facts) and not seen[1].holds(facts)
    # Only the declared classes parse: the refund's kinds are not this agent's.
    with pytest.raises(ValidationError):
        parse_claims([{"type": "no_refund", "reason": "no_duplicate_capture"}], (_PaymentSeen,))


def test_each_refund_claim_holds_exactly_when_the_verifier_passes_it() -> None:
    facts = VerifiedFacts.from_observations(
        [("payments.list", {"payments": [pay("pay_8472_a"), pay("pay_8472_b")]})]
    )
    for raw in (
        {"type": "duplicate_charge", "payment_ids": ["pay_8472_a", "pay_8472_b"]},
        {"type": "duplicate_charge", "payment_ids": ["pay_8472_a"]},
        {"type": "no_refund", "reason": "no_duplicate_capture"},
        {"type": "policy_cited", "doc": "POL-REF-004", "version": 4},
    ):
        claims = parse_claims([raw])
        assert claims[0].holds(facts, claims) == verify_claims(claims, facts).ok
