"""The sim's records and request bodies, validated strictly at the HTTP boundary.

Strict pydantic models give the contract's `invalid_body` rule for free: a missing field, an unknown
field or a wrong type (`true` or `"100"` where an integer belongs) is rejected, never coerced.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

Json = dict[str, Any]

OPERATIONS = (
    "orders.get",
    "payments.list",
    "refunds.create",
    "refunds.get_by_key",
    "refunds.list",
    "refunds.get",
    "policies.get",
    "policies.search",
)
"""Business operations: the ones a fault can target. Admin routes are never faulted."""

Operation = Literal[
    "orders.get",
    "payments.list",
    "refunds.create",
    "refunds.get_by_key",
    "refunds.list",
    "refunds.get",
    "policies.get",
    "policies.search",
]
FaultKind = Literal[
    "drop_after_commit", "delay", "error_before_commit", "error_after_commit", "throttle"
]
# Faults that refuse before doing anything, and so may say when to come back.
RETRY_AFTER_FAULTS = ("throttle", "error_before_commit")
PaymentKind = Literal["capture", "authorization"]
PaymentStatus = Literal["captured", "authorized", "voided"]
RefundStatus = Literal["processing", "succeeded", "failed"]

MAX_DELAY_S = 60.0


def _check_timestamp(value: str) -> str:
    # Kept as the original string so a loaded world dumps back byte-for-byte, but it must parse:
    # consumers compare these, and a typo would only surface far from its cause.
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("must be an ISO 8601 timestamp, e.g. 2026-03-14T09:58:02Z") from None
    if parsed.tzinfo is None:
        raise ValueError("must carry a UTC offset, e.g. a trailing Z")
    return value


Id = Annotated[str, Field(min_length=1, max_length=255)]
Currency = Annotated[str, Field(pattern=r"^[A-Z]{3}$")]
Timestamp = Annotated[str, AfterValidator(_check_timestamp)]


class Record(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class Customer(Record):
    customer_id: Id
    name: str
    email: str


class Order(Record):
    order_id: Id
    customer: Customer
    total_minor: Annotated[int, Field(ge=0)]
    currency: Currency
    note: str = ""


class Payment(Record):
    payment_id: Id
    order_id: Id
    kind: PaymentKind
    status: PaymentStatus
    amount_minor: Annotated[int, Field(gt=0)]
    currency: Currency
    created_at: Timestamp

    @property
    def refundable(self) -> bool:
        """Only money actually taken can be given back; a hold is released, not refunded."""
        return self.kind == "capture" and self.status == "captured"


class Refund(Record):
    refund_id: Id
    payment_id: Id
    amount_minor: Annotated[int, Field(gt=0)]
    currency: Currency
    status: RefundStatus
    reason: str | None = None
    idempotency_key: Id
    created_at: Timestamp

    @property
    def counts(self) -> bool:
        """A failed refund returned nothing: it neither blocks another nor uses up the payment."""
        return self.status != "failed"


class PolicyChunk(Record):
    chunk_id: Id
    text: str


class PolicyVersion(Record):
    doc_id: Id
    version: Annotated[int, Field(gt=0)]
    title: str
    published_at: Timestamp
    chunks: list[PolicyChunk]


class WorldData(Record):
    """A whole world: the body of `PUT /admin/world` and `GET /admin/world`, and the state file."""

    orders: list[Order] = []
    payments: list[Payment] = []
    refunds: list[Refund] = []
    policies: list[PolicyVersion] = []
    next_refund_seq: Annotated[int, Field(gt=0)] = 1

    @model_validator(mode="after")
    def _consistent(self) -> WorldData:
        _unique("order_id", [o.order_id for o in self.orders])
        _unique("payment_id", [p.payment_id for p in self.payments])
        _unique("refund_id", [r.refund_id for r in self.refunds])
        _unique("idempotency_key", [r.idempotency_key for r in self.refunds])
        _unique("policy doc_id@version", [f"{p.doc_id}@{p.version}" for p in self.policies])
        orders = {o.order_id for o in self.orders}
        for p in self.payments:
            if p.order_id not in orders:
                raise ValueError(f"payment {p.payment_id} names unknown order {p.order_id}")
        payments = {p.payment_id for p in self.payments}
        for r in self.refunds:
            if r.payment_id not in payments:
                raise ValueError(f"refund {r.refund_id} names unknown payment {r.payment_id}")
        return self


def _unique(what: str, values: list[str]) -> None:
    seen: set[str] = set()
    for v in values:
        if v in seen:
            raise ValueError(f"duplicate {what} {v!r}")
        seen.add(v)


class RefundRequest(Record):
    """The body of `POST /refunds`. No destination field, deliberately: money only goes back."""

    payment_id: Id
    amount_minor: Annotated[int, Field(gt=0)]
    currency: Currency
    reason: Annotated[str, Field(max_length=1000)] | None = None


class FaultRequest(Record):
    """The body of `POST /admin/faults`."""

    operation: Operation
    fault: FaultKind
    times: Annotated[int, Field(ge=1, le=1000)] = 1
    delay_s: Annotated[float, Field(gt=0, le=MAX_DELAY_S)] | None = None
    # Sent verbatim as the `Retry-After` header, so a test can send a number, a date or garbage.
    retry_after: Annotated[str, Field(pattern=r"^[\x20-\x7e]{1,128}$")] | None = None

    @model_validator(mode="after")
    def _options_match_kind(self) -> FaultRequest:
        # Rejecting the mismatch catches a test that meant `delay` but armed something else.
        if self.fault == "delay" and self.delay_s is None:
            raise ValueError("fault 'delay' needs delay_s")
        if self.fault != "delay" and self.delay_s is not None:
            raise ValueError("delay_s is only valid with fault 'delay'")
        if self.retry_after is not None and self.fault not in RETRY_AFTER_FAULTS:
            raise ValueError("retry_after is only valid with 'throttle' or 'error_before_commit'")
        return self


def describe(error: ValidationError) -> str:
    """One line naming each bad field, for the `message` of an `invalid_body` error."""
    parts = []
    for e in error.errors()[:5]:
        where = ".".join(str(x) for x in e["loc"]) or "body"
        parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)
