"""An agent's policy (rules over facts, thresholds per currency) and its claims verifier."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_jobs.agents import (
    Call,
    Claim,
    Decision,
    Facts,
    Policy,
    approval_above,
    deny,
    needs_approval,
)
from agent_jobs.agents.claims import check_claims
from agent_jobs.core.errors import ConfigError

EFFECTS = frozenset({"orders.cancel"})
NO_FACTS = Facts(input={}, reads=(), effects=())
THRESHOLDS = {"EUR": 100_00, "JPY": 10_000}


def call(amount: Any, currency: Any) -> Call:
    return Call("orders.cancel", {"order_id": "A", "amount_minor": amount, "currency": currency})


@given(
    st.integers(min_value=0, max_value=10**12), st.sampled_from(["EUR", "JPY", "USD", "", "eur"])
)
def test_thresholds_are_per_currency_and_an_unknown_currency_always_asks(
    amount: int, currency: str
) -> None:
    policy = Policy("P@1", thresholds=[approval_above(THRESHOLDS)])
    said = policy.evaluate(call(amount, currency), NO_FACTS, EFFECTS)
    limit = THRESHOLDS.get(currency)
    expected = "needs_approval" if limit is None or amount > limit else "allow"
    assert said.kind == expected, (amount, currency, said)


@given(st.none() | st.booleans() | st.text(max_size=5) | st.floats(allow_nan=True))
def test_an_amount_that_is_not_an_integer_asks_a_person(amount: Any) -> None:
    policy = Policy("P@1", thresholds=[approval_above(THRESHOLDS)])
    assert policy.evaluate(call(amount, "EUR"), NO_FACTS, EFFECTS).kind == "needs_approval"


def test_a_deny_wins_over_an_approval_and_an_unknown_tool_is_denied() -> None:
    def ask(c: Call, f: Facts) -> Decision | None:
        return needs_approval("new customer")

    def refuse(c: Call, f: Facts) -> Decision | None:
        return deny("order_shipped") if f.read("orders.get", order_id="A") else None

    facts = Facts(input={}, reads=({"tool": "orders.get", "args": {"order_id": "A"},
                                    "result": {"status": "shipped"}},), effects=())  # fmt: skip
    policy = Policy("P@1", rules=[ask, refuse], thresholds=[approval_above(THRESHOLDS)])
    assert policy.evaluate(call(1, "EUR"), facts, EFFECTS) == deny("order_shipped")
    assert policy.evaluate(call(1, "EUR"), NO_FACTS, EFFECTS) == needs_approval("new customer")
    other = Call("payments.refund", {})
    assert policy.evaluate(other, NO_FACTS, EFFECTS) == deny("unknown_tool")


def test_bad_policies_fail_at_declaration() -> None:
    with pytest.raises(ConfigError):
        Policy("no version")
    with pytest.raises(ConfigError):
        approval_above({"euro": 10})
    with pytest.raises(ConfigError):
        Policy("P@1", approval_ttl_s=0)


class Cancelled(Claim):
    order_id: str

    def holds(self, facts: Facts) -> bool:
        return facts.effect("orders.cancel", order_id=self.order_id) is not None


class Broken(Claim):
    def holds(self, facts: Facts) -> bool:
        raise KeyError("a check that raises has shown nothing")


CLAIMS: dict[str, type[Claim]] = {"cancelled": Cancelled, "broken": Broken}
DONE = Facts(input={}, reads=(), effects=({"tool": "orders.cancel", "args": {"order_id": "A"},
                                           "result": {}},))  # fmt: skip


def test_claims_hold_only_when_the_facts_show_them() -> None:
    assert check_claims(CLAIMS, [{"type": "cancelled", "order_id": "A"}], DONE)[1] == []
    assert check_claims(CLAIMS, [{"type": "cancelled", "order_id": "B"}], DONE)[1] == [
        "claim_0_cancelled_not_shown_by_facts"
    ]
    assert check_claims(CLAIMS, [], DONE)[1] == ["no_claims"]
    assert check_claims(CLAIMS, [{"type": "broken"}], DONE)[1] == [
        "claim_0_broken_not_shown_by_facts"
    ]
    assert Cancelled.claim_type() == "cancelled"


@given(st.lists(st.dictionaries(st.text(max_size=8), st.text(max_size=8) | st.integers()),
                max_size=25))  # fmt: skip
def test_claims_a_model_invents_never_verify(raw: list[dict[str, Any]]) -> None:
    _, failures = check_claims(CLAIMS, raw, NO_FACTS)
    # With no effect in the facts, nothing a model writes can be shown true.
    assert failures


def test_a_policy_words_its_reasons_and_places_the_autonomy_cap() -> None:
    """What the refund agent's gate needs from the surface: its bundle's exact reasons, the
    autonomy cap before the limits, and the schema versions its rules were written for."""
    from agent_jobs.agents.policy import Autonomy

    facts = Facts(input={}, reads=(), effects=())
    effects = frozenset({"pay"})
    worded = Policy(
        "PAY@2",
        thresholds=[
            approval_above(
                {"INR": 100_000},
                inclusive=True,
                reason="{policy}: >= {currency} {limit_major:,}",
                uncovered="currency_not_covered",
            )
        ],
        tool_versions={"pay": frozenset({"2"})},
        autonomy=Autonomy(inclusive=True, before_limits=True, reason="cap >= {cap}"),
    )
    at_limit = Call("pay", {"amount_minor": 100_000, "currency": "INR"}, "2")
    assert worded.evaluate(at_limit, facts, effects).reason == "PAY@2: >= INR 1,000"
    # Before the limits: the cap's reason is the one given, at the cap too (inclusive).
    said = worded.evaluate(at_limit, facts, effects, autonomy_minor=100_000)
    assert (said.kind, said.reason) == ("needs_approval", "cap >= 100000")
    # ... but after the uncovered currency.
    usd = Call("pay", {"amount_minor": 1, "currency": "USD"}, "2")
    assert worded.evaluate(usd, facts, effects, autonomy_minor=0).reason == "currency_not_covered"
    assert worded.evaluate(Call("pay", at_limit.args, "1"), facts, effects).reason == "unknown_tool"
    # The default: the cap only once the policy allows, strictly above it.
    plain = Policy("PAY@1", thresholds=[approval_above({"INR": 100_000})])
    small = Call("pay", {"amount_minor": 5_000, "currency": "INR"})
    assert plain.evaluate(small, facts, effects, autonomy_minor=5_000).kind == "allow"
    said = plain.evaluate(small, facts, effects, autonomy_minor=4_999)
    assert (said.kind, said.reason) == ("needs_approval", "operator autonomy cap 4999")
    said = plain.evaluate(at_limit, facts, effects, autonomy_minor=0)
    assert said.reason == "operator autonomy cap 0"
