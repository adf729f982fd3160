"""The gateway's order of checks, with the scripted provider and a clock moved by hand."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import pytest

from agent_jobs.core.clock import FixedClock
from agent_jobs.core.errors import ConfigError, InvalidInput
from agent_jobs.gateway import (
    DEFAULT_ROUTE,
    DEFAULT_ROUTE_CONFIG,
    PROPOSAL_V3,
    BreakerState,
    BudgetExceeded,
    ChatResponse,
    InvalidModelOutput,
    Message,
    ModelGateway,
    ModelRequest,
    ModelUnavailable,
    ProviderRejected,
    Route,
    ScriptedProvider,
    TaskUsage,
    Timeouts,
    ToolSpec,
    estimate_input_tokens,
    estimate_text_tokens,
    load_routes,
)
from agent_jobs.gateway.chat import chat_completion, proposal_message
from agent_jobs.gateway.costmodel import SEED_PRICE, call_cost
from agent_jobs.gateway.providers.scripted import MALFORMED_OUTPUTS
from agent_jobs.gateway.testing import scripted_gateway

KEY = "support-tier2@2026-03"
PRIMARY = "scripted-refund-2026-03"
FALLBACK = "scripted-refund-small-2026-02"
TOOLS = [
    ToolSpec(
        name="payments.list",
        description="List an order's payments.",
        parameters={
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
            "additionalProperties": False,
        },
    ),
    ToolSpec(name="policy.search", parameters={"type": "object"}),
]
LOOKUP = {
    "kind": "tool_calls",
    "rationale": "check payments",
    "calls": [{"tool": "payments.list", "args": {"order_id": "ord_42"}}],
}
DRAFT = {
    "kind": "final_draft",
    "draft": {
        "text": "Refund is processing.",
        "claims": [
            {
                "type": "refund_submitted",
                "refund_id": "re_1",
                "amount_minor": 129900,
                "status": "processing",
            }
        ],
    },
}


def rules(req: ModelRequest) -> dict[str, Any]:
    return DRAFT if "payments" in req.facts else LOOKUP


def request(
    step_type: str = "plan", usage: TaskUsage | None = None, **changes: Any
) -> ModelRequest:
    fields: dict[str, Any] = {
        "tenant_id": "acme",
        "task_id": "t-1",
        "step_type": step_type,
        "messages": [
            Message(role="system", content="You resolve refund requests."),
            Message(role="user", content="I was charged twice for order 42."),
        ],
        "tools": TOOLS,
        "usage": usage or TaskUsage(),
        **changes,
    }
    return ModelRequest(**fields)


def two_provider_route(**budgets: int) -> Route:
    data = copy.deepcopy(DEFAULT_ROUTE_CONFIG)
    data["primary"]["provider"] = "primary"
    data["fallback"]["provider"] = "backup"
    data["budgets"].update(budgets)
    return load_routes(data)[KEY]


def gateway(
    primary: Any, backup: Any = None, clock: FixedClock | None = None, **budgets: int
) -> ModelGateway:
    providers = {"primary": primary, "backup": backup or ScriptedProvider(rules)}
    return ModelGateway([two_provider_route(**budgets)], providers, clock or FixedClock())


def estimate(req: ModelRequest, extra: Sequence[Message] = ()) -> int:
    return estimate_input_tokens([*req.messages, *extra], req.tools, PROPOSAL_V3)


# --- success and accounting --------------------------------------------------------------


def test_a_valid_answer_is_returned_with_its_cost() -> None:
    provider = ScriptedProvider(rules)
    req = request(facts={"payments": ["p1", "p2"]})
    result = ModelGateway([DEFAULT_ROUTE], {"scripted": provider}, FixedClock()).propose(KEY, req)
    assert result.proposal == DRAFT
    assert (result.route, result.provider, result.model) == (KEY, "scripted", PRIMARY)
    assert not result.repaired and not result.fallback
    out = estimate_text_tokens(proposal_message(DRAFT)["content"])
    assert (result.input_tokens, result.output_tokens) == (estimate(req), out)
    assert result.cost == call_cost(estimate(req), out, 0, SEED_PRICE)
    assert result.usage_after == TaskUsage(
        calls=1, input_tokens=estimate(req), output_tokens=out, cost=result.cost
    )
    assert len(result.calls) == 1 and result.calls[0].tokens_reported


def test_tool_calls_come_back_as_a_tool_calls_proposal() -> None:
    result = gateway(ScriptedProvider(rules)).propose(KEY, request())
    assert result.proposal == LOOKUP


def test_usage_accumulates_on_what_the_task_already_spent() -> None:
    before = TaskUsage(
        calls=3, input_tokens=9_000, output_tokens=400, cached_input_tokens=10, cost=Decimal("2.1")
    )
    result = gateway(ScriptedProvider(rules)).propose(KEY, request(usage=before))
    after = result.usage_after
    assert after.calls == 4
    assert after.input_tokens == 9_000 + result.input_tokens
    assert after.output_tokens == 400 + result.output_tokens
    assert after.cached_input_tokens == 10
    assert after.cost == Decimal("2.1") + result.cost


class Reporting:
    """A provider that reports its own token counts (or none), and may take a while."""

    def __init__(
        self, usage: dict[str, Any] | None, clock: FixedClock | None = None, takes_s: float = 0
    ) -> None:
        self.usage, self.clock, self.takes_s = usage, clock, takes_s

    def complete(
        self,
        model: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        output_schema: Mapping[str, Any] | None,
        timeouts: Timeouts,
        *,
        request: ModelRequest,
    ) -> ChatResponse:
        if self.clock:
            self.clock.advance(self.takes_s)
        resp = chat_completion(
            model, proposal_message(LOOKUP), prompt_tokens=0, completion_tokens=0
        )
        if self.usage is None:
            del resp["usage"]
        else:
            resp["usage"] = self.usage
        return resp


def test_reported_token_counts_replace_the_estimate() -> None:
    usage = {
        "prompt_tokens": 5_000,
        "completion_tokens": 40,
        "prompt_tokens_details": {"cached_tokens": 3_000},
    }
    result = gateway(Reporting(usage)).propose(KEY, request())
    assert (result.input_tokens, result.output_tokens, result.cached_input_tokens) == (
        5_000,
        40,
        3_000,
    )
    # 2,000 fresh x 0.20 + 3,000 cached x 0.05 + 40 x 0.80, per 1K
    assert result.cost == Decimal("0.582")
    assert result.usage_after.input_tokens == 5_000


def test_without_reported_counts_the_estimate_is_billed() -> None:
    req = request()
    result = gateway(Reporting(None)).propose(KEY, req)
    assert result.input_tokens == estimate(req)
    assert not result.calls[0].tokens_reported


def test_latency_is_measured_on_the_injected_clock() -> None:
    clock = FixedClock()
    result = gateway(Reporting(None, clock, takes_s=1.5), clock=clock).propose(KEY, request())
    assert result.latency_ms == 1_500 == result.calls[0].latency_ms


# --- budgets: checked before anything is sent --------------------------------------------


@pytest.mark.parametrize(
    ("budget", "req"),
    [
        ("max_calls_per_task", request(usage=TaskUsage(calls=8))),
        (
            "max_input_tokens_per_call",
            request(messages=[Message(role="user", content="x" * 4 * 12_000)]),
        ),
        ("max_input_tokens_per_task", request(usage=TaskUsage(calls=1, input_tokens=59_500))),
    ],
)
def test_over_budget_raises_before_any_call(budget: str, req: ModelRequest) -> None:
    primary, backup = ScriptedProvider(rules), ScriptedProvider(rules)
    with pytest.raises(BudgetExceeded) as err:
        gateway(primary, backup).propose(KEY, req)
    assert err.value.budget == budget
    assert not err.value.retryable
    assert err.value.usage_after == req.usage
    assert primary.calls == 0 and backup.calls == 0


def test_the_last_call_within_budget_is_allowed() -> None:
    result = gateway(ScriptedProvider(rules)).propose(KEY, request(usage=TaskUsage(calls=7)))
    assert result.usage_after.calls == 8


def test_the_task_token_budget_counts_this_call() -> None:
    req = request()
    room = 60_000 - estimate(req)
    gateway(ScriptedProvider(rules)).propose(KEY, request(usage=TaskUsage(input_tokens=room)))
    with pytest.raises(BudgetExceeded):
        gateway(ScriptedProvider(rules)).propose(
            KEY, request(usage=TaskUsage(input_tokens=room + 1))
        )


# --- repair once, then fail --------------------------------------------------------------


@pytest.mark.parametrize("kind", ["not_json", "wrong_schema"])
def test_invalid_output_is_repaired_once(kind: Any) -> None:
    provider = ScriptedProvider(rules, malformed=1, malformed_kind=kind)
    req = request()
    result = gateway(provider).propose(KEY, req)
    assert result.repaired and result.proposal == LOOKUP
    assert provider.calls == 2
    repair = provider.requests[1].messages
    assert repair[:2] == req.messages
    assert repair[2].role == "assistant"
    assert repair[2].content == MALFORMED_OUTPUTS[kind]  # the invalid output, echoed
    assert repair[3].role == "user" and "rejected" in repair[3].content
    assert ("not valid JSON" if kind == "not_json" else "'refund_now'") in repair[3].content
    assert [c.purpose for c in result.calls] == ["propose", "repair"]
    assert result.usage_after.calls == 2
    assert result.input_tokens == sum(c.input_tokens for c in result.calls)
    assert result.calls[1].input_tokens == estimate(req, repair[2:])


def test_still_invalid_after_the_repair_raises() -> None:
    provider = ScriptedProvider(rules, malformed=2, malformed_kind="wrong_schema")
    with pytest.raises(InvalidModelOutput) as err:
        gateway(provider).propose(KEY, request())
    assert provider.calls == 2  # one repair, never a loop
    assert err.value.retryable
    assert "refund_now" in err.value.errors[0]
    assert err.value.usage_after is not None and err.value.usage_after.calls == 2


def test_the_repair_call_is_held_to_the_budget_too() -> None:
    provider = ScriptedProvider(rules, malformed=1)
    with pytest.raises(BudgetExceeded) as err:
        gateway(provider).propose(KEY, request(usage=TaskUsage(calls=7)))
    assert provider.calls == 1
    assert err.value.usage_after is not None and err.value.usage_after.calls == 8


def scripted_until_told(first: dict[str, Any]) -> ScriptedProvider:
    """Answers `first`, and LOOKUP once the repair message says what was wrong."""

    def repairing(req: ModelRequest) -> dict[str, Any]:
        return LOOKUP if "rejected" in req.messages[-1].content else first

    return ScriptedProvider(repairing)


def test_a_call_to_a_tool_that_was_not_offered_is_repaired() -> None:
    provider = scripted_until_told({**LOOKUP, "calls": [{"tool": "wire.send", "args": {}}]})
    result = gateway(provider).propose(KEY, request())
    assert result.repaired
    assert "'wire.send' is not an offered tool" in provider.requests[1].messages[-1].content


def test_tool_args_are_checked_against_the_tool_schema() -> None:
    provider = scripted_until_told(
        {**LOOKUP, "calls": [{"tool": "payments.list", "args": {"order": 42}}]}
    )
    result = gateway(provider).propose(KEY, request())
    assert result.repaired
    assert "$.calls[0].args: 'order_id' is a required property" in (
        provider.requests[1].messages[-1].content
    )


def test_a_request_schema_overrides_the_route_schema() -> None:
    schema = {
        "type": "object",
        "required": ["summary"],
        "properties": {"summary": {"type": "string"}},
    }
    provider = ScriptedProvider(lambda req: {"summary": "two charges"})
    result = gateway(provider).propose(KEY, request(output_schema=schema, tools=[]))
    assert result.proposal == {"summary": "two charges"}


def test_a_broken_request_schema_is_invalid_input() -> None:
    provider = ScriptedProvider(rules)
    with pytest.raises(InvalidInput):
        gateway(provider).propose(KEY, request(output_schema={"type": "nonsense"}))
    assert provider.calls == 0


# --- fallback, breaker and errors --------------------------------------------------------


def test_fallback_serves_allowed_step_types() -> None:
    primary, backup = ScriptedProvider(rules, unavailable=1), ScriptedProvider(rules)
    result = gateway(primary, backup).propose(KEY, request("draft_reply"))
    assert result.fallback and (result.provider, result.model) == ("backup", FALLBACK)
    assert result.calls[0].fallback
    assert primary.calls == 1 and backup.calls == 1
    assert result.usage_after.calls == 1  # the failed call returned nothing and is not billed


def test_fallback_is_never_used_for_other_step_types() -> None:
    primary, backup = (
        ScriptedProvider(rules, unavailable=1, retry_after_s=7),
        ScriptedProvider(rules),
    )
    req = request("plan")
    with pytest.raises(ModelUnavailable) as err:
        gateway(primary, backup).propose(KEY, req)
    assert backup.calls == 0
    assert err.value.retry_after_s == 7
    assert (err.value.provider, err.value.model) == ("scripted", PRIMARY)
    assert err.value.usage_after == req.usage


def test_both_unavailable_keeps_the_primarys_retry_hint() -> None:
    primary = ScriptedProvider(rules, unavailable=1, retry_after_s=9)
    backup = ScriptedProvider(rules, unavailable=1, retry_after_s=1)
    with pytest.raises(ModelUnavailable) as err:
        gateway(primary, backup).propose(KEY, request("summarize"))
    assert err.value.retry_after_s == 9
    assert "fallback" in str(err.value)


def test_a_repair_goes_to_the_model_that_answered() -> None:
    primary = ScriptedProvider(rules, unavailable=1)
    backup = ScriptedProvider(rules, malformed=1)
    result = gateway(primary, backup).propose(KEY, request("draft_reply"))
    assert result.fallback and result.repaired
    assert primary.calls == 1 and backup.calls == 2


def test_breaker_opens_fails_fast_and_recovers_through_a_probe() -> None:
    clock = FixedClock()
    primary = ScriptedProvider(rules, unavailable=5)
    gw = gateway(primary, clock=clock)
    for _ in range(5):
        with pytest.raises(ModelUnavailable) as err:
            gw.propose(KEY, request())
        assert err.value.reason == "server_error"
    with pytest.raises(ModelUnavailable) as err:
        gw.propose(KEY, request())
    assert err.value.reason == "breaker_open" and err.value.retry_after_s == 20
    assert primary.calls == 5  # failed fast, nothing sent
    clock.advance(20)
    assert gw.breaker(KEY).state is BreakerState.HALF_OPEN
    assert gw.propose(KEY, request()).proposal == LOOKUP
    assert gw.breaker(KEY).state is BreakerState.CLOSED
    assert primary.calls == 6


def test_an_open_primary_breaker_sends_allowed_steps_straight_to_the_fallback() -> None:
    primary, backup = ScriptedProvider(rules, unavailable=5), ScriptedProvider(rules)
    gw = gateway(primary, backup)
    for _ in range(5):
        with pytest.raises(ModelUnavailable):
            gw.propose(KEY, request())
    assert gw.propose(KEY, request("summarize")).fallback
    assert primary.calls == 5


def test_invalid_output_is_not_a_breaker_failure() -> None:
    gw = gateway(ScriptedProvider(rules, malformed=20))
    for _ in range(6):
        with pytest.raises(InvalidModelOutput):
            gw.propose(KEY, request())
    assert gw.breaker(KEY).state is BreakerState.CLOSED


def test_a_rejected_request_is_not_retryable_and_not_a_breaker_failure() -> None:
    data = copy.deepcopy(DEFAULT_ROUTE_CONFIG)
    data["primary"]["model"] = "model-x-2026-03"
    data["prices"]["model-x-2026-03"] = data["prices"][PRIMARY]
    provider = ScriptedProvider(rules)
    gw = ModelGateway(load_routes(data), {"scripted": provider}, FixedClock())
    for _ in range(6):
        with pytest.raises(ProviderRejected) as err:
            gw.propose(KEY, request("summarize"))
        assert not err.value.retryable and err.value.usage_after == TaskUsage()
    assert gw.breaker(KEY).state is BreakerState.CLOSED


def test_unknown_route_and_missing_provider_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown model route"):
        gateway(ScriptedProvider(rules)).propose("support-tier2@1999-01", request())
    with pytest.raises(ConfigError, match="'backup' is not configured"):
        ModelGateway([two_provider_route()], {"primary": ScriptedProvider(rules)})


def test_concurrent_proposals_are_each_accounted() -> None:
    provider = ScriptedProvider(rules)
    gw = gateway(provider)
    results: list[Any] = []
    lock = threading.Lock()

    def call(i: int) -> None:
        r = gw.propose(KEY, request(usage=TaskUsage(calls=i % 8)))
        with lock:
            results.append((i, r))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert provider.calls == 16
    assert all(r.usage_after.calls == i % 8 + 1 for i, r in results)


def test_scripted_gateway_serves_the_default_route() -> None:
    provider = ScriptedProvider(rules)
    result = scripted_gateway(provider, FixedClock()).propose(KEY, request())
    assert (result.provider, result.model) == ("scripted", PRIMARY)
    assert provider.calls == 1


def test_an_empty_request_schema_accepts_any_object() -> None:
    provider = ScriptedProvider(lambda req: {"anything": [1, 2]})
    result = gateway(provider).propose(KEY, request(output_schema={}, tools=[]))
    assert result.proposal == {"anything": [1, 2]}
