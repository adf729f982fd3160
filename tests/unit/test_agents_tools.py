"""Typed Python functions as an agent's tools: the schema the model sees and the executor
enforces, the key an effect is sent with, and the lookup that reconciles it."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from agent_jobs.agents import Agent, ToolRejected
from agent_jobs.agents.declare import EXECUTE, RECONCILE, REPLY, WORK, found_of
from agent_jobs.core.errors import ConfigError
from agent_jobs.core.hashing import action_hash
from agent_jobs.tools import ExecContext, Ok, PolicyStamp, Rejected, ToolCall, ToolExecutor
from agent_jobs.tools.mcp_content import as_object
from agent_jobs.tools.testing import FakeCredentialProvider, InMemoryAuditSink


class Address(BaseModel):
    city: str


def make() -> tuple[Agent, list[dict[str, Any]]]:
    agent = Agent("t", prompt="p")
    sent: list[dict[str, Any]] = []

    @agent.tool("shop.find", steps=(WORK,))
    def find(sku: str, size: Literal["S", "M"] = "M", to: Address | None = None) -> dict[str, Any]:
        """Find a product.

        Not shown to the model: only the first paragraph is."""
        return {"sku": sku, "size": size, "city": to.city if to else None}

    def by_key(idempotency_key: str) -> dict[str, Any] | None:
        return next((s for s in sent if s["key"] == idempotency_key), None)

    @agent.effect("shop.order", key="order:{tenant_id}:{sku}", lookup=by_key)
    def order(sku: str, quantity: int, idempotency_key: str) -> dict[str, Any]:
        """Order a product."""
        sent.append({"sku": sku, "quantity": quantity, "key": idempotency_key})
        return sent[-1]

    return agent, sent


def executor(agent: Agent) -> ToolExecutor:
    return ToolExecutor(agent.tools, FakeCredentialProvider(), InMemoryAuditSink())


def ctx(scope: str) -> ExecContext:
    return ExecContext(tenant_id="acme", task_id="t1", trace_id="tr", step_scope=scope,
                       request_id="r1")  # fmt: skip


def test_the_schema_is_the_signature_closed_with_the_docstring_as_description() -> None:
    agent, _ = make()
    d = agent.tools.get("shop.find")
    assert d is not None and d.description == "Find a product."
    assert d.args_schema["required"] == ["sku"]
    assert d.args_schema["additionalProperties"] is False
    assert d.args_schema["properties"]["size"]["enum"] == ["S", "M"]
    assert d.step_scopes == {WORK}
    effect = agent.tools.get("shop.order")
    assert effect is not None and effect.side_effect == "keyed"
    # The key is the executor's to fill: the model neither sees nor sets it.
    assert "idempotency_key" not in effect.args_schema["properties"]
    assert effect.step_scopes == {EXECUTE} and effect.reconcile_tool == "shop.order.by_key"
    assert agent.tools.get("shop.order.by_key").step_scopes == {RECONCILE}  # type: ignore[union-attr]
    # What the model is offered: reads of the step, and effects only while working.
    assert [d.name for d in agent.offered(WORK, "acme")] == ["shop.find", "shop.order"]
    assert [d.name for d in agent.offered(REPLY, "acme")] == []


def test_a_read_runs_with_coerced_arguments_and_an_effect_with_its_key() -> None:
    agent, sent = make()
    ex = executor(agent)
    out = ex.execute(
        ToolCall(tool="shop.find", args={"sku": "A", "to": {"city": "Lyon"}}), ctx(WORK)
    )
    assert out == Ok(result={"sku": "A", "size": "M", "city": "Lyon"})
    d = agent.tools.get("shop.order")
    assert d is not None
    args = {"sku": "A", "quantity": 2}
    stamp = PolicyStamp(decision="allow", action_hash=action_hash(d.name, d.version, args),
                        policy_version="t@1")  # fmt: skip
    call = ToolCall(tool=d.name, args=args, idempotency_key="order:acme:A", policy_decision=stamp)
    assert isinstance(ex.execute(call, ctx(EXECUTE)), Ok)
    assert sent == [{"sku": "A", "quantity": 2, "key": "order:acme:A"}]
    # Not from the work step, and never without the key the template makes.
    assert ex.execute(call, ctx(WORK)).code == "outside_scope"  # type: ignore[union-attr]
    wrong = call.model_copy(update={"idempotency_key": "order:acme:B"})
    assert ex.execute(wrong, ctx(EXECUTE)).code == "idempotency_key_mismatch"  # type: ignore[union-attr]
    lookup = ToolCall(tool="shop.order.by_key", args={"idempotency_key": "order:acme:A"})
    found = ex.execute(lookup, ctx(RECONCILE))
    assert isinstance(found, Ok) and found_of(found.result) == sent[0]
    none = ex.execute(lookup.model_copy(update={"args": {"idempotency_key": "x"}}), ctx(RECONCILE))
    assert isinstance(none, Ok) and found_of(none.result) is None
    assert len(sent) == 1


def test_a_function_refusing_is_a_definitive_rejection() -> None:
    agent = Agent("t", prompt="p")

    @agent.tool()
    def closed(x: int) -> dict[str, Any]:
        """Always refuses."""
        raise ToolRejected("closed", "shop closed")

    out = executor(agent).execute(ToolCall(tool="closed", args={"x": 1}), ctx(WORK))
    assert out == Rejected(code="closed", message="shop closed")


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(max_size=20), st.none() | st.integers() | st.text(max_size=30)))
def test_arguments_a_model_invents_are_refused_before_the_function_runs(
    args: dict[str, Any],
) -> None:
    agent, _ = make()
    out = executor(agent).execute(ToolCall(tool="shop.find", args=args), ctx(WORK))
    valid = set(args) <= {"sku", "size", "to"} and isinstance(args.get("sku"), str)
    valid = valid and args.get("size", "M") in ("S", "M") and args.get("to") is None
    if not valid:
        assert isinstance(out, Rejected) and out.code == "bad_args", (args, out)
    else:
        assert isinstance(out, Ok)


def test_declarations_that_cannot_work_fail_at_import() -> None:
    agent = Agent("t", prompt="p")
    with pytest.raises(ConfigError, match="no type hint"):
        agent.tool()(lambda x: x)

    def untyped_key(sku: str, note: str | None = None) -> None:
        """x"""

    with pytest.raises(ConfigError, match="optional args"):
        agent.effect(key="k:{note}", lookup=lambda k: None)(untyped_key)
    with pytest.raises(ConfigError, match="neither"):
        agent.effect(key="k:{missing}", lookup=lambda k: None)(untyped_key)

    @agent.tool("dup")
    def one(a: int) -> None:
        """x"""

    with pytest.raises(ConfigError, match="declared twice"):
        agent.tool("dup")(one)


def test_what_a_lookup_answers_is_read_as_the_effect_found_or_none() -> None:
    row = {"order_id": "o1", "sku": "A"}
    assert found_of({"found": row}) == row
    assert found_of({"found": None}) is None
    assert found_of({"found": False}) is None
    assert found_of({"found": True, **row}) == row  # an MCP server that says so inline
    mcp = {"content": [{"type": "text", "text": "..."}], "structured": {"found": True, **row}}
    assert found_of(as_object(mcp)) == row  # an MCP result, in the one stored shape
    assert found_of(row) == row  # an HTTP lookup answering the effect itself
    assert found_of({}) is None and found_of(None) is None and found_of([row]) is None
