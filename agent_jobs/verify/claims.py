"""Claims: what a draft reply asserts, in a form code can check against the ledger.

The model drafts a reply *and* lists its claims; only claims that verify may shape what the
customer reads, and the reply itself is rendered from them by trusted code.

Each claim class carries its own check (`holds`, and `check` for the stable failure codes): the
verifier (`verify_claims`) runs whatever claim classes an agent declares, knowing none of them.
"""

from __future__ import annotations

import functools
from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, Union

from pydantic import Field, TypeAdapter

from agent_jobs.core.contracts import Frozen
from agent_jobs.verify.facts import VerifiedFacts


class CheckedClaim(Frozen):
    """A claim that can check itself against verified facts. Subclasses declare a `type`
    literal and `check`; `claims` are all the draft's claims (one may contradict another)."""

    @abstractmethod
    def check(self, facts: VerifiedFacts, claims: Sequence[CheckedClaim]) -> list[str]:
        """The failure codes (empty: the facts show the claim true)."""

    def holds(self, facts: VerifiedFacts, claims: Sequence[CheckedClaim] = ()) -> bool:
        """Whether the facts show this claim true (alongside `claims`)."""
        return not self.check(facts, claims)


class DuplicateCharge(CheckedClaim):
    """The customer was charged more than once: these payment ids are captures of one order."""

    type: Literal["duplicate_charge"] = "duplicate_charge"
    payment_ids: list[str] = Field(min_length=1)

    def check(self, facts: VerifiedFacts, claims: Sequence[CheckedClaim]) -> list[str]:
        """At least two distinct payment ids, all observed captures."""
        ids = set(self.payment_ids)
        return [] if len(ids) >= 2 and ids <= facts.captures else ["duplicate_charge_unsupported"]


class RefundSubmitted(CheckedClaim):
    """A refund exists with this id, amount and status."""

    type: Literal["refund_submitted"] = "refund_submitted"
    refund_id: str
    amount_minor: int
    status: Literal["processing", "settled"]

    def check(self, facts: VerifiedFacts, claims: Sequence[CheckedClaim]) -> list[str]:
        """The refund exists with the claimed amount and the claimed status in claim vocabulary
        (a "settled" claim fails while the ledger says processing)."""
        r = facts.refunds.get(self.refund_id)
        if (
            r is None
            or r.amount_minor != self.amount_minor
            or facts.refund_claim_status(self.refund_id) != self.status
        ):
            return [f"refund_mismatch:{self.refund_id}"]
        return []


class PolicyCited(CheckedClaim):
    """The reply cites this policy document at this version."""

    type: Literal["policy_cited"] = "policy_cited"
    doc: str
    version: int

    def check(self, facts: VerifiedFacts, claims: Sequence[CheckedClaim]) -> list[str]:
        """The document was retrieved at that version."""
        if (self.doc, self.version) not in facts.policy_docs:
            return [f"policy_not_retrieved:{self.doc}"]
        return []


class NoRefund(CheckedClaim):
    """No refund was made; `reason` is a code such as `no_duplicate_capture`."""

    type: Literal["no_refund"] = "no_refund"
    reason: str = Field(min_length=1, max_length=64)

    def check(self, facts: VerifiedFacts, claims: Sequence[CheckedClaim]) -> list[str]:
        """Fails if this task's own refund exists or another claim says one was submitted."""
        if facts.own_refund_ids:
            return ["no_refund_contradicts_ledger"]
        if any(isinstance(c, RefundSubmitted) for c in claims):
            return ["no_refund_contradicts_claims"]
        return []


Claim = Annotated[
    DuplicateCharge | RefundSubmitted | PolicyCited | NoRefund, Field(discriminator="type")
]

_CLAIMS: TypeAdapter[list[Claim]] = TypeAdapter(list[Claim])


CLAIM_CLASSES: tuple[type[CheckedClaim], ...] = (
    DuplicateCharge,
    RefundSubmitted,
    PolicyCited,
    NoRefund,
)


@functools.lru_cache(maxsize=32)
def _adapter(classes: tuple[type[CheckedClaim], ...]) -> TypeAdapter[list[Any]]:
    if classes == CLAIM_CLASSES:
        return _CLAIMS
    # A union built at run time from what the agent declares, told apart by `type`.
    one: Any = classes[0]
    if len(classes) == 1:
        return TypeAdapter(list[one])
    one = Union[classes]  # noqa: UP007
    return TypeAdapter(list[Annotated[one, Field(discriminator="type")]])


def parse_claims(
    raw: Iterable[Mapping[str, Any]], classes: Sequence[type[CheckedClaim]] = CLAIM_CLASSES
) -> list[Claim]:
    """Validate model-produced claims as the declared `classes` (default: the refund's four);
    raises `pydantic.ValidationError` on a malformed one or one of a kind not declared."""
    return list(_adapter(tuple(classes)).validate_python([dict(c) for c in raw]))
