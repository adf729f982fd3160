"""POL-REF-004: refunds of duplicate captures, as versioned, deterministic bundles.

Every check reads the ledger facts, never the model's account of them. The order of the checks is
the order of the seed's `evaluate`, so the reason given is the most basic one that applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from agent_jobs.policy.decisions import (
    Allow,
    Deny,
    NeedsApproval,
    ProposedCall,
    allow,
    deny,
    needs_approval,
)
from agent_jobs.policy.facts import LedgerFacts

REFUND_TOOL = "refunds.create"
REFUND_TOOL_VERSIONS = frozenset({"2"})

# Stable deny reasons: the model sees them as an observation and re-plans; tests name them.
UNKNOWN_TOOL = "unknown_tool"
INVALID_ARGS = "invalid_args"
PAYMENT_NOT_CAPTURED = "payment_not_captured"
PAYMENT_NOT_IN_ORDER = "payment_not_in_order"
NO_DUPLICATE_CAPTURE = "no_duplicate_capture"
CURRENCY_MISMATCH = "currency_mismatch"
ALREADY_REFUNDED = "already_refunded"
EXCEEDS_REFUNDABLE = "exceeds_refundable"
# Needs-approval reason: the bundle has no threshold in the refund's currency, so it cannot say the
# amount is small. Comparing USD 500 (50,000 cents) with an INR threshold would auto-allow it.
CURRENCY_NOT_COVERED = "currency_not_covered"


def _int_arg(args: Mapping[str, Any], name: str) -> int | None:
    value = args.get(name)
    # bool is an int in Python; `True` is not an amount.
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _str_arg(args: Mapping[str, Any], name: str) -> str | None:
    value = args.get(name)
    return value if isinstance(value, str) and value else None


def ledger_denial(args: Mapping[str, Any], facts: LedgerFacts) -> str | None:
    """The first POL-REF-004 check the proposed refund fails on the ledger facts, or None.
    Shared with the refund agent's declaration (`workflows/refund/agent.py`), whose
    `agents.Policy` rule runs these same checks."""
    payment_id = _str_arg(args, "payment_id")
    amount = _int_arg(args, "amount_minor")
    currency = _str_arg(args, "currency")
    # The executor validates the schema too, but policy runs first and must not trust shape.
    if payment_id is None or amount is None or amount <= 0 or currency is None:
        return INVALID_ARGS
    pay = facts.payment(payment_id)
    if pay is None or not pay.was_captured:
        return PAYMENT_NOT_CAPTURED
    # A payment id lifted from an injected note may belong to another order.
    if facts.order is not None and pay.order_id != facts.order.order_id:
        return PAYMENT_NOT_IN_ORDER
    if not facts.duplicate_capture_confirmed(payment_id):
        return NO_DUPLICATE_CAPTURE
    if currency != pay.currency:
        return CURRENCY_MISMATCH
    # The policy refunds a duplicate once, in full; anything already refunded goes to a human.
    if facts.refunded_minor(payment_id) > 0:
        return ALREADY_REFUNDED
    if amount > facts.refundable_minor(payment_id):
        return EXCEEDS_REFUNDABLE
    return None


class RefundPolicy:
    """Shared rules of POL-REF-004; subclasses fix the version and the approval threshold."""

    version: str = ""
    # Approval thresholds in minor units, per currency. Money is compared only in its own
    # currency: a refund in a currency not listed always goes to a person.
    approval_thresholds_minor: ClassVar[Mapping[str, int]] = {}
    approval_ttl_s: int = 1800

    def evaluate(
        self, call: ProposedCall, facts: LedgerFacts, *, autonomy_minor: int | None = None
    ) -> Allow | Deny | NeedsApproval:
        """Deny, require approval, or allow one proposed `refunds.create` call."""
        if call.tool != REFUND_TOOL or call.tool_version not in REFUND_TOOL_VERSIONS:
            return deny(UNKNOWN_TOOL)
        reason = ledger_denial(call.args, facts)
        if reason is not None:
            return deny(reason)
        # ledger_denial checked both: an integer amount > 0 and a currency.
        amount = int(call.args["amount_minor"])
        currency = str(call.args["currency"])

        threshold = self.approval_thresholds_minor.get(currency)
        if threshold is None:
            return needs_approval(CURRENCY_NOT_COVERED, ttl_s=self.approval_ttl_s)
        # The operator's autonomy threshold (seed: `auto_execute_under_minor`), 0 in an incident:
        # only a lower bar than the bundle's, never a higher one. The caller reads the switch.
        autonomy = autonomy_minor
        if autonomy is not None and amount >= autonomy:
            reason = f"operator autonomy threshold: >= {autonomy} minor units"
            return needs_approval(reason, ttl_s=self.approval_ttl_s)
        if amount >= threshold:
            label = f"{currency} {threshold // 100:,}"
            return needs_approval(f"{self.version}: >= {label}", ttl_s=self.approval_ttl_s)
        return allow()


class RefundPolicyV4(RefundPolicy):
    """POL-REF-004@4: approval at or above INR 1,000 (100,000 paise), grants live 30 minutes."""

    version = "POL-REF-004@4"
    approval_thresholds_minor: ClassVar[Mapping[str, int]] = {"INR": 100_000}
    approval_ttl_s = 1800


class RefundPolicyV3(RefundPolicy):
    """POL-REF-004@3, superseded: approval at or above INR 1,500. Kept to replay old decisions."""

    version = "POL-REF-004@3"
    approval_thresholds_minor: ClassVar[Mapping[str, int]] = {"INR": 150_000}
    approval_ttl_s = 1800
