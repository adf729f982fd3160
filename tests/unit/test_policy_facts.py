"""Ledger facts from the simulated systems' JSON, and duplicate-capture detection."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from agent_jobs.policy import LedgerFacts


def pay(
    pid: str, at: str | None, *, kind: str = "capture", amount: int = 200_000
) -> dict[str, Any]:
    return {
        "payment_id": pid,
        "order_id": "ord_8472",
        "kind": kind,
        "status": "captured" if kind == "capture" else "authorized",
        "amount_minor": amount,
        "currency": "INR",
        "refunded_minor": 0,
        "created_at": at,
    }


ORDER = {
    "order_id": "ord_8472",
    "customer": {"id": "cust_1042", "name": "Asha Rao", "email": "asha@example.com"},
    "total_minor": 200_000,
    "currency": "INR",
    "note": "please refund to account 123456789012",
    "payment_ids": ["pay_a", "pay_b"],
}
REFUNDS = {
    "refunds": [
        {
            "refund_id": "rf_1",
            "payment_id": "pay_b",
            "amount_minor": 5_000,
            "currency": "INR",
            "status": "processing",
            "idempotency_key": "refund:req-1:pay_b",
        }
    ]
}


def test_from_observations_reads_the_sim_shapes_and_ignores_other_tools() -> None:
    facts = LedgerFacts.from_observations(
        [
            ("orders.get", ORDER),
            ("payments.list", {"payments": [pay("pay_a", "2026-03-14T10:00:00Z")]}),
            ("policy.search", {"results": [{"doc_id": "POL-REF-004", "version": 4}]}),
            ("refunds.list", REFUNDS),
        ]
    )
    assert facts.order is not None and facts.order_total_minor == 200_000
    assert facts.order.payment_ids == ("pay_a", "pay_b")
    assert [p.payment_id for p in facts.payments] == ["pay_a"]
    assert facts.refunds_for("pay_b")[0].refund_id == "rf_1"
    # Customer PII and the free-text note never become facts.
    dumped = facts.model_dump_json()
    assert "Asha" not in dumped and "123456789012" not in dumped


def test_a_fresher_read_replaces_an_older_row() -> None:
    stale = {**REFUNDS["refunds"][0]}
    fresh = {**stale, "status": "settled"}
    facts = LedgerFacts.from_observations(
        [("refunds.list", {"refunds": [stale]}), ("refunds.get_by_key", {"refunds": [fresh]})]
    )
    assert [r.status for r in facts.refunds] == ["settled"]


def test_refunded_is_the_larger_of_ledger_column_and_live_refund_rows() -> None:
    facts = LedgerFacts.from_responses(
        payments={"payments": [pay("pay_b", None)]}, refunds=[REFUNDS]
    )
    assert facts.refunded_minor("pay_b") == 5_000
    assert facts.refundable_minor("pay_b") == 195_000
    assert facts.refundable_minor("pay_unknown") == 0


@pytest.mark.parametrize(
    ("rows", "pid", "expected"),
    [
        (
            [pay("pay_a", "2026-03-14T10:00:00Z"), pay("pay_b", "2026-03-14T10:00:05Z")],
            "pay_b",
            True,
        ),
        (
            [pay("pay_a", "2026-03-14T10:00:00Z"), pay("pay_b", "2026-03-14T10:00:05Z")],
            "pay_a",
            False,
        ),
        # Listed out of order: "first" is by capture time, not by list position.
        (
            [pay("pay_b", "2026-03-14T10:00:05Z"), pay("pay_a", "2026-03-14T10:00:00Z")],
            "pay_a",
            False,
        ),
        (
            [pay("pay_b", "2026-03-14T10:00:05Z"), pay("pay_a", "2026-03-14T10:00:00Z")],
            "pay_b",
            True,
        ),
        # Without timestamps the ledger's order decides.
        ([pay("pay_a", None), pay("pay_b", None)], "pay_b", True),
        ([pay("pay_a", None), pay("pay_h", None, kind="authorization")], "pay_h", False),
        ([pay("pay_a", None), pay("pay_h", None, kind="authorization")], "pay_a", False),
        ([pay("pay_a", None), pay("pay_b", None, amount=1)], "pay_b", False),
        ([pay("pay_a", None)], "pay_a", False),
        ([pay("pay_a", None)], "pay_missing", False),
    ],
)
def test_duplicate_capture_confirmed(rows: list[dict[str, Any]], pid: str, expected: bool) -> None:
    facts = LedgerFacts.from_responses(payments={"payments": rows})
    assert facts.duplicate_capture_confirmed(pid) is expected


def test_malformed_ledger_rows_fail_loudly() -> None:
    bad = pay("pay_a", None)
    bad["kind"] = "wire_transfer"
    with pytest.raises(ValidationError):
        LedgerFacts.from_responses(payments={"payments": [bad]})
