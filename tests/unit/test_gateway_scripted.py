"""The scripted provider: a real model's response shape, deterministic, and honest about it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_jobs.gateway import (
    PROPOSAL_V3,
    Message,
    ModelRequest,
    ModelUnavailable,
    ProviderRejected,
    ScriptedProvider,
    Timeouts,
    ToolSpec,
    estimate_input_tokens,
    estimate_text_tokens,
)

TIMEOUTS = Timeouts(connect_s=1, total_s=5)
MODEL = "scripted-refund-2026-03"
TOOLS = [ToolSpec(name="payments.list", parameters={"type": "object"})]


def rules(req: ModelRequest) -> dict[str, Any]:
    if "payments" not in req.facts:
        return {
            "kind": "tool_calls",
            "rationale": "look first",
            "calls": [{"tool": "payments.list", "args": {"order_id": req.facts["order"]}}],
        }
    return {"kind": "no_action", "reason": f"{len(req.facts['payments'])} payment(s)"}


def request(**facts: Any) -> ModelRequest:
    return ModelRequest(
        tenant_id="acme",
        task_id="t1",
        step_type="plan",
        messages=[Message(role="user", content="charged twice")],
        tools=TOOLS,
        facts={"order": "ord_42", **facts},
    )


def complete(provider: ScriptedProvider, req: ModelRequest) -> dict[str, Any]:
    return provider.complete(MODEL, req.messages, req.tools, PROPOSAL_V3, TIMEOUTS, request=req)


def test_tool_calls_are_sent_as_tool_calls_with_estimated_tokens() -> None:
    req = request()
    resp = complete(ScriptedProvider(rules), req)
    assert resp["scripted"] is True and resp["model"] == MODEL
    choice = resp["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] == "look first"
    assert message["tool_calls"] == [
        {
            "id": "call_0",
            "type": "function",
            "function": {"name": "payments.list", "arguments": '{"order_id": "ord_42"}'},
        }
    ]
    assert resp["usage"]["prompt_tokens"] == estimate_input_tokens(req.messages, TOOLS, PROPOSAL_V3)
    assert resp["usage"]["completion_tokens"] == estimate_text_tokens(
        "look first" + "payments.list" + '{"order_id": "ord_42"}'
    )


def test_other_kinds_are_json_content_and_rules_see_the_facts() -> None:
    resp = complete(ScriptedProvider(rules), request(payments=["p1", "p2"]))
    message = resp["choices"][0]["message"]
    assert json.loads(message["content"]) == {"kind": "no_action", "reason": "2 payment(s)"}
    assert resp["choices"][0]["finish_reason"] == "stop"


def test_same_request_same_answer() -> None:
    a, b = ScriptedProvider(rules), ScriptedProvider(rules)
    assert complete(a, request()) == complete(b, request())


def test_it_refuses_models_that_are_not_scripted() -> None:
    with pytest.raises(ProviderRejected, match="scripted"):
        ScriptedProvider(rules).complete(
            "model-x-2026-03", [], [], None, TIMEOUTS, request=request()
        )


def test_unavailable_n_times_then_answers() -> None:
    provider = ScriptedProvider(rules, unavailable=2, retry_after_s=3)
    for _ in range(2):
        with pytest.raises(ModelUnavailable) as err:
            complete(provider, request())
        assert err.value.retry_after_s == 3
    assert complete(provider, request())["choices"][0]["message"]["tool_calls"]
    assert provider.calls == 3


@pytest.mark.parametrize(
    ("kind", "check"), [("not_json", "not json"), ("wrong_schema", "refund_now")]
)
def test_malformed_n_times_then_answers(kind: Any, check: str) -> None:
    provider = ScriptedProvider(rules, malformed=1, malformed_kind=kind)
    bad = complete(provider, request())["choices"][0]["message"]["content"]
    if check == "not json":
        with pytest.raises(json.JSONDecodeError):
            json.loads(bad)
    else:
        assert check in bad
    assert complete(provider, request())["choices"][0]["message"]["tool_calls"]


def test_fail_next_arms_more_faults_and_requests_are_recorded() -> None:
    provider = ScriptedProvider(rules)
    provider.fail_next(unavailable=1, malformed=1)
    with pytest.raises(ModelUnavailable):
        complete(provider, request())
    assert "tool_calls" not in complete(provider, request())["choices"][0]["message"]
    assert "tool_calls" in complete(provider, request())["choices"][0]["message"]
    assert [r.facts["order"] for r in provider.requests] == ["ord_42"] * 3
