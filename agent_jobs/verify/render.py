"""The customer reply, rendered by trusted code from verified claims and ledger facts.

The model's draft text is never sent: its claims are verified, and this template turns the
verified claims into words. Status words come from the ledger ("processing" is never rendered as
"completed"), amounts and references from the facts, and the customer's name from the order
record, re-inserted here because the model only ever saw a customer reference.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from agent_jobs.core.errors import AgentJobsError
from agent_jobs.verify.claims import Claim, DuplicateCharge, NoRefund, PolicyCited, RefundSubmitted
from agent_jobs.verify.facts import VerifiedFacts
from agent_jobs.verify.redact import Customer
from agent_jobs.verify.verifier import verify_claims

SETTLEMENT_WINDOW = "5 to 7 business days"

# Fixed wording per "no refund" reason: the model's reason is a code, never text we print.
_NO_REFUND_TEXT = {
    "no_duplicate_capture": (
        "I found only one completed charge for this order; the other entry is an authorization "
        "hold, which your bank releases on its own"
    ),
    "already_refunded": "A refund for this payment has already been issued",
    "payment_not_captured": "The payment in question was never completed, so nothing was taken",
}
_NO_REFUND_DEFAULT = "I couldn't confirm a duplicate charge from our records"
_CURRENCY_SYMBOL = {"INR": "₹"}
_SAFE_NAME = re.compile(r"[^\w .'-]", re.UNICODE)
_TAG = re.compile(r"<[^>]*>")
_URL = re.compile(r"\b(?:https?://|www\.)\S*", re.IGNORECASE)


class UnverifiedClaims(AgentJobsError):
    """The renderer was handed claims that do not verify; the draft must go back for a redraft."""

    code = "unverified_claims"

    def __init__(self, failures: list[str]) -> None:
        super().__init__("claims do not verify: " + ", ".join(failures))
        self.failures = failures


def format_money(amount_minor: int, currency: str) -> str:
    """`₹2,000` for whole rupees, `₹2,000.50` otherwise; `USD 20.00` style for others."""
    major, minor = divmod(amount_minor, 100)
    symbol = _CURRENCY_SYMBOL.get(currency)
    if symbol is None:
        return f"{currency} {major:,}.{minor:02d}"
    return f"{symbol}{major:,}" if minor == 0 else f"{symbol}{major:,}.{minor:02d}"


def _greeting(customer: Customer) -> str:
    # The name comes from a record a customer can edit: strip anything that could be markup or a
    # link before it lands in a message.
    raw = _URL.sub("", _TAG.sub("", customer.name or ""))
    # A "name" holding an address is not a name; greeting without one beats leaking it.
    name = "" if "@" in raw else _SAFE_NAME.sub("", raw).strip()[:60]
    return f"Hi {name}," if name else "Hi,"


def _first(claims: Sequence[Claim], kind: type[Any]) -> Any:
    return next((c for c in claims if isinstance(c, kind)), None)


def render_reply(order: Mapping[str, Any], facts: VerifiedFacts, claims: Sequence[Claim]) -> str:
    """The reply for `order`, from claims that must verify against `facts` (else raises)."""
    verdict = verify_claims(claims, facts)
    if not verdict.ok:
        raise UnverifiedClaims(verdict.failures)
    currency = str(order.get("currency") or facts.currency or "")
    parts = [_greeting(Customer.from_order(order)), f"I checked order {order.get('order_id')}."]

    dup: DuplicateCharge | None = _first(claims, DuplicateCharge)
    refund: RefundSubmitted | None = _first(claims, RefundSubmitted)
    policy: PolicyCited | None = _first(claims, PolicyCited)
    no_refund: NoRefund | None = _first(claims, NoRefund)
    # e.g. " (POL-REF-004, version 4)": the document and version the verifier saw retrieved.
    cite = f" ({policy.doc}, version {policy.version})" if policy else ""

    if refund is not None:
        row = facts.refunds[refund.refund_id]
        amount = format_money(row.amount_minor, row.currency or currency)
        if dup is not None:
            charged = format_money(facts.payment_amounts[dup.payment_ids[0]], currency)
            parts.append(
                f"You were charged twice for {charged}, and I've submitted a refund of {amount} "
                f"for the duplicate charge (reference {row.refund_id})."
            )
        else:
            parts.append(f"I've submitted a refund of {amount} (reference {row.refund_id}).")
        if facts.refund_claim_status(row.refund_id) == "processing":
            parts.append(
                "It has been accepted and is processing, so it hasn't reached your account yet. "
                f"Under our refund policy{cite} it should appear within {SETTLEMENT_WINDOW}."
            )
        else:
            parts.append(
                "It has been completed on our side. Under our refund policy"
                f"{cite} your bank may take up to {SETTLEMENT_WINDOW} to show it."
            )
    elif no_refund is not None:
        reason = _NO_REFUND_TEXT.get(no_refund.reason, _NO_REFUND_DEFAULT)
        parts.append(f"{reason}, so I haven't issued a refund.")
        if cite:
            parts.append(f"This follows our refund policy{cite}.")
    parts.append("I'll message you if anything changes.")
    return " ".join(parts)
