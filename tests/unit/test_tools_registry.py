"""Descriptors refuse to be misconfigured; the registry resolves per tenant with the switches."""

from __future__ import annotations

from typing import Any

import pytest

from agent_jobs.core.errors import ConfigError
from agent_jobs.tools import (
    InMemorySwitches,
    Rejected,
    RetryPolicy,
    ToolDescriptor,
    ToolRegistry,
)
from agent_jobs.tools.testing import ScriptedAdapter

ADAPTER = ScriptedAdapter([{}])


def schema(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "type": "object",
        "properties": {"payment_id": {"type": "string"}, "amount_minor": {"type": "integer"}},
        "required": ["payment_id", "amount_minor"],
        "additionalProperties": False,
    }
    base.update(over)
    return base


def tool(name: str = "t.read", **over: Any) -> ToolDescriptor:
    base: dict[str, Any] = {
        "name": name,
        "version": "1",
        "description": "d",
        "args_schema": schema(),
        "side_effect": "none",
        "permission": "role",
        "step_scopes": frozenset({"investigate"}),
        "timeout_s": 1.0,
        "adapter": ADAPTER,
    }
    base.update(over)
    return ToolDescriptor(**base)


def keyed(**over: Any) -> ToolDescriptor:
    base: dict[str, Any] = {
        "side_effect": "keyed",
        "idempotency_key_template": "refund:{request_id}:{payment_id}",
        "reconcile_tool": "t.read",
        "step_scopes": frozenset({"execute"}),
    }
    base.update(over)
    return tool("t.write", **base)


@pytest.mark.parametrize(
    "over",
    [
        {"args_schema": schema(additionalProperties=True)},
        {"args_schema": {k: v for k, v in schema().items() if k != "additionalProperties"}},
        {"args_schema": schema(type="array")},
        {"args_schema": schema(required=["payment_id", "ghost"])},
        {"args_schema": schema(properties={"x": {"type": "no-such-type"}})},
        {"timeout_s": 0},
    ],
)
def test_bad_descriptors_fail_at_construction(over: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        tool(**over)


@pytest.mark.parametrize(
    "over",
    [
        {"idempotency_key_template": None},
        {"reconcile_tool": None},
        {"idempotency_key_template": "refund:{attempt}"},
        {"idempotency_key_template": "refund:static"},
        # Writes never retry inside the executor.
        {"retry": RetryPolicy(max_attempts=2)},
    ],
)
def test_keyed_writes_need_a_key_template_a_reconcile_read_and_no_retry(
    over: dict[str, Any],
) -> None:
    with pytest.raises(ConfigError):
        keyed(**over)


def test_key_template_may_not_use_optional_args() -> None:
    s = schema(required=["amount_minor"])
    with pytest.raises(ConfigError):
        keyed(args_schema=s)


def test_schema_is_copied_so_later_mutation_cannot_open_it() -> None:
    s = schema()
    d = tool(args_schema=s)
    s["additionalProperties"] = True
    assert d.validate_args({"payment_id": "p", "amount_minor": 1, "extra": 1})


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({"payment_id": "p", "amount_minor": 1, "destination_account": "x"}, "destination_account"),
        ({"payment_id": "p"}, "'amount_minor' is a required property"),
        ({"payment_id": "p", "amount_minor": True}, "amount_minor"),
    ],
)
def test_validate_args_rejects_extra_missing_and_mistyped(
    args: dict[str, Any], fragment: str
) -> None:
    errors = tool().validate_args(args)
    assert errors and fragment in " ".join(errors)
    assert tool().validate_args({"payment_id": "p", "amount_minor": 1}) == []


def test_resolve_unknown_disabled_and_read_only() -> None:
    switches = InMemorySwitches()
    reg = ToolRegistry([tool(), keyed()], switches=switches)
    reg.check()
    assert isinstance(reg.resolve("t.read", "ten_1"), ToolDescriptor)
    assert reg.resolve("nope", "ten_1") == Rejected(
        code="unknown_tool", message="no tool named 'nope'"
    )

    switches.disable_tool("t.read", "ten_1")
    assert isinstance(reg.resolve("t.read", "ten_1"), Rejected)
    assert isinstance(reg.resolve("t.read", "ten_2"), ToolDescriptor)
    switches.enable_tool("t.read", "ten_1")
    switches.disable_tool("t.read")  # everyone
    out = reg.resolve("t.read", "ten_2")
    assert isinstance(out, Rejected) and out.code == "tool_disabled"
    switches.enable_tool("t.read")

    switches.set_read_only("ten_1")
    out = reg.resolve("t.write", "ten_1")
    assert isinstance(out, Rejected) and out.code == "tenant_read_only"
    assert isinstance(reg.resolve("t.read", "ten_1"), ToolDescriptor)
    assert isinstance(reg.resolve("t.write", "ten_2"), ToolDescriptor)
    switches.set_read_only("ten_1", False)
    assert isinstance(reg.resolve("t.write", "ten_1"), ToolDescriptor)


def test_available_is_what_a_model_may_be_shown() -> None:
    switches = InMemorySwitches()
    reg = ToolRegistry([tool(), keyed()], switches=switches)
    assert [d.name for d in reg.available("ten_1", "investigate")] == ["t.read"]
    assert [d.name for d in reg.available("ten_1", "execute")] == ["t.write"]
    switches.set_read_only("ten_1")
    assert reg.available("ten_1", "execute") == []


def test_duplicate_names_and_bad_reconcile_tools_are_config_errors() -> None:
    reg = ToolRegistry([tool()])
    with pytest.raises(ConfigError):
        reg.register(tool())
    with pytest.raises(ConfigError):
        ToolRegistry([keyed(reconcile_tool="t.missing")]).check()
    # A reconcile "read" that is itself a write would make reconciliation act.
    with pytest.raises(ConfigError):
        ToolRegistry([keyed(reconcile_tool="t.write")]).check()


def test_retry_delay_doubles() -> None:
    r = RetryPolicy(max_attempts=4, backoff_s=0.25)
    assert [r.delay_s(n) for n in (1, 2, 3)] == [0.25, 0.5, 1.0]
    with pytest.raises(ConfigError):
        RetryPolicy(max_attempts=0)
