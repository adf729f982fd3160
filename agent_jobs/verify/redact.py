"""Redaction before anything reaches a model: the model sees a customer reference, not a person.

The name becomes `[customer:<ref>]` and e-mail addresses become `[REDACTED:pii]`; where the reply
needs the real name, the renderer puts it back from the order record after the model is done.

Redaction masks the customer where they are *named*: personal fields, and free text (the message, a
note, a draft). It never rewrites a ledger value: a customer called "Inr Capture" must not turn
the currency `INR` or the kind `capture` into a placeholder, or policy, the model and the verifier
would read a different ledger. So values under `LEDGER_KEYS` are kept exactly, and a part of the
name that is itself a ledger value (`Customer.keep`) is not masked on its own in free text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

PII = "[REDACTED:pii]"
# Keys whose values are personal data whatever they contain (the name might be misspelt in a note,
# but a `name` field is a name).
PII_KEYS = frozenset({"name", "email", "phone", "customer_name", "customer_email", "address"})
# Keys whose values are ledger data or protocol vocabulary: amounts, currencies, ids, statuses,
# dates, tool and claim names. Kept exactly, whatever the customer is called.
LEDGER_KEYS = frozenset(
    {
        "amount_minor", "total_minor", "refunded_minor", "currency", "status", "kind",
        "created_at", "published_at", "order_id", "payment_id", "payment_ids", "refund_id",
        "refund_ids", "customer_id", "idempotency_key", "doc_id", "chunk_id", "version", "doc",
        "score", "id", "tool", "type", "step", "trust", "decision",
    }
)  # fmt: skip
# Starts only where a run of address characters starts: without the look-behind a long run with
# no `@` is rescanned from every position (quadratic; a megabyte note took minutes).
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")

_WORD = re.compile(r"[^\W_]+")

T = TypeVar("T")


@dataclass(frozen=True)
class Customer:
    """The person behind an order, as the order record names them."""

    ref: str
    name: str | None = None
    email: str | None = None
    # Words that are ledger values of this task (ids, currencies, statuses): a name part equal to
    # one is not masked on its own, so "Order 8472" survives a customer called "Asha 8472".
    keep: frozenset[str] = frozenset()

    @classmethod
    def from_order(cls, order: Mapping[str, Any]) -> Customer:
        """From `GET /orders/{id}`: `customer` is an object (`id`, `name`, `email`) or a name."""
        raw = order.get("customer")
        if isinstance(raw, Mapping):
            ref = raw.get("id") or raw.get("customer_id") or raw.get("ref") or "customer"
            name, email = raw.get("name"), raw.get("email")
            return cls(
                ref=str(ref),
                name=str(name) if name else None,
                email=str(email) if email else None,
            )
        if isinstance(raw, str) and raw.startswith("cust_"):
            return cls(ref=raw)
        return cls(ref="customer", name=raw if isinstance(raw, str) and raw else None)

    @property
    def placeholder(self) -> str:
        return f"[customer:{self.ref}]"


# One customer's pattern serves every redaction of a step (a prompt redacts each history entry
# on its own): built once per name and ledger words, not per call.
@functools.lru_cache(maxsize=256)
def _name_pattern(name: str | None, keep: frozenset[str] = frozenset()) -> re.Pattern[str] | None:
    if not name or not name.strip():
        return None
    # The full name first, then each part, so "Asha" alone in a note is caught too.
    kept = {k.casefold() for k in keep}
    parts = [
        p
        for p in [name.strip(), *(p for p in re.split(r"\s+", name.strip()) if len(p) >= 2)]
        if p.casefold() not in kept
    ]
    if not parts:
        return None
    alternatives = "|".join(re.escape(p) for p in sorted(set(parts), key=len, reverse=True))
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)


def _redact_text(text: str, customer: Customer, names: re.Pattern[str] | None) -> str:
    if customer.email:
        text = re.sub(re.escape(customer.email), PII, text, flags=re.IGNORECASE)
    text = _EMAIL.sub(PII, text)
    if names is not None:
        text = names.sub(customer.placeholder, text)
    return text


def _is_ledger_value(value: Any) -> bool:
    scalar = (str, int, float, bool, type(None))
    if isinstance(value, scalar):
        return True
    return isinstance(value, list | tuple) and all(isinstance(v, scalar) for v in value)


def _walk(value: Any, customer: Customer, names: re.Pattern[str] | None) -> Any:
    if isinstance(value, str):
        return _redact_text(value, customer, names)
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            key = k.lower() if isinstance(k, str) else ""
            if key in PII_KEYS and isinstance(v, str):
                out[k] = customer.placeholder if key in ("name", "customer_name") else PII
            elif key in LEDGER_KEYS and _is_ledger_value(v):
                out[k] = v
            else:
                out[k] = _walk(v, customer, names)
        return out
    if isinstance(value, list | tuple):
        return type(value)(_walk(v, customer, names) for v in value)
    return value


def ledger_words(value: Any) -> frozenset[str]:
    """The ledger values found under `LEDGER_KEYS` in `value`, and the words in them: what a name
    part must not mask in free text (see `Customer.keep`)."""
    found: set[str] = set()

    def add(v: Any) -> None:
        if isinstance(v, str | int) and not isinstance(v, bool):
            text = str(v)
            found.add(text)
            found.update(_WORD.findall(text))

    def walk(v: Any) -> None:
        if isinstance(v, Mapping):
            for k, item in v.items():
                if isinstance(k, str) and k.lower() in LEDGER_KEYS:
                    for one in item if isinstance(item, list | tuple) else [item]:
                        add(one)
                walk(item)
        elif isinstance(v, list | tuple):
            for item in v:
                walk(item)

    walk(value)
    return frozenset(found)


def redact(value: T, customer: Customer) -> T:
    """A copy of `value` (text, or nested dicts and lists) with the customer's PII replaced."""
    return cast(T, _walk(value, customer, _name_pattern(customer.name, customer.keep)))
