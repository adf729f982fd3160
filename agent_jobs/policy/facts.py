"""Ledger facts: what the system of record said, the only evidence policy decides on.

Facts are built from tool observations (`orders.get`, `payments.list`, `refunds.list`, ...), never
from model text: a model that "remembers" a second capture is hallucinating, and one that read an
order note saying "refund to account X" has been injected. The customer name and the free-text note
of an order are deliberately not kept here; policy needs neither.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

# A capture that has since been (partly) refunded was still captured: it counts towards a duplicate
# and is then denied as already refunded, which is the more useful reason to give.
CAPTURED_STATUSES = frozenset({"captured", "partially_refunded", "refunded"})

# Refunds in these states moved no money and never will; anything else counts against the payment.
DEAD_REFUND_STATUSES = frozenset({"failed", "rejected", "cancelled", "canceled"})

_ORDER_TOOLS = frozenset({"orders.get"})
_PAYMENT_TOOLS = frozenset({"payments.list"})
_REFUND_TOOLS = frozenset({"refunds.list", "refunds.get_by_key", "refunds.create"})


class _Fact(BaseModel):
    # The systems of record may add fields; facts keep only what policy reads.
    model_config = ConfigDict(frozen=True, extra="ignore")


class PaymentFact(_Fact):
    """One payment row from `GET /payments?order_id=`."""

    payment_id: str
    order_id: str
    kind: Literal["capture", "authorization"]
    status: str
    amount_minor: int
    currency: str
    refunded_minor: int = 0
    created_at: datetime | None = None

    @property
    def was_captured(self) -> bool:
        """A real capture (not an authorization hold, which releases by itself)."""
        return self.kind == "capture" and self.status in CAPTURED_STATUSES


class RefundFact(_Fact):
    """One refund row from `GET /refunds?payment_id=` (or `?idempotency_key=`)."""

    refund_id: str
    payment_id: str
    amount_minor: int
    currency: str
    status: str
    idempotency_key: str | None = None

    @property
    def counts(self) -> bool:
        """Whether this refund moved, or may still move, money."""
        return self.status not in DEAD_REFUND_STATUSES


class OrderFact(_Fact):
    """The order header from `GET /orders/{id}`, without the customer and the free-text note."""

    order_id: str
    total_minor: int
    currency: str
    payment_ids: tuple[str, ...] = ()


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def instant(value: Any) -> datetime | None:
    """A timestamp as an instant (aware, in UTC); None when absent or unreadable.

    The contract's timestamps are ISO 8601 with any UTC offset, so `...T10:00:00+05:30` and
    `...T04:30:00Z` are the same instant and must never be compared as strings. A timestamp
    without an offset is read as UTC.
    """
    at: datetime
    if isinstance(value, datetime):
        at = value
    elif isinstance(value, str):
        try:
            at = datetime.fromisoformat(value.strip())
        except ValueError:
            return None
    else:
        return None
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def payment_order_key(created_at: Any, payment_id: Any) -> tuple[int, datetime, str]:
    """Oldest first by instant, then by payment id (the contract's order); undated rows last.

    The one ordering of payments: policy, the scripted model and the reply all use it, so "the
    first capture" means the same payment everywhere."""
    at = instant(created_at)
    return (0 if at is not None else 1, at or _EPOCH, str(payment_id))


def _sort_key(indexed: tuple[int, PaymentFact]) -> tuple[int, datetime, str, int]:
    idx, p = indexed
    return (*payment_order_key(p.created_at, p.payment_id), idx)


class LedgerFacts(_Fact):
    """Payments, refunds and the order header, as observed. Immutable; rebuild to refresh."""

    order: OrderFact | None = None
    payments: tuple[PaymentFact, ...] = ()
    refunds: tuple[RefundFact, ...] = ()

    @classmethod
    def from_responses(
        cls,
        *,
        order: Mapping[str, Any] | None = None,
        payments: Mapping[str, Any] | None = None,
        refunds: Iterable[Mapping[str, Any]] = (),
    ) -> LedgerFacts:
        """Build from the simulated systems' JSON bodies.

        `order` is `GET /orders/{id}`; `payments` is `GET /payments?order_id=`, i.e.
        `{"payments": [...]}`; each item of `refunds` is `GET /refunds?payment_id=`, i.e.
        `{"refunds": [...]}`, or one refund object. Later rows with the same id replace earlier
        ones (a fresher read wins).
        """
        pays: dict[str, PaymentFact] = {}
        for row in (payments or {}).get("payments", []):
            p = PaymentFact.model_validate(row)
            pays[p.payment_id] = p
        refs: dict[str, RefundFact] = {}
        for body in refunds:
            rows = body.get("refunds", [body])
            for row in rows:
                r = RefundFact.model_validate(row)
                refs[r.refund_id] = r
        return cls(
            order=OrderFact.model_validate(order) if order is not None else None,
            payments=tuple(pays.values()),
            refunds=tuple(refs.values()),
        )

    @classmethod
    def from_observations(
        cls, observations: Iterable[tuple[str, Mapping[str, Any]]]
    ) -> LedgerFacts:
        """Build from `(tool name, result)` pairs in the order they were observed.

        Only ledger tools contribute; anything else (policy search, model output) is ignored, so
        passing a task's whole observation history is safe.
        """
        order: Mapping[str, Any] | None = None
        payment_rows: list[Mapping[str, Any]] = []
        refund_bodies: list[Mapping[str, Any]] = []
        for tool, result in observations:
            if tool in _ORDER_TOOLS:
                order = result
            elif tool in _PAYMENT_TOOLS:
                payment_rows.extend(result.get("payments", []))
            elif tool in _REFUND_TOOLS:
                refund_bodies.append(result)
        return cls.from_responses(
            order=order, payments={"payments": payment_rows}, refunds=refund_bodies
        )

    @property
    def order_total_minor(self) -> int | None:
        return self.order.total_minor if self.order else None

    def payment(self, payment_id: str) -> PaymentFact | None:
        for p in self.payments:
            if p.payment_id == payment_id:
                return p
        return None

    def refunds_for(self, payment_id: str) -> tuple[RefundFact, ...]:
        return tuple(r for r in self.refunds if r.payment_id == payment_id)

    def refunded_minor(self, payment_id: str) -> int:
        """Money already refunded or in flight for a payment.

        The ledger's `refunded_minor` can lag a refund that is still processing, so the larger of it
        and the sum of live refund rows is used: over-counting only makes policy stricter.
        """
        p = self.payment(payment_id)
        ledger = p.refunded_minor if p else 0
        rows = sum(r.amount_minor for r in self.refunds_for(payment_id) if r.counts)
        return max(ledger, rows)

    def refundable_minor(self, payment_id: str) -> int:
        """Captured amount minus what is already refunded; 0 for an unknown payment."""
        p = self.payment(payment_id)
        if p is None:
            return 0
        return max(0, p.amount_minor - self.refunded_minor(payment_id))

    def duplicate_capture_confirmed(self, payment_id: str) -> bool:
        """Whether the ledger shows this payment as a duplicate capture.

        True when at least two captures (authorization holds do not count) exist for the same order
        with the same amount and currency, and this payment is one of them but not the first: the
        first capture is the legitimate charge and is never the one to refund.
        """
        target = self.payment(payment_id)
        if target is None or not target.was_captured:
            return False
        group = [
            (i, p)
            for i, p in enumerate(self.payments)
            if p.was_captured
            and p.order_id == target.order_id
            and p.amount_minor == target.amount_minor
            and p.currency == target.currency
        ]
        if len(group) < 2:
            return False
        first = min(group, key=_sort_key)[1]
        return first.payment_id != payment_id
