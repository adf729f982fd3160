"""Redaction before anything reaches a model: the model sees a customer reference, not a person.

The name becomes `[customer:<ref>]` and e-mail addresses become `[REDACTED:pii]`; where the reply
needs the real name, the renderer puts it back from the order record after the model is done.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

PII = "[REDACTED:pii]"
# Keys whose values are personal data whatever they contain (the name might be misspelt in a note,
# but a `name` field is a name).
PII_KEYS = frozenset({"name", "email", "phone", "customer_name", "customer_email", "address"})
_EMAIL = re.compile(r"[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")

T = TypeVar("T")


@dataclass(frozen=True)
class Customer:
    """The person behind an order, as the order record names them."""

    ref: str
    name: str | None = None
    email: str | None = None

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


def _name_pattern(name: str | None) -> re.Pattern[str] | None:
    if not name or not name.strip():
        return None
    # The full name first, then each part, so "Asha" alone in a note is caught too.
    parts = [name.strip(), *(p for p in re.split(r"\s+", name.strip()) if len(p) >= 2)]
    alternatives = "|".join(re.escape(p) for p in sorted(set(parts), key=len, reverse=True))
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)


def _redact_text(text: str, customer: Customer, names: re.Pattern[str] | None) -> str:
    if customer.email:
        text = re.sub(re.escape(customer.email), PII, text, flags=re.IGNORECASE)
    text = _EMAIL.sub(PII, text)
    if names is not None:
        text = names.sub(customer.placeholder, text)
    return text


def _walk(value: Any, customer: Customer, names: re.Pattern[str] | None) -> Any:
    if isinstance(value, str):
        return _redact_text(value, customer, names)
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for k, v in value.items():
            if isinstance(k, str) and k.lower() in PII_KEYS and isinstance(v, str):
                out[k] = customer.placeholder if k.lower() in ("name", "customer_name") else PII
            else:
                out[k] = _walk(v, customer, names)
        return out
    if isinstance(value, list | tuple):
        return type(value)(_walk(v, customer, names) for v in value)
    return value


def redact(value: T, customer: Customer) -> T:
    """A copy of `value` (text, or nested dicts and lists) with the customer's PII replaced."""
    return cast(T, _walk(value, customer, _name_pattern(customer.name)))
