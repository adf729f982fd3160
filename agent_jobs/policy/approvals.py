"""Approval grants, judged in pure code (storage and the single-use update live in the store).

A grant approves one exact action (its hash), under one policy version, for a limited time, once,
and never by the person who asked for it. It is revalidated right before the side effect, not
trusted because an "approved" event arrived.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from agent_jobs.core.contracts import ApprovalStatus, Frozen
from agent_jobs.core.identity import same_principal

GrantFailure = Literal[
    "used", "not_granted", "action_changed", "expired", "self_approval", "policy_changed"
]


class Grant(Frozen):
    """A stored approval, as the orchestrator loaded it."""

    approval_id: str
    action_hash: str
    policy_version: str
    requester: str
    approver: str | None
    status: ApprovalStatus
    expires_at: datetime
    used_at: datetime | None = None


class GrantCheck(Frozen):
    """`ok`, or the first reason the grant cannot authorise the call."""

    ok: bool
    reason: GrantFailure | None = None


_OK = GrantCheck(ok=True)


def check_approver(requester: str, approver: str) -> GrantCheck:
    """Whether `approver` may decide a request made by `requester` (never their own)."""
    if not approver.strip() or same_principal(requester, approver):
        return GrantCheck(ok=False, reason="self_approval")
    return _OK


def validate_grant(
    grant: Grant, action_hash: str, current_policy_version: str, now: datetime
) -> GrantCheck:
    """Whether `grant` authorises the action with `action_hash` now, per the seed's `validateGrant`.

    Checked in the seed's order, with "not granted" (pending, denied, void) right after "used":
    used, not granted, action changed, expired, self-approval, policy changed. A `policy_changed`
    result means "re-evaluate under the current bundle and maybe ask again", not "deny".
    """
    if grant.used_at is not None or grant.status == "used":
        return GrantCheck(ok=False, reason="used")
    # Only a granted (or since-expired) request can authorise anything; pending, denied, void and
    # any status added later fail closed. An expired one is reported as expired below.
    if grant.status not in ("granted", "expired") or (
        grant.status == "granted" and grant.approver is None
    ):
        return GrantCheck(ok=False, reason="not_granted")
    if grant.action_hash != action_hash:
        return GrantCheck(ok=False, reason="action_changed")
    if grant.status == "expired" or now >= grant.expires_at:
        return GrantCheck(ok=False, reason="expired")
    if same_principal(grant.approver, grant.requester):
        return GrantCheck(ok=False, reason="self_approval")
    if grant.policy_version != current_policy_version:
        return GrantCheck(ok=False, reason="policy_changed")
    return _OK
