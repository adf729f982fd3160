"""A transition as data: what one step decided, for the store to apply with compare-and-set.

A step function maps (task, input) to a `Patch`; `Store.transition` applies it in one transaction:
the guarded UPDATE on (version, lease epoch), the event append, and every record that must move
together with the status (the effect intent, the approval's consumption, a dead letter).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from agent_jobs.core.contracts import Action, EffectStatus
from agent_jobs.core.states import TERMINAL, Status


@dataclass(frozen=True)
class EffectWrite:
    """Insert the intent (before the call) or record the outcome (after it)."""

    action: Action
    status: EffectStatus
    result: dict[str, Any] | None = None


@dataclass(frozen=True)
class GroupMember:
    """Another effect of a plan, asked with the request's action in one decision: an approval
    row of its own, bound to its own action hash, used once at its turn."""

    approval_id: str
    action: Action
    reason: str


@dataclass(frozen=True)
class ApprovalRequest:
    """Park for a human: bind this exact action, under this policy version, for `ttl_s`.
    `members`: the plan's other effects, decided with it in one decision (a group whose head,
    the approval the task waits on, is `approval_id`)."""

    approval_id: str
    action: Action
    policy_version: str
    requester: str
    reason: str
    ttl_s: float
    members: tuple[GroupMember, ...] = ()


@dataclass(frozen=True)
class ApprovalUse:
    """Consume (single use) or close an approval in the same transaction as the transition."""

    approval_id: str
    status: Literal["used", "expired", "void"]


@dataclass(frozen=True)
class Patch:
    to: Status
    event: str
    data: dict[str, Any] = field(default_factory=dict)
    # Full replacement of the task's JSON state; None keeps it as it is.
    state: dict[str, Any] | None = None
    # Seconds from the database clock until the task may be claimed again; None clears the timer.
    wake_in_s: float | None = None
    attempts: int | None = None
    # A failed attempt's "Class: message", kept on the row until a step resets `attempts` to 0.
    last_error: str | None = None
    # Keep the lease after committing: EXECUTING commits the intent and then calls the tool under
    # the same lease, so any *later* claim of an EXECUTING task means the caller lost its lease.
    keep_lease: bool = False
    effect: EffectWrite | None = None
    approval_request: ApprovalRequest | None = None
    approval_use: ApprovalUse | None = None
    dead_letter: str | None = None
    outcome: dict[str, Any] | None = None
    # A dead-letter replay (`REPLAY_TRANSITIONS`): the task starts over, its outcome and any
    # hold cleared (with `attempts=0`, its last error too).
    replay: bool = False

    @property
    def terminal(self) -> bool:
        return self.to in TERMINAL
