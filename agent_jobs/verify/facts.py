"""Verified facts: what tools observed, in the shape the verifier and the renderer need.

Built from `(tool name, result)` observations of the systems of record and the policy store. The
ledger part reuses the policy's parsing, so policy and verifier can never read the same response
two different ways.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from agent_jobs.policy.facts import LedgerFacts

# Ledger refund statuses as the customer-facing claim vocabulary. Anything else (failed, unknown)
# maps to nothing, so no claim about it can verify.
REFUND_STATUS = {
    "pending": "processing",
    "processing": "processing",
    "settled": "settled",
    "succeeded": "settled",
    "completed": "settled",
}

# Tools whose refund rows are this task's own effect (created, or found by its key).
_OWN_REFUND_TOOLS = frozenset({"refunds.create", "refunds.get_by_key"})
_POLICY_TOOLS = frozenset({"policy.get", "policy.search"})


class VerifiedRefund(BaseModel):
    model_config = ConfigDict(frozen=True)

    refund_id: str
    payment_id: str
    amount_minor: int
    currency: str
    status: str


class VerifiedFacts(BaseModel):
    """Captures, payments, refunds and retrieved policy documents, as observed."""

    model_config = ConfigDict(frozen=True)

    order_id: str | None = None
    order_total_minor: int | None = None
    currency: str | None = None
    captures: frozenset[str] = frozenset()
    payment_amounts: dict[str, int] = {}
    refunds: dict[str, VerifiedRefund] = {}
    own_refund_ids: frozenset[str] = frozenset()
    policy_docs: frozenset[tuple[str, int]] = frozenset()
    # Every id the systems of record stated (order, payments, refunds, the customer's reference):
    # a reply may quote them whatever their shape (`402-1234567-1234567` is an order, not a bank
    # account).
    ids: frozenset[str] = frozenset()

    @classmethod
    def from_observations(
        cls, observations: Iterable[tuple[str, Mapping[str, Any]]]
    ) -> VerifiedFacts:
        """Build from tool observations; other tools are ignored, a malformed ledger row raises."""
        obs = list(observations)
        ledger = LedgerFacts.from_observations(obs)
        own: set[str] = set()
        docs: set[tuple[str, int]] = set()
        ids: set[str] = {p.payment_id for p in ledger.payments}
        ids.update(r.refund_id for r in ledger.refunds)
        if ledger.order is not None:
            ids.add(ledger.order.order_id)
            ids.update(ledger.order.payment_ids)
        for tool, result in obs:
            if tool in _OWN_REFUND_TOOLS:
                rows = result.get("refunds", [result])
                own.update(str(r["refund_id"]) for r in rows if "refund_id" in r)
            elif tool in _POLICY_TOOLS:
                docs.update(_policy_docs(result))
        return cls(
            order_id=ledger.order.order_id if ledger.order else None,
            order_total_minor=ledger.order_total_minor,
            currency=ledger.order.currency if ledger.order else None,
            captures=frozenset(p.payment_id for p in ledger.payments if p.was_captured),
            payment_amounts={p.payment_id: p.amount_minor for p in ledger.payments},
            refunds={
                r.refund_id: VerifiedRefund(
                    refund_id=r.refund_id,
                    payment_id=r.payment_id,
                    amount_minor=r.amount_minor,
                    currency=r.currency,
                    status=r.status,
                )
                for r in ledger.refunds
            },
            own_refund_ids=frozenset(own),
            policy_docs=frozenset(docs),
            ids=frozenset(i for i in ids | own if i),
        )

    def refund_claim_status(self, refund_id: str) -> str | None:
        """The ledger status in claim vocabulary (`processing` / `settled`), or None."""
        r = self.refunds.get(refund_id)
        return REFUND_STATUS.get(r.status) if r else None

    def known_amounts(self) -> set[int]:
        """Every amount the systems of record stated; a reply may mention only these."""
        amounts = set(self.payment_amounts.values())
        amounts.update(r.amount_minor for r in self.refunds.values())
        if self.order_total_minor is not None:
            amounts.add(self.order_total_minor)
        return amounts


def _version(value: Any) -> int | None:
    text = str(value).strip().lower().removeprefix("v")
    return int(text) if text.isdigit() else None


def _policy_docs(result: Mapping[str, Any]) -> set[tuple[str, int]]:
    """`(doc id, version)` pairs from a policy document or a search result list."""
    rows: list[Any] = [result]
    for key in ("results", "passages", "hits", "documents"):
        value = result.get(key)
        if isinstance(value, list):
            rows.extend(value)
    found: set[tuple[str, int]] = set()
    for row in rows:
        if not isinstance(row, Mapping):
            continue
        doc = row.get("doc_id") or row.get("doc") or row.get("id")
        version = _version(row.get("version", row.get("doc_version")))
        if isinstance(doc, str) and doc and version is not None:
            # A passage id such as `POL-REF-004#c0003` cites its document.
            found.add((doc.split("#", 1)[0], version))
    return found
