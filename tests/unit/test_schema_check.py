"""The fast validity check (`core.schema_check`) never accepts what `jsonschema` refuses: a
differential test over generated proposals and tool arguments, near-valid ones above all."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from agent_jobs.core.schema_check import fast_check
from agent_jobs.gateway.schemas import PROPOSAL_V3, validation_errors
from agent_jobs.tools.refund_tools import refund_tools

ODD_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=8)
SCALAR = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.sampled_from(["", "x", "processing", "settled", "rf_1", "pay_1", "7001"])
    | ODD_TEXT
)
JSONISH = st.recursive(
    SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ODD_TEXT, inner, max_size=3),
    max_leaves=8,
)


def _maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The right kind of value most of the time, anything some of the time."""
    return st.one_of(value, value, value, JSONISH)


CLAIM = st.fixed_dictionaries(
    {"type": _maybe(st.sampled_from(["duplicate_charge", "refund_submitted", "policy_cited"]))},
    optional={
        "payment_ids": _maybe(st.lists(_maybe(st.sampled_from(["pay_1", ""])), max_size=3)),
        "refund_id": _maybe(st.sampled_from(["rf_1", ""])),
        "amount_minor": _maybe(st.integers(-2, 300000) | st.floats(0, 3) | st.booleans()),
        "status": _maybe(st.sampled_from(["processing", "settled", "done"])),
        "doc": _maybe(st.sampled_from(["POL-REF-004", ""])),
        "version": _maybe(st.integers(0, 5) | st.sampled_from(["4", "v4"])),
        "reason": _maybe(st.sampled_from(["none due", ""])),
        "extra": JSONISH,
    },
)
CALL = st.fixed_dictionaries(
    {"tool": _maybe(st.sampled_from(["orders.get", ""])), "args": _maybe(st.just({"a": 1}))},
    optional={"extra": JSONISH},
)
PROPOSAL = st.fixed_dictionaries(
    {"kind": _maybe(st.sampled_from(["tool_calls", "final_draft", "no_action", "other"]))},
    optional={
        "calls": _maybe(st.lists(CALL, max_size=3)),
        "rationale": _maybe(st.sampled_from(["because", ""])),
        "draft": _maybe(
            st.fixed_dictionaries(
                {"text": _maybe(st.sampled_from(["Hi", ""]))},
                optional={"claims": _maybe(st.lists(CLAIM, max_size=3)), "x": JSONISH},
            )
        ),
        "reason": _maybe(st.sampled_from(["no refund is due", ""])),
        "extra": JSONISH,
    },
)
PYTHON = Draft202012Validator(PROPOSAL_V3)
FAST = fast_check(PROPOSAL_V3)


@given(PROPOSAL | JSONISH)
@settings(max_examples=1500)
def test_the_fast_check_accepts_a_proposal_only_when_jsonschema_does(instance: Any) -> None:
    assert FAST is not None
    python_valid = PYTHON.is_valid(instance)
    if FAST(instance):
        assert python_valid, instance
    assert (validation_errors(PROPOSAL_V3, instance) == []) is python_valid


def test_the_fast_check_recognises_the_usual_valid_proposal() -> None:
    valid = {
        "kind": "final_draft",
        "draft": {
            "text": "Hi",
            "claims": [
                {"type": "refund_submitted", "refund_id": "rf_1", "amount_minor": 1,
                 "status": "processing"},
                {"type": "policy_cited", "doc": "POL-REF-004", "version": 4},
            ],
        },
    }  # fmt: skip
    assert FAST is not None and FAST(valid) and PYTHON.is_valid(valid)
    assert not FAST({**valid, "kind": "tool_calls"})  # refused: jsonschema gives the message
    assert validation_errors(PROPOSAL_V3, {**valid, "kind": "tool_calls"})


TOOLS = refund_tools()


@given(
    st.sampled_from(TOOLS),
    st.dictionaries(
        ODD_TEXT
        | st.sampled_from(
            [
                "order_id",
                "payment_id",
                "amount_minor",
                "currency",
                "query",
                "idempotency_key",
                "reason",
            ]
        ),
        JSONISH | st.sampled_from(["7001", "pay_1", "INR", 100, "refund policy"]),
        max_size=5,
    ),
)
@settings(max_examples=1500)
def test_the_fast_check_accepts_tool_arguments_only_when_jsonschema_does(
    tool: Any, args: dict[str, Any]
) -> None:
    fast = fast_check(tool.args_schema)
    if fast is not None and fast(args):
        assert Draft202012Validator(tool.args_schema).is_valid(args), (tool.name, args)
        assert tool.validate_args(args) == []


def test_schemas_whose_keywords_could_mean_otherwise_get_no_fast_check() -> None:
    assert fast_check({"type": "string", "pattern": "^a$"}) is None
    assert fast_check({"properties": {"d": {"type": "string", "format": "date"}}}) is None
    assert fast_check({"$defs": {"a": {}}, "$ref": "#/$defs/a"}) is None
    assert fast_check({"type": "object"}) is not None
