"""The refund agent reads any contract-valid business system correctly (issue 9, point 4).

Each section is a bug a harsher implementation of the business-systems contract found: money in
a currency the policy has no threshold for, timestamps with different UTC offsets, customer names
made of ledger words, ids of any shape in the reply, a confirmation read that lags the write,
order references in a message, and text that is data (NUL, surrogates, bidi, megabytes).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from agent_jobs.core.contracts import Action
from agent_jobs.core.errors import ConfigError, InvalidInput
from agent_jobs.gateway import Message, ModelRequest, ScriptedProvider
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.policy import LedgerFacts, ProposedCall, RefundPolicyV4, get_bundle
from agent_jobs.sim import worlds
from agent_jobs.tools import Ok
from agent_jobs.verify import VerifiedFacts, check_text, redact
from agent_jobs.workflows.refund import (
    WORKFLOW,
    RefundRules,
    RefundWorkflow,
    phases,
    scripted_services,
)
from agent_jobs.workflows.refund import state as st
from agent_jobs.workflows.refund.model import ask
from agent_jobs.workflows.refund.prompts import MAX_TEXT_CHARS, build_messages
from agent_jobs.workflows.refund.rules import order_ref
from agent_jobs.workflows.refund.wiring import confirm_lag_s
from agent_jobs.workflows.refund.workflow import validate_input

PINNED = {"workflow": WORKFLOW, **RefundWorkflow().pinned()}
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BASE = datetime(2026, 3, 1, 4, 30, tzinfo=UTC)

Json = dict[str, Any]


def step_input(state: Json, **overrides: Any) -> wf.StepInput:
    fields: dict[str, Any] = {
        "task_id": "tsk_1",
        "tenant_id": "acme",
        "workflow": WORKFLOW,
        "requester": "svc-chat",
        "idempotency_key": "req-1",
        "input": {},
        "state": state,
        "pinned": PINNED,
        "attempts": 0,
        "trace_id": "trace",
        "cancel_requested": False,
        "emit": lambda type_, data: None,
    }
    return wf.StepInput(**{**fields, **overrides})


def stamp(at: datetime, offset_minutes: int) -> str:
    """`at` written in another UTC offset (the same instant); `Z` for offset 0."""
    local = at.astimezone(timezone(timedelta(minutes=offset_minutes)))
    text = local.isoformat()
    return text.replace("+00:00", "Z") if offset_minutes == 0 else text


def capture(pid: str, order_id: str, amount: int, currency: str, created_at: str) -> Json:
    return {
        "payment_id": pid,
        "order_id": order_id,
        "kind": "capture",
        "status": "captured",
        "amount_minor": amount,
        "currency": currency,
        "refunded_minor": 0,
        "created_at": created_at,
    }


def order(
    order_id: str, payments: list[Json], *, name: str = "Priya Sharma", note: str = ""
) -> Json:
    return {
        "order_id": order_id,
        "customer": {"customer_id": "cus_1", "name": name, "email": "p@example.com"},
        "total_minor": payments[0]["amount_minor"],
        "currency": payments[0]["currency"],
        "note": note,
        "payment_ids": [p["payment_id"] for p in payments],
    }


def observed(order_row: Json, payments: list[Json], message: str = "") -> Json:
    msg = message or f"Order {order_row['order_id']} was charged twice."
    state = st.initial_state(msg, "chat", None, "req-1")
    st.record_tool(state, "orders.get", {"order_id": order_row["order_id"]}, result=order_row)
    st.record_tool(
        state, "payments.list", {"order_id": order_row["order_id"]}, result={"payments": payments}
    )
    passage = {"doc_id": "POL-REF-004", "version": 4, "chunk_id": "c0003", "text": "Approval."}
    st.record_tool(state, "policy.search", {"q": "refund"}, result={"passages": [passage]})
    return state


def model_request(step: str, facts: Json) -> ModelRequest:
    return ModelRequest(
        tenant_id="acme",
        task_id="tsk_1",
        step_type=step,
        messages=[Message(role="user", content="x")],
        facts=facts,
    )


def decide_facts(state: Json) -> Json:
    """The facts the scripted model decides on, exactly as `model.ask` hands them over."""
    provider = ScriptedProvider(RefundRules())
    services = scripted_services("http://127.0.0.1:9", provider=provider)
    asked = ask(
        services, step_input(state), state, "decide", tools=[], facts=phases.model_facts(state)
    )
    assert not isinstance(asked, wf.Escalate | wf.Fail | wf.Retry), asked
    return dict(provider.requests[-1].facts)


# -- money is compared in the policy's currency ----------------------------------------------


def test_a_usd_refund_below_the_inr_threshold_is_not_auto_allowed() -> None:
    pays = [
        capture("pay_a", "9001", 50_000, "USD", "2026-03-01T04:30:00Z"),
        capture("pay_b", "9001", 50_000, "USD", "2026-03-01T04:31:00Z"),
    ]
    facts = LedgerFacts.from_responses(order=order("9001", pays), payments={"payments": pays})
    call = ProposedCall(
        tool="refunds.create",
        tool_version="2",
        args={"payment_id": "pay_b", "amount_minor": 50_000, "currency": "USD"},
    )
    decision = RefundPolicyV4().evaluate(call, facts)
    assert (decision.kind, getattr(decision, "reason", "")) == (
        "needs_approval",
        "currency_not_covered",
    )
    # Through the workflow's gate too: the reason is what the approval event carries.
    state = observed(order("9001", pays), pays)
    action = Action(tool="refunds.create", tool_version="2", args=call.args, idempotency_key="k")
    auth = RefundWorkflow(scripted_services("http://127.0.0.1:9")).authorize(
        step_input(state), action
    )
    assert (auth.kind, auth.reason) == ("needs_approval", "currency_not_covered")


@FAST
@given(
    currency=hs.from_regex(r"\A[A-Z]{3}\Z").filter(lambda c: c != "INR"),
    amount=hs.integers(min_value=1, max_value=10**9),
)
def test_no_currency_without_a_threshold_is_ever_allowed(currency: str, amount: int) -> None:
    pays = [
        capture("pay_a", "1", amount, currency, "2026-03-01T04:30:00Z"),
        capture("pay_b", "1", amount, currency, "2026-03-01T04:31:00Z"),
    ]
    facts = LedgerFacts.from_responses(order=order("1", pays), payments={"payments": pays})
    args = {"payment_id": "pay_b", "amount_minor": amount, "currency": currency}
    decision = get_bundle("POL-REF-004@4").evaluate(
        ProposedCall(tool="refunds.create", tool_version="2", args=args), facts
    )
    assert decision.kind == "needs_approval"


def test_inr_below_the_threshold_is_still_allowed() -> None:
    pays = [
        capture("pay_a", "1", 50_000, "INR", "2026-03-01T04:30:00Z"),
        capture("pay_b", "1", 50_000, "INR", "2026-03-01T04:31:00Z"),
    ]
    facts = LedgerFacts.from_responses(order=order("1", pays), payments={"payments": pays})
    args = {"payment_id": "pay_b", "amount_minor": 50_000, "currency": "INR"}
    decision = RefundPolicyV4().evaluate(
        ProposedCall(tool="refunds.create", tool_version="2", args=args), facts
    )
    assert decision.kind == "allow"


# -- instants, not strings ------------------------------------------------------------------

offsets = hs.integers(min_value=-12 * 60, max_value=14 * 60).map(lambda m: m - m % 15)


@FAST
@given(
    gap_s=hs.integers(min_value=1, max_value=6 * 3600),
    first_offset=offsets,
    second_offset=offsets,
    reverse_listing=hs.booleans(),
    names=hs.sampled_from([("pay_a", "pay_b"), ("pay_b", "pay_a"), ("pay_z", "pay_0")]),
)
def test_the_later_capture_is_refunded_whatever_the_offsets(
    gap_s: int,
    first_offset: int,
    second_offset: int,
    reverse_listing: bool,
    names: tuple[str, str],
) -> None:
    first, later = names
    pays = [
        capture(first, "8472", 200_000, "INR", stamp(BASE, first_offset)),
        capture(
            later, "8472", 200_000, "INR", stamp(BASE + timedelta(seconds=gap_s), second_offset)
        ),
    ]
    if reverse_listing:
        pays.reverse()
    state = observed(order("8472", pays), pays)
    proposal = RefundRules()(model_request("decide", decide_facts(state)))
    assert proposal["kind"] == "tool_calls", proposal
    args = proposal["calls"][0]["args"]
    assert args["payment_id"] == later
    decision = get_bundle("POL-REF-004@4").evaluate(
        ProposedCall(tool="refunds.create", tool_version="2", args=args), st.ledger_facts(state)
    )
    assert decision.kind == "needs_approval"


def test_the_issue_example_same_instant_is_one_instant() -> None:
    # "+05:30" at 10:00 and "Z" at 04:30 are the same moment: ties go to the payment id.
    pays = [
        capture("pay_2", "8472", 200_000, "INR", "2026-03-01T10:00:00+05:30"),
        capture("pay_1", "8472", 200_000, "INR", "2026-03-01T04:30:00Z"),
    ]
    state = observed(order("8472", pays), pays)
    proposal = RefundRules()(model_request("decide", decide_facts(state)))
    assert proposal["calls"][0]["args"]["payment_id"] == "pay_2"
    assert st.ledger_facts(state).duplicate_capture_confirmed("pay_2")


# -- names made of ledger words ---------------------------------------------------------------

LEDGER_WORDS = [
    *("INR", "capture", "captured", "succeeded", "processing", "authorization", "pay"),
    *("8472", "pay_8472_b", "cus_1", "POL", "refund", "Order", "twice"),
]


@FAST
@given(words=hs.lists(hs.sampled_from(LEDGER_WORDS), min_size=1, max_size=3))
def test_a_name_of_ledger_words_never_rewrites_the_ledger(words: list[str]) -> None:
    name = " ".join(words)
    pays = [
        capture("pay_8472_a", "8472", 200_000, "INR", "2026-03-01T04:30:00Z"),
        capture("pay_8472_b", "8472", 200_000, "INR", "2026-03-01T04:31:00Z"),
    ]
    row = order("8472", pays, name=name)
    state = observed(row, pays, message=f"Hi, {name} here. Order 8472 was charged twice.")
    facts = decide_facts(state)
    assert facts["payments"] == pays
    assert {k: v for k, v in facts["order"].items() if k != "customer"} == {
        k: v for k, v in row.items() if k != "customer"
    }
    assert facts["order"]["customer"]["customer_id"] == "cus_1"
    proposal = RefundRules()(model_request("decide", facts))
    assert proposal["calls"][0]["args"] == {
        "payment_id": "pay_8472_b",
        "amount_minor": 200_000,
        "currency": "INR",
    }
    text = " ".join(m.content for m in build_messages(state, "decide", st.customer(state)))
    assert '"currency":"INR"' in text and '"kind":"capture"' in text


def test_the_customer_is_still_masked_in_free_text() -> None:
    pays = [capture("pay_a", "8472", 1, "INR", "2026-03-01T04:30:00Z")]
    state = observed(order("8472", pays, name="Asha Inr"), pays, "Asha Inr: order 8472, Asha here")
    who = st.customer(state)
    masked = redact(state["request"]["message"], who)
    assert "Asha" not in masked and "[customer:cus_1]" in masked
    assert "8472" in masked


# -- ids of any shape in the reply ------------------------------------------------------------

ids = hs.one_of(
    hs.from_regex(r"\A\d{9,24}\Z"),
    hs.from_regex(r"\A\d{3}-\d{7}-\d{7}\Z"),
    hs.from_regex(r"\AOD\d{12,18}\Z"),
    hs.from_regex(r"\A[A-Z]{2}\d{2}[A-Z0-9]{10,20}\Z"),
)


def id_facts(order_id: str, payment_id: str, refund_id: str) -> VerifiedFacts:
    pays = [
        capture("pay_first", order_id, 200_000, "INR", "2026-03-01T04:30:00Z"),
        capture(payment_id, order_id, 200_000, "INR", "2026-03-01T04:31:00Z"),
    ]
    refund = {
        "refund_id": refund_id,
        "payment_id": payment_id,
        "amount_minor": 200_000,
        "currency": "INR",
        "status": "processing",
        "idempotency_key": "k",
    }
    return VerifiedFacts.from_observations(
        [
            ("orders.get", order(order_id, pays)),
            ("payments.list", {"payments": pays}),
            ("refunds.create", refund),
        ]
    )


@FAST
@given(order_id=ids, payment_id=ids, refund_id=ids)
def test_verified_ids_of_any_shape_never_trip_the_account_check(
    order_id: str, payment_id: str, refund_id: str
) -> None:
    facts = id_facts(order_id, payment_id, refund_id)
    text = (
        f"Hi [customer:cus_1], I checked order {order_id}. Payment {payment_id} was a duplicate; "
        f"I've submitted a refund (reference {refund_id}). It is processing."
    )
    assert "unverified_account" not in check_text(text, [], facts)
    # A real account that is not a known id is still caught, next to the ids.
    assert "unverified_account" in check_text(text + " Sent to account 99120044551.", [], facts)


def test_an_account_number_containing_a_known_id_is_still_caught() -> None:
    facts = id_facts("8472", "pay_b", "rf_1")
    assert "unverified_account" in check_text("Paid to 8472 1234 5678 90.", [], facts)
    assert "unverified_account" in check_text("Paid to 99998472123.", [], facts)
    assert check_text("Order 8472, refund rf_1.", [], facts) == ["unverified_refund_id:rf_1"]


def test_a_reply_quoting_an_amazon_style_order_id_completes() -> None:
    oid = "402-1234567-1234567"
    pays = [
        capture("OD123456789012345", oid, 200_000, "INR", "2026-03-01T04:30:00Z"),
        capture("123456789012345678", oid, 200_000, "INR", "2026-03-01T04:31:00Z"),
    ]
    state = observed(order(oid, pays), pays)
    refund = {
        "refund_id": "98765432109876",
        "payment_id": "123456789012345678",
        "order_id": oid,
        "amount_minor": 200_000,
        "currency": "INR",
        "status": "processing",
        "idempotency_key": "refund:req-1:123456789012345678",
    }
    workflow = RefundWorkflow(scripted_services("http://127.0.0.1:9"))
    action = Action(
        tool="refunds.create",
        tool_version="2",
        args={"payment_id": refund["payment_id"], "amount_minor": 200_000, "currency": "INR"},
        idempotency_key=str(refund["idempotency_key"]),
    )
    after = workflow.after_effect(
        step_input(state), action, {"refund": refund, "found_by": "create"}
    )
    facts = decide_facts({**after.state, "phase": "draft"})
    draft = RefundRules().draft(facts)["draft"]
    state = {**after.state, "draft": draft, "phase": "verify"}
    verdict = workflow.verify(step_input(state))
    assert isinstance(verdict, wf.Complete), verdict
    assert oid in verdict.outcome["reply"] and "98765432109876" in verdict.outcome["reply"]


# -- the confirmation read may lag the write --------------------------------------------------

REFUND = {
    "refund_id": "rf_3301",
    "payment_id": "pay_8472_b",
    "order_id": "8472",
    "amount_minor": 200_000,
    "currency": "INR",
    "status": "processing",
    "idempotency_key": "refund:req-1:pay_8472_b",
}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def confirming(monkeypatch: pytest.MonkeyPatch, shows_after: int) -> list[int]:
    """Make the verification read return nothing for the first `shows_after` reads."""
    reads = [0]

    def read(*_: Any, **__: Any) -> Ok:
        reads[0] += 1
        rows = [REFUND] if reads[0] > shows_after else []
        return Ok(result={"refunds": rows}, status_code=200)

    monkeypatch.setattr(phases, "run_one", read)
    return reads


def confirm_state() -> Json:
    pays = [
        capture("pay_8472_a", "8472", 200_000, "INR", "2026-03-01T04:30:00Z"),
        capture("pay_8472_b", "8472", 200_000, "INR", "2026-03-01T04:31:00Z"),
    ]
    state = observed(order("8472", pays), pays)
    state.update(refund=REFUND, refund_key=REFUND["idempotency_key"], phase="confirm")
    return state


def test_a_lagging_confirmation_read_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    confirming(monkeypatch, shows_after=1)
    clock = Clock()
    services = scripted_services("http://127.0.0.1:9", clock=clock)
    first = phases.decide(services, step_input(confirm_state()))
    assert isinstance(first, wf.Retry) and first.retry_after_s == 0.5, first
    assert first.state is not None and first.state["confirm_lag"]["misses"] == 1
    clock.now += 1.0
    second = phases.decide(services, step_input(first.state, attempts=1))
    assert isinstance(second, wf.Observe) and second.state["phase"] == "draft"
    assert "confirm_lag" not in second.state


@pytest.mark.parametrize("lag_s", [0.0, 3.0, 10.0, 3600.0])
def test_a_read_that_never_shows_the_refund_escalates_in_bounded_time(
    monkeypatch: pytest.MonkeyPatch, lag_s: float
) -> None:
    reads = confirming(monkeypatch, shows_after=10**9)
    clock = Clock()
    services = scripted_services("http://127.0.0.1:9", clock=clock, confirm_lag_s=lag_s)
    state, attempts = confirm_state(), 0
    for _ in range(20):
        decision = phases.decide(services, step_input(state, attempts=attempts))
        if not isinstance(decision, wf.Retry):
            break
        assert decision.state is not None and decision.retry_after_s is not None
        state, attempts = decision.state, attempts + 1
        clock.now += max(decision.retry_after_s, 2.0 * attempts)  # the orchestrator's backoff
    assert isinstance(decision, wf.Escalate) and "does not show the refund" in decision.reason
    assert reads[0] <= phases.MAX_CONFIRM_REREADS + 1
    assert clock.now - 1_000.0 <= lag_s + 8.0
    if lag_s == 0:
        assert reads[0] == 1


def test_the_confirm_lag_setting() -> None:
    assert confirm_lag_s({}) == 10.0
    assert confirm_lag_s({"AGENT_JOBS_CONFIRM_LAG_S": "2.5"}) == 2.5
    for bad in ("soon", "-1", "1e9"):
        with pytest.raises(ConfigError):
            confirm_lag_s({"AGENT_JOBS_CONFIRM_LAG_S": bad})


# -- order references in a message ------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("Order 8472 was charged twice", "8472"),
        ("my order was charged twice", None),
        ("my order was charged twice, order 8472.", "8472"),
        ("Order #402-1234567-1234567 was charged twice", "402-1234567-1234567"),
        ("order id: OD1234567890, charged twice", "OD1234567890"),
        ("Order no. 8472-", "8472"),
        ("I reorder 55 times", None),
    ],
)
def test_the_order_reference_is_an_id_not_a_word(message: str, expected: str | None) -> None:
    assert order_ref(message) == expected


# -- content is data ---------------------------------------------------------------------------

nasty = hs.text(
    alphabet=hs.one_of(
        hs.characters(codec=None, blacklist_categories=()),
        hs.sampled_from(["\x00", "\ud800", "\udfff", "\u202e", "\u2066", "\u200b", "\x1b", "\n"]),
    ),
    max_size=200,
)


@FAST
@given(tail=nasty, note=nasty)
def test_arbitrary_text_changes_no_decision(tail: str, note: str) -> None:
    pays = [
        capture("pay_8472_a", "8472", 200_000, "INR", "2026-03-01T04:30:00Z"),
        capture("pay_8472_b", "8472", 200_000, "INR", "2026-03-01T04:31:00Z"),
    ]
    message = validate_input({"message": "Order 8472 was charged twice. " + tail}).message
    state = observed(order("8472", pays, note=note), pays, message)
    rules = RefundRules()
    investigate = rules(model_request("investigate", {"message": message, "order_id": None}))
    assert investigate["calls"][0]["args"] == {"order_id": "8472"}
    proposal = rules(model_request("decide", decide_facts(state)))
    assert proposal["calls"][0]["args"]["payment_id"] == "pay_8472_b"
    messages = build_messages(state, "decide", st.customer(state))
    for m in messages:
        m.content.encode("utf-8")  # no lone surrogate reaches a provider
        assert "\x00" not in m.content
    json.dumps(state, ensure_ascii=False).encode("utf-8")


def test_a_megabyte_note_is_bounded_where_the_model_reads_it() -> None:
    pays = [capture("pay_a", "8472", 1, "INR", "2026-03-01T04:30:00Z")]
    state = observed(order("8472", pays, note="x" * 2_000_000), pays)
    tool = next(
        m for m in build_messages(state, "decide", st.customer(state)) if m.name == "orders.get"
    )
    assert len(tool.content) < MAX_TEXT_CHARS + 1000
    assert json.loads(tool.content)["data"]["order_id"] == "8472"


# -- the submit-time input check ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({}, "input.message"),
        ({"message": " "}, "input.message"),
        ({"message": "x" * 4001}, "input.message"),
        ({"message": "x", "channel": "fax"}, "input.channel"),
        ({"message": "x", "order_id": "../1"}, "input.order_id"),
        ({"message": "x", "order": "8472"}, "input.order"),
        ({"message": "x", "order_id": "8472", "amount": 5}, "input.amount"),
    ],
)
def test_check_input_and_start_refuse_the_same_input(data: Json, field: str) -> None:
    workflow = RefundWorkflow(scripted_services("http://127.0.0.1:9"))
    with pytest.raises(InvalidInput) as at_submit:
        workflow.check_input(data)
    assert at_submit.value.field == field
    with pytest.raises(InvalidInput) as at_start:
        workflow.start(step_input({}, input=data))
    assert at_start.value.field == field


def test_check_input_accepts_a_valid_submission() -> None:
    workflow = RefundWorkflow(scripted_services("http://127.0.0.1:9"))
    data = {"message": "Order 8472 was charged twice\x00", "channel": "email", "order_id": "8472"}
    workflow.check_input(data)  # raises nothing
    state = workflow.start(step_input({}, input=data))
    assert state["request"]["message"] == "Order 8472 was charged twice\ufffd"


def test_worlds_module_still_loads() -> None:
    assert worlds.incident_8472()["orders"][0]["order_id"] == "8472"
