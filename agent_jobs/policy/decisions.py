"""What a policy bundle decides, about what, and the bundle port itself.

A decision is data so that it can be checkpointed with the task, shown to an approver and replayed
in an audit; it is never an exception, because "deny" is an ordinary answer the model re-plans on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol

from pydantic import Field

from agent_jobs.core.contracts import Action, Frozen
from agent_jobs.core.hashing import action_hash

if TYPE_CHECKING:
    from agent_jobs.policy.facts import LedgerFacts


class ProposedCall(Frozen):
    """A tool call the model proposed, before anything has decided on it."""

    tool: str
    tool_version: str
    args: dict[str, Any]

    @classmethod
    def from_action(cls, action: Action) -> ProposedCall:
        """The policy-relevant part of a core `Action` (the idempotency key is not policy)."""
        return cls(tool=action.tool, tool_version=action.tool_version, args=dict(action.args))

    @property
    def action_hash(self) -> str:
        """What an approval of this exact call binds to."""
        return action_hash(self.tool, self.tool_version, self.args)


class Allow(Frozen):
    """The call may run without a human."""

    kind: Literal["allow"] = "allow"


class Deny(Frozen):
    """The call must not run; `reason` is a stable code the model and the audit log see."""

    kind: Literal["deny"] = "deny"
    reason: str


class NeedsApproval(Frozen):
    """The call may run only with a grant bound to its action hash, decided within `ttl_s`."""

    kind: Literal["needs_approval"] = "needs_approval"
    reason: str
    ttl_s: int


PolicyDecision = Annotated[Allow | Deny | NeedsApproval, Field(discriminator="kind")]


def allow() -> Allow:
    return Allow()


def deny(reason: str) -> Deny:
    return Deny(reason=reason)


def needs_approval(reason: str, ttl_s: int) -> NeedsApproval:
    return NeedsApproval(reason=reason, ttl_s=ttl_s)


class PolicyBundle(Protocol):
    """A versioned, deterministic policy: same call and facts in, same decision out.

    Bundles read only `LedgerFacts` (built from system-of-record observations), never model text,
    and perform no I/O: the decision must be reproducible when a grant is revalidated.
    """

    @property
    def version(self) -> str:
        """`<doc>@<n>`, e.g. `POL-REF-004@4`; a grant is valid only under its own version."""
        ...

    def evaluate(
        self, call: ProposedCall, facts: LedgerFacts, *, autonomy_minor: int | None = None
    ) -> Allow | Deny | NeedsApproval:
        """Decide on one proposed call. `autonomy_minor`: the operator's cap on what may run
        without a person (the incident lever), passed in so that policy stays pure."""
        ...
