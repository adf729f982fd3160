"""Contracts, the proposal schema, the token estimator and the chat-completions shape."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agent_jobs.core.errors import AgentJobsError
from agent_jobs.gateway import (
    PROPOSAL_V3,
    BudgetExceeded,
    CallRecord,
    InvalidModelOutput,
    Message,
    ModelRequest,
    ModelUnavailable,
    ProviderRejected,
    TaskUsage,
    ToolSpec,
    estimate_input_tokens,
    estimate_text_tokens,
)
from agent_jobs.gateway.chat import chat_completion, parse_chat_response, proposal_message
from agent_jobs.gateway.schemas import validation_errors

TOOL_CALLS = {
    "kind": "tool_calls",
    "calls": [{"tool": "payments.list", "args": {"order_id": "ord_42"}}],
    "rationale": "need the payments",
}
DRAFT = {
    "kind": "final_draft",
    "draft": {
        "text": "We refunded the duplicate charge.",
        "claims": [
            {"type": "duplicate_charge", "payment_ids": ["pay_1", "pay_2"]},
            {
                "type": "refund_submitted",
                "refund_id": "re_9",
                "amount_minor": 129900,
                "status": "processing",
            },
            {"type": "policy_cited", "doc": "POL-REF-004", "version": "4"},
            {"type": "no_refund", "reason": "already refunded"},
        ],
    },
}
NO_ACTION = {"kind": "no_action", "reason": "nothing to do"}


@pytest.mark.parametrize("proposal", [TOOL_CALLS, DRAFT, NO_ACTION])
def test_proposal_v3_accepts_each_kind(proposal: dict[str, Any]) -> None:
    assert validation_errors(PROPOSAL_V3, proposal) == []


@pytest.mark.parametrize(
    ("proposal", "error"),
    [
        ({"kind": "refund_now"}, "$.kind: 'refund_now' is not one of"),
        ({"calls": []}, "$: 'kind' is a required property"),
        ({**TOOL_CALLS, "rationale": None}, "$.rationale"),
        ({k: v for k, v in TOOL_CALLS.items() if k != "rationale"}, "'rationale' is a required"),
        ({**TOOL_CALLS, "calls": []}, "$.calls"),
        ({**TOOL_CALLS, "calls": [{"tool": "x", "args": {}, "amount": 1}]}, "$.calls[0]"),
        ({**NO_ACTION, "extra": 1}, "Additional properties"),
        ({"kind": "no_action"}, "'reason' is a required property"),
        (
            {
                "kind": "final_draft",
                "draft": {
                    "text": "t",
                    "claims": [
                        {
                            "type": "refund_submitted",
                            "refund_id": "r",
                            "amount_minor": 5,
                            "status": "pending",
                        }
                    ],
                },
            },
            "$.draft.claims[0].status",
        ),
        (
            {
                "kind": "final_draft",
                "draft": {"text": "t", "claims": [{"type": "duplicate_charge", "payment_ids": []}]},
            },
            "$.draft.claims[0].payment_ids",
        ),
        (
            {"kind": "final_draft", "draft": {"text": "t", "claims": [{"type": "guess"}]}},
            "$.draft.claims[0].type",
        ),
    ],
)
def test_proposal_v3_names_the_wrong_field(proposal: dict[str, Any], error: str) -> None:
    errors = validation_errors(PROPOSAL_V3, proposal)
    assert any(error in e for e in errors), errors


def test_usage_round_trips_through_json_exactly() -> None:
    usage = TaskUsage(calls=3, input_tokens=100, output_tokens=7, cost=Decimal("0.0002"))
    dumped = json.loads(json.dumps(usage.model_dump(mode="json")))
    assert dumped["cost"] == "0.0002"
    assert TaskUsage.model_validate(dumped) == usage


def test_usage_plus_adds_one_call() -> None:
    after = TaskUsage(calls=1, input_tokens=10, output_tokens=1, cost=Decimal("0.1")).plus(
        CallRecord(input_tokens=5, output_tokens=2, cached_input_tokens=3, cost=Decimal("0.01"))
    )
    assert after == TaskUsage(
        calls=2, input_tokens=15, output_tokens=3, cached_input_tokens=3, cost=Decimal("0.11")
    )


def _req(**changes: Any) -> dict[str, Any]:
    return {
        "tenant_id": "acme",
        "task_id": "t1",
        "step_type": "plan",
        "messages": [{"role": "user", "content": "hi"}],
        **changes,
    }


@pytest.mark.parametrize(
    "changes",
    [
        {"tenant_id": "Acme Corp"},
        {"messages": []},
        {"messages": [{"role": "robot", "content": "x"}]},
        {"tools": [{"name": "a"}, {"name": "a"}]},
        {"usage": {"calls": -1}},
        {"surprise": 1},
    ],
)
def test_invalid_requests_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ModelRequest.model_validate(_req(**changes))


def test_requests_are_frozen() -> None:
    req = ModelRequest.model_validate(_req())
    with pytest.raises(ValidationError):
        req.step_type = "execute"  # type: ignore[misc]


def test_errors_are_typed_and_say_if_retrying_helps() -> None:
    assert issubclass(BudgetExceeded, AgentJobsError)
    assert not BudgetExceeded("max_calls_per_task", limit=8, requested=9, route="r@1").retryable
    assert ModelUnavailable("rate_limited", retry_after_s=3).retry_after_s == 3
    assert ModelUnavailable("timeout").retryable
    assert InvalidModelOutput(["$: bad"]).retryable
    assert not ProviderRejected(400).retryable
    exc = BudgetExceeded("max_input_tokens_per_task", limit=60_000, requested=61_000, route="r@1")
    assert "max_input_tokens_per_task is 60000" in str(exc)
    assert exc.budget == "max_input_tokens_per_task"


def test_token_estimator_is_ceil_of_chars_over_four() -> None:
    assert [estimate_text_tokens(t) for t in ("", "a", "abcd", "abcde", "é" * 8)] == [0, 1, 1, 2, 2]
    msgs = [Message(role="system", content="x" * 40), Message(role="user", content="y" * 41)]
    assert estimate_input_tokens(msgs) == (10 + 4) + (11 + 4)
    tool = ToolSpec(name="t", parameters={"type": "object"})
    tool_json = '{"description":"","name":"t","parameters":{"type":"object"}}'
    schema = {"type": "object"}
    assert estimate_input_tokens(msgs, [tool], schema) == (
        29 + estimate_text_tokens(tool_json) + estimate_text_tokens('{"type":"object"}')
    )


# --- the chat-completions shape ------------------------------------------------------------


def _response(message: dict[str, Any], **usage: Any) -> dict[str, Any]:
    return {"choices": [{"message": message}], **({"usage": usage} if usage else {})}


def test_content_json_is_the_proposal() -> None:
    parsed = parse_chat_response(
        _response({"content": json.dumps(DRAFT)}, prompt_tokens=9, completion_tokens=3)
    )
    assert parsed.proposal == DRAFT and parsed.errors == []
    assert (parsed.prompt_tokens, parsed.completion_tokens, parsed.cached_tokens) == (9, 3, 0)


def test_a_fenced_json_reply_is_unwrapped() -> None:
    text = "```json\n" + json.dumps(NO_ACTION) + "\n```"
    assert parse_chat_response(_response({"content": text})).proposal == NO_ACTION


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"content": "Sure! I will refund it."}, "not valid JSON"),
        ({"content": "[1, 2]"}, "must be a JSON object"),
        ({"content": ""}, "empty"),
        ({"content": None, "refusal": "I can't help"}, "refused"),
        ({"tool_calls": [{"function": {"name": "a", "arguments": "{oops"}}]}, "not valid JSON"),
        ({"tool_calls": [{"function": {"name": "a", "arguments": "[]"}}]}, "JSON object"),
        ({"tool_calls": [{"type": "function"}]}, "no function name"),
    ],
)
def test_unusable_replies_become_errors(message: dict[str, Any], error: str) -> None:
    parsed = parse_chat_response(_response(message))
    assert parsed.proposal is None
    assert error in parsed.errors[0]


@pytest.mark.parametrize("body", [{}, {"choices": []}, {"choices": [{"text": "x"}]}])
def test_a_response_without_a_message_is_an_error(body: dict[str, Any]) -> None:
    assert parse_chat_response(body).errors == ["$: response has no choices[0].message"]


def test_usage_is_read_defensively() -> None:
    parsed = parse_chat_response(
        _response(
            {"content": "{}"},
            prompt_tokens=100,
            completion_tokens="7",
            prompt_tokens_details={"cached_tokens": 80},
        )
    )
    assert (parsed.prompt_tokens, parsed.completion_tokens, parsed.cached_tokens) == (100, None, 80)
    nonsense = _response(
        {"content": "{}"}, prompt_tokens=10, prompt_tokens_details={"cached_tokens": 80}
    )
    assert parse_chat_response(nonsense).cached_tokens == 0
    assert parse_chat_response(_response({"content": "{}"})).prompt_tokens is None


def test_tool_calls_become_a_proposal_with_the_text_as_rationale() -> None:
    message = proposal_message(TOOL_CALLS)
    assert message["content"] == "need the payments"
    assert message["tool_calls"][0]["function"] == {
        "name": "payments.list",
        "arguments": '{"order_id": "ord_42"}',
    }
    parsed = parse_chat_response(
        chat_completion("m-2026-01", message, prompt_tokens=1, completion_tokens=1)
    )
    assert parsed.proposal == TOOL_CALLS


def test_as_tool_calls_false_sends_json_content() -> None:
    message = proposal_message(TOOL_CALLS, as_tool_calls=False)
    assert "tool_calls" not in message
    assert json.loads(message["content"]) == TOOL_CALLS


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=50, deadline=None)
@given(
    calls=st.lists(
        st.fixed_dictionaries(
            {
                "tool": st.text(min_size=1, max_size=20),
                "args": st.dictionaries(st.text(max_size=6), _json, max_size=4),
            }
        ),
        min_size=1,
        max_size=4,
    ),
    rationale=st.text(min_size=1, max_size=30),
)
def test_tool_calls_round_trip_through_the_wire_shape(
    calls: list[dict[str, Any]], rationale: str
) -> None:
    proposal = {"kind": "tool_calls", "calls": calls, "rationale": rationale}
    response = chat_completion(
        "m-2026-01", proposal_message(proposal), prompt_tokens=1, completion_tokens=1
    )
    assert parse_chat_response(json.loads(json.dumps(response))).proposal == proposal
