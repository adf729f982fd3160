"""The refund agent declared on the agents surface (`workflows/refund/agent.py`): what tasks are
pinned to is unchanged, the declaration holds the registry to it, its policy as an
`agents.Policy` decides as the POL-REF-004 bundle does, and the agents package no longer loads
refund code."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_jobs.agents import Call, Facts, approval_above
from agent_jobs.agents.declaration import Declaration, Phase
from agent_jobs.agents.declare import Effect
from agent_jobs.core.errors import ConfigError
from agent_jobs.policy import CURRENT, LedgerFacts, ProposedCall, RefundPolicyV3, RefundPolicyV4
from agent_jobs.tools import ToolRegistry
from agent_jobs.tools.refund_tools import refund_registry
from agent_jobs.verify.claims import Claim
from agent_jobs.workflows.refund import RefundWorkflow, scripted_services
from agent_jobs.workflows.refund.agent import POL_REF_004_V3, POL_REF_004_V4, REFUND
from agent_jobs.workflows.refund.phases import STEP_TOOLS
from agent_jobs.workflows.refund.wiring import systems_config

# What refund_resolution@3 tasks were pinned to before the declaration: it must not move.
PINNED_BEFORE = {
    "prompt": "refund-v7",
    "model_route": "support-tier2@2026-03",
    "policy": "POL-REF-004@4",
    "tools": {
        "orders.get": "1",
        "payments.list": "1",
        "refunds.list": "1",
        "policy.search": "1",
        "policy.get": "1",
        "refunds.get_by_key": "1",
        "refunds.create": "2",
    },
}


def test_what_tasks_are_pinned_to_is_the_declaration_and_unchanged() -> None:
    workflow = RefundWorkflow(scripted_services("http://127.0.0.1:9"))
    assert (workflow.name, workflow.version) == ("refund_resolution", 3)
    assert REFUND.pinned() == workflow.pinned() == PINNED_BEFORE
    assert REFUND.policy.version == CURRENT
    assert STEP_TOOLS == {
        "investigate": ("orders.get", "payments.list", "refunds.list"),
        "retrieve_policy": ("policy.search", "policy.get"),
        "decide": ("refunds.create", "refunds.list"),
    }
    effect = REFUND.effect("refunds.create")
    assert (effect.lookup, effect.lookup_arg) == ("refunds.get_by_key", "idempotency_key")
    assert effect.key == "refund:{request_id}:{payment_id}"


def test_the_declared_claims_are_the_verifiers() -> None:
    union = Claim.__origin__.__args__  # type: ignore[attr-defined]
    assert set(REFUND.claims) == set(union)
    assert set(REFUND.claim_types()) == {
        "duplicate_charge",
        "refund_submitted",
        "policy_cited",
        "no_refund",
    }


def _registry() -> ToolRegistry:
    return refund_registry(systems_config("http://127.0.0.1:9", environ={}))


def test_the_shipped_registry_is_the_declared_one() -> None:
    REFUND.check(_registry())


@pytest.mark.parametrize(
    "change",
    [
        {"tools": {**PINNED_BEFORE["tools"], "refunds.create": "3"}},  # type: ignore[dict-item]
        {"tools": {**PINNED_BEFORE["tools"], "orders.history": "1"}},  # type: ignore[dict-item]
        {
            "effects": (
                Effect(
                    "refunds.create",
                    "refunds.get_by_key",
                    "idempotency_key",
                    key="refund:{payment_id}",
                ),
            )
        },
        {
            "effects": (
                Effect(
                    "refunds.create",
                    "refunds.list",
                    "idempotency_key",
                    key="refund:{request_id}:{payment_id}",
                ),
            )
        },
    ],
)
def test_a_registry_that_drifted_from_the_declaration_is_refused(change: dict[str, Any]) -> None:
    drifted = dataclasses.replace(REFUND, **change)
    with pytest.raises(ConfigError):
        drifted.check(_registry())


def test_a_declaration_is_checked_when_built() -> None:
    with pytest.raises(ConfigError, match="not declared"):
        dataclasses.replace(REFUND, phases=(Phase("decide", ("refunds.delete",)),))
    with pytest.raises(ConfigError, match="key template"):
        dataclasses.replace(
            REFUND, effects=(Effect("refunds.create", "refunds.get_by_key", "idempotency_key"),)
        )
    with pytest.raises(ConfigError, match="twice"):
        dataclasses.replace(REFUND, claims=(*REFUND.claims, REFUND.claims[0]))
    with pytest.raises(ConfigError):
        Phase("Not A Name")
    assert isinstance(REFUND, Declaration)


def test_the_agents_package_loads_no_refund_code() -> None:
    code = (
        "import sys, agent_jobs.agents, agent_jobs.agents.declaration, agent_jobs.agents.routes;"
        "bad = sorted(m for m in sys.modules if m.startswith('agent_jobs.workflows'));"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


@settings(max_examples=200, deadline=None)
@given(amount=st.integers(min_value=0, max_value=10**7), limit=st.integers(0, 10**7))
def test_an_inclusive_threshold_asks_at_the_limit_too(amount: int, limit: int) -> None:
    call = Call("refunds.create", {"amount_minor": amount, "currency": "INR"})
    above = approval_above({"INR": limit}).decide(call)
    at_or_above = approval_above({"INR": limit}, inclusive=True).decide(call)
    assert (above is not None) == (amount > limit)
    assert (at_or_above is not None) == (amount >= limit)


# -- the declared policy decides as the bundle does ------------------------------------------

_PAY_IDS = ("pay_a", "pay_b", "pay_h", "pay_x")
_AMOUNTS = (5_000, 99_999, 100_000, 149_999, 150_000, 200_000)


def _often(draw: st.DrawFn, usual: Any, *others: Any, odds: int = 4) -> Any:
    """`usual`, except once in `odds` one of `others`: most cases reach the thresholds."""
    return usual if draw(st.integers(1, odds)) > 1 else draw(st.sampled_from(others))


@st.composite
def _cases(draw: st.DrawFn) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]]:
    amount = draw(st.sampled_from(_AMOUNTS))
    currency = _often(draw, "INR", "USD", "EUR")
    rows = [
        {
            "payment_id": pid,
            "order_id": _often(draw, "ord_1", "ord_2", odds=12),
            "kind": _often(draw, kind, "capture", "authorization", odds=12),
            "status": _often(draw, status, "refunded", "voided", odds=12),
            "amount_minor": _often(draw, amount, *_AMOUNTS, odds=12),
            "currency": _often(draw, currency, "INR", "USD", odds=12),
            "refunded_minor": _often(draw, 0, 1_000, odds=12),
            "created_at": f"2026-03-14T10:00:0{i}Z",
        }
        for i, (pid, kind, status) in enumerate(
            [("pay_a", "capture", "captured"), ("pay_b", "capture", "captured"),
             ("pay_h", "authorization", "authorized")]
        )
        if draw(st.integers(0, 9)) > 0
    ]  # fmt: skip
    refunds = [
        {"refund_id": f"rf_{i}", "payment_id": p, "amount_minor": 1_000, "currency": currency,
         "status": draw(st.sampled_from(["processing", "failed"]))}
        for i, p in enumerate(draw(st.lists(st.sampled_from(_PAY_IDS), max_size=1)))
    ]  # fmt: skip
    observed: list[tuple[str, dict[str, Any]]] = [
        ("orders.get", {"order_id": "ord_1", "total_minor": 2 * amount, "currency": currency,
                        "payment_ids": [r["payment_id"] for r in rows]}),
        ("payments.list", {"payments": rows}),
        ("refunds.list", {"refunds": refunds}),
        ("policy.search", {"passages": []}),
    ]  # fmt: skip
    args: dict[str, Any] = {
        "payment_id": _often(draw, "pay_b", *_PAY_IDS),
        "amount_minor": _often(draw, amount, *_AMOUNTS, 0, -1, True, "100"),
        "currency": _often(draw, currency, "INR", "USD", ""),
    }
    return observed, args


@settings(max_examples=400, deadline=None)
@given(
    case=_cases(),
    autonomy=st.one_of(st.none(), st.sampled_from([0, 5_000, 99_999, 100_000, 200_000])),
    version=st.sampled_from(["2", "1", "3"]),
)
def test_the_declared_policy_decides_as_the_bundle(
    case: tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]],
    autonomy: int | None,
    version: str,
) -> None:
    observed, args = case
    ledger = LedgerFacts.from_observations(observed)
    facts = Facts(input={}, reads=[{"tool": t, "args": {}, "result": r} for t, r in observed],
                  effects=())  # fmt: skip
    for declared, bundle in (
        (POL_REF_004_V4, RefundPolicyV4()),
        (POL_REF_004_V3, RefundPolicyV3()),
    ):
        call = Call("refunds.create", args, version)
        said = declared.evaluate(call, facts, frozenset([call.tool]), autonomy_minor=autonomy)
        proposed = ProposedCall(tool=call.tool, tool_version=version, args=args)
        decided = bundle.evaluate(proposed, ledger, autonomy_minor=autonomy)
        assert said.kind == decided.kind
        # Every reason, approvals' included: grants and the audit log carry the bundle's words.
        assert said.reason == getattr(decided, "reason", "")
        assert bundle.version == declared.version
        assert bundle.approval_ttl_s == declared.approval_ttl_s


def test_an_agent_without_a_scripted_model_is_not_answered_by_the_refunds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scripted route used to be served by the refund agent's script for every agent."""
    from agent_jobs.agents.services import services_from_settings
    from agent_jobs.gateway import DEFAULT_ROUTE_KEY, Message, ModelRequest, ProviderRejected

    monkeypatch.delenv("AGENT_JOBS_MODEL_ROUTES", raising=False)
    gateway = services_from_settings(DEFAULT_ROUTE_KEY, None).gateway
    request = ModelRequest(
        tenant_id="acme",
        task_id="tsk_1",
        step_type="work",
        messages=[Message(role="user", content="Order 8472 was charged twice")],
    )
    with pytest.raises(ProviderRejected, match="no scripted model"):
        gateway.propose(DEFAULT_ROUTE_KEY, request)


# -- the phases' order, and the gate, on the surface ---------------------------------------------


def test_the_phase_order_is_declared_and_drives_the_workflow() -> None:
    assert REFUND.order == ("investigate", "policy", "decide", "confirm", "draft", "verify")
    assert [REFUND.after(p) for p in REFUND.order[:-1]] == list(REFUND.order[1:])
    at = {p: (s.name if (s := REFUND.step_at(p)) else None) for p in REFUND.order}
    assert at == {
        "investigate": "investigate",
        "policy": "retrieve_policy",
        "decide": "decide",
        "confirm": None,
        "draft": "draft_reply",
        "verify": None,
    }
    with pytest.raises(ConfigError):
        REFUND.after("verify")
    # A decision point in no declared phase, or a phase named twice, is refused when built.
    with pytest.raises(ConfigError, match="no ordered phase"):
        dataclasses.replace(REFUND, order=("investigate", "decide", "confirm", "verify"))
    with pytest.raises(ConfigError, match="once"):
        dataclasses.replace(REFUND, order=(*REFUND.order, "decide"))


def test_the_gate_decides_by_the_declared_policy_at_the_tasks_version() -> None:
    from agent_jobs.core.contracts import Action

    assert REFUND.policy_at("POL-REF-004@4") is POL_REF_004_V4
    assert REFUND.policy_at("POL-REF-004@3") is POL_REF_004_V3
    assert REFUND.policy_at("POL-REF-004@2") is None
    action = Action(
        tool="refunds.create",
        tool_version="2",
        args={"payment_id": "pay_b", "amount_minor": 5_000, "currency": "INR"},
        idempotency_key="refund:req_1:pay_b",
    )
    facts = Facts(input={}, reads=(), effects=())
    drifted = {"tools": {**PINNED_BEFORE["tools"], "refunds.create": "3"}}  # type: ignore[dict-item]
    auth = REFUND.authorize(POL_REF_004_V3, action, facts, drifted)
    assert (auth.kind, auth.policy_version, auth.reason) == (
        "deny",
        "POL-REF-004@3",
        "tool_version_not_pinned",
    )
    # Pinned, but no ledger read: the declared ledger rule refuses, as the bundle does.
    auth = REFUND.authorize(POL_REF_004_V4, action, facts, PINNED_BEFORE, autonomy_minor=0)
    assert (auth.kind, auth.reason) == ("deny", "payment_not_captured")
