"""Claims: what a draft reply asserts, in a form code can check against the ledger.

The model drafts a reply *and* lists its claims; only claims that verify may shape what the
customer reads, and the reply itself is rendered from them by trusted code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, TypeAdapter

from agent_jobs.core.contracts import Frozen


class DuplicateCharge(Frozen):
    """The customer was charged more than once: these payment ids are captures of one order."""

    type: Literal["duplicate_charge"] = "duplicate_charge"
    payment_ids: list[str] = Field(min_length=1)


class RefundSubmitted(Frozen):
    """A refund exists with this id, amount and status."""

    type: Literal["refund_submitted"] = "refund_submitted"
    refund_id: str
    amount_minor: int
    status: Literal["processing", "settled"]


class PolicyCited(Frozen):
    """The reply cites this policy document at this version."""

    type: Literal["policy_cited"] = "policy_cited"
    doc: str
    version: int


class NoRefund(Frozen):
    """No refund was made; `reason` is a code such as `no_duplicate_capture`."""

    type: Literal["no_refund"] = "no_refund"
    reason: str = Field(min_length=1, max_length=64)


Claim = Annotated[
    DuplicateCharge | RefundSubmitted | PolicyCited | NoRefund, Field(discriminator="type")
]

_CLAIMS: TypeAdapter[list[Claim]] = TypeAdapter(list[Claim])


def parse_claims(raw: Iterable[Mapping[str, Any]]) -> list[Claim]:
    """Validate model-produced claims (raises `pydantic.ValidationError` on a malformed one)."""
    return _CLAIMS.validate_python([dict(c) for c in raw])
