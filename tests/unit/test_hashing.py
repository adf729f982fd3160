"""Canonical JSON and hashes (what an approval binds, invariant 8) and idempotency keys (what names
an action across retries, invariant 3)."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_jobs.core.errors import InvalidInput
from agent_jobs.core.hashing import (
    action_hash,
    args_hash,
    canonical_json,
    derive_idempotency_key,
    payload_hash,
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=6)


def reorder(value: Any, rnd: random.Random) -> Any:
    """The same JSON value with every object's keys inserted in a shuffled order."""
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {k: reorder(value[k], rnd) for k in keys}
    if isinstance(value, list):
        return [reorder(v, rnd) for v in value]
    return value


@given(json_objects, st.randoms(use_true_random=False))
def test_canonical_json_is_stable_under_key_order(
    value: dict[str, Any], rnd: random.Random
) -> None:
    shuffled = reorder(value, rnd)
    assert canonical_json(shuffled) == canonical_json(value)
    assert payload_hash(shuffled) == payload_hash(value)


@given(json_objects)
def test_canonical_json_round_trips_and_has_no_whitespace_padding(value: dict[str, Any]) -> None:
    text = canonical_json(value)
    assert json.loads(text) == value
    assert canonical_json(json.loads(text)) == text
    # The separators are the compact ones; any space left is inside a string.
    assert (
        json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        == text
    )


def test_canonical_json_form() -> None:
    assert canonical_json({"b": 1, "a": [1, 2, {"d": None, "c": "é"}]}) == (
        '{"a":[1,2,{"c":"é","d":null}],"b":1}'
    )


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize(
    "wrap",
    [
        lambda v: v,
        lambda v: {"amount": v},
        lambda v: {"a": [1, {"b": v}]},
        lambda v: [v],
        lambda v: ({"t": (1, v)}),
    ],
)
def test_nan_and_infinities_are_refused_wherever_they_hide(bad: float, wrap: Any) -> None:
    with pytest.raises(InvalidInput):
        canonical_json(wrap(bad))
    with pytest.raises(InvalidInput):
        payload_hash({"x": wrap(bad)})


def test_non_string_keys_are_refused() -> None:
    # json.dumps would silently turn 1 into "1", so {1: x} and {"1": x} would hash alike.
    with pytest.raises(InvalidInput):
        canonical_json({1: "x"})
    with pytest.raises(InvalidInput):
        canonical_json({"outer": {None: "x"}})


ARGS = {"payment_id": "pay_1", "amount_minor": 1200, "currency": "EUR", "meta": {"k": [1, 2]}}
BASE = action_hash("refunds.create", "2", ARGS)


def test_action_hash_format_and_key_order_independence() -> None:
    assert BASE.startswith("sha256:") and len(BASE) == len("sha256:") + 64
    assert action_hash("refunds.create", "2", dict(reversed(list(ARGS.items())))) == BASE


@pytest.mark.parametrize(
    ("tool", "version", "args"),
    [
        ("refunds.reverse", "2", ARGS),
        ("refunds.create", "3", ARGS),
        ("refunds.create", "2", {**ARGS, "amount_minor": 1201}),
        ("refunds.create", "2", {**ARGS, "currency": "eur"}),
        ("refunds.create", "2", {**ARGS, "meta": {"k": [2, 1]}}),
        ("refunds.create", "2", {**ARGS, "extra": None}),
        ("refunds.create", "2", {k: v for k, v in ARGS.items() if k != "meta"}),
        ("refunds.create", "2", {**ARGS, "amount_minor": 1200.5}),
        ("refunds.create", "2", {**ARGS, "amount_minor": "1200"}),
    ],
)
def test_action_hash_changes_with_any_tool_version_or_arg(
    tool: str, version: str, args: dict[str, Any]
) -> None:
    assert action_hash(tool, version, args) != BASE


@given(json_objects, st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8))
def test_action_hash_does_not_confuse_tool_and_version(
    args: dict[str, Any], a: str, b: str
) -> None:
    if a != b:
        assert action_hash(a, b, args) != action_hash(b, a, args)


def test_args_hash_is_the_args_alone() -> None:
    assert args_hash(ARGS) == args_hash(dict(reversed(list(ARGS.items()))))
    assert args_hash(ARGS) != args_hash({**ARGS, "currency": "USD"})
    assert args_hash(ARGS) != BASE


# -- idempotency keys ------------------------------------------------------------------------

TEMPLATE = "refund:{request_id}:{payment_id}"


def test_key_is_filled_from_the_action_identity() -> None:
    key = derive_idempotency_key(TEMPLATE, {"request_id": "req-1", "payment_id": "pay_1"})
    assert key == "refund:req-1:pay_1"
    assert derive_idempotency_key("n:{n}", {"n": 42}) == "n:42"


@given(st.integers(min_value=0, max_value=10_000), st.integers(min_value=0, max_value=10_000))
def test_key_never_depends_on_the_attempt(first: int, retry: int) -> None:
    """Invariant 3: the first try and every retry present the same key, whatever else the
    context carries (an attempt counter, a lease epoch, a timestamp)."""
    ident = {"request_id": "req-1", "payment_id": "pay_1"}
    a = derive_idempotency_key(TEMPLATE, {**ident, "attempt": first, "epoch": first})
    b = derive_idempotency_key(TEMPLATE, {**ident, "attempt": retry, "epoch": retry})
    assert a == b == "refund:req-1:pay_1"


@pytest.mark.parametrize(
    ("template", "fields", "match"),
    [
        (TEMPLATE, {"request_id": "req-1"}, "needs field 'payment_id'"),
        ("refund:{request_id}:{paymnet_id}", {"request_id": "r", "payment_id": "p"}, "paymnet_id"),
        ("refund", {"request_id": "r"}, "names no field"),
        ("refund:{x}", {"x": "has space"}, "characters outside"),
        ("refund:{x}", {"x": "semi;colon"}, "characters outside"),
        ("refund:{x}", {"x": "brace{"}, "characters outside"),
        ("refund:{x}", {"x": "ünïcode"}, "characters outside"),
        ("refund:{x}", {"x": "new\nline"}, "characters outside"),
        ("refund:{x}", {"x": ""}, "characters outside"),
        ("refund:{x}", {"x": True}, "string or integer"),
        ("refund:{x}", {"x": 1.5}, "string or integer"),
        ("refund:{x}", {"x": None}, "string or integer"),
        ("refund:{x}", {"x": ["a"]}, "string or integer"),
        ("refund:{x}", {"x": {"a": 1}}, "string or integer"),
        ("refund:{x}", {"x": "a" * 300}, "longer than 255"),
    ],
)
def test_key_derivation_refuses(template: str, fields: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidInput, match=match):
        derive_idempotency_key(template, fields)


@given(st.text(alphabet="ABCxyz019-_:.@/", min_size=1, max_size=40))
def test_allowed_characters_pass_through_unchanged(value: str) -> None:
    assert derive_idempotency_key("k:{v}", {"v": value}) == f"k:{value}"
