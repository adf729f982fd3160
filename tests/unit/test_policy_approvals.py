"""Grant validation (invariant 8): each refusal reason, in the seed's order."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from agent_jobs.core.clock import FixedClock
from agent_jobs.core.hashing import action_hash
from agent_jobs.policy import CURRENT, Grant, GrantCheck, check_approver, validate_grant

CLOCK = FixedClock()
NOW = CLOCK.now()
ARGS = {"payment_id": "pay_8472_b", "amount_minor": 200_000, "currency": "INR"}
HASH = action_hash("refunds.create", "2", ARGS)


def grant(**kw: Any) -> Grant:
    base: dict[str, Any] = {
        "approval_id": "apr_5521",
        "action_hash": HASH,
        "policy_version": CURRENT,
        "requester": "agent:tsk_8472_a",
        "approver": "usr_lead",
        "status": "granted",
        "expires_at": NOW + timedelta(seconds=1260),
        "used_at": None,
    }
    base.update(kw)
    return Grant(**base)


def check(g: Grant, *, h: str = HASH, policy: str = CURRENT, now: datetime = NOW) -> GrantCheck:
    return validate_grant(g, h, policy, now)


def test_a_fresh_matching_grant_is_ok() -> None:
    assert check(grant()) == GrantCheck(ok=True, reason=None)


@pytest.mark.parametrize(
    ("g", "kwargs", "reason"),
    [
        (grant(used_at=NOW), {}, "used"),
        (grant(status="used"), {}, "used"),
        (grant(status="pending", approver=None), {}, "not_granted"),
        (grant(status="denied"), {}, "not_granted"),
        (grant(status="void"), {}, "not_granted"),
        (grant(approver=None), {}, "not_granted"),
        (
            grant(),
            {"h": action_hash("refunds.create", "2", {**ARGS, "amount_minor": 300_000})},
            "action_changed",
        ),
        (grant(), {"h": action_hash("refunds.create", "3", ARGS)}, "action_changed"),
        (grant(expires_at=NOW), {}, "expired"),
        (grant(status="expired"), {}, "expired"),
        (grant(approver="agent:tsk_8472_a"), {}, "self_approval"),
        (grant(approver=" Agent:TSK_8472_A "), {}, "self_approval"),
        (grant(policy_version="POL-REF-004@3"), {}, "policy_changed"),
    ],
)
def test_each_refusal_reason(g: Grant, kwargs: dict[str, Any], reason: str) -> None:
    assert check(g, **kwargs) == GrantCheck(ok=False, reason=reason)


def test_expiry_is_exclusive_of_the_deadline() -> None:
    g = grant(expires_at=NOW + timedelta(seconds=1))
    assert check(g).ok
    CLOCK.advance(1)
    assert check(g, now=CLOCK.now()).reason == "expired"


def test_order_used_wins_over_everything_else() -> None:
    g = grant(used_at=NOW, action_hash="sha256:other", expires_at=NOW, approver="agent:tsk_8472_a")
    assert check(g, policy="POL-REF-004@9").reason == "used"


def test_order_action_changed_before_expired_before_self_approval_before_policy() -> None:
    g = grant(expires_at=NOW, approver="agent:tsk_8472_a", policy_version="POL-REF-004@3")
    assert check(g, h="sha256:x").reason == "action_changed"
    assert check(g).reason == "expired"
    assert check(grant(approver="agent:tsk_8472_a", policy_version="x")).reason == "self_approval"


def test_check_approver_refuses_self_and_blank() -> None:
    assert check_approver("usr_1", "usr_2").ok
    assert check_approver("usr_1", "usr_1") == GrantCheck(ok=False, reason="self_approval")
    assert check_approver("usr_1", "USR_1").reason == "self_approval"
    assert check_approver("usr_1", "  ").reason == "self_approval"
