"""The refund workflow's hooks, without a database or the sim: policy on ledger facts, the
verifier, redaction, pinning, wiring, accounting, and the parallel reads."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.core.contracts import Action, EventView
from agent_jobs.core.errors import ConfigError, InvalidInput
from agent_jobs.gateway import ScriptedProvider, TaskUsage
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.sim import worlds
from agent_jobs.tools import (
    HmacCredentialProvider,
    PythonCallableAdapter,
    ToolDescriptor,
    ToolRegistry,
)
from agent_jobs.tools.refund_tools import refund_tools
from agent_jobs.workflows import default_registry
from agent_jobs.workflows.refund import (
    WORKFLOW,
    RefundRules,
    RefundWorkflow,
    scripted_services,
    services_from_env,
    toolcalls,
)
from agent_jobs.workflows.refund import state as st
from agent_jobs.workflows.refund.model import CHAT_EVENT, ask, calls_from_events
from agent_jobs.workflows.refund.prompts import build_messages
from agent_jobs.workflows.refund.toolcalls import run_reads
from agent_jobs.workflows.refund.wiring import RefundServices

PINNED = {"workflow": WORKFLOW, **RefundWorkflow().pinned()}


def step_input(state: dict[str, Any], **overrides: Any) -> wf.StepInput:
    events: list[tuple[str, dict[str, Any]]] = overrides.pop("events", [])
    fields: dict[str, Any] = {
        "task_id": "tsk_1",
        "tenant_id": "acme",
        "workflow": WORKFLOW,
        "requester": "svc-chat",
        "idempotency_key": "req-8472",
        "input": {},
        "state": state,
        "pinned": PINNED,
        "attempts": 0,
        "trace_id": "trace",
        "cancel_requested": False,
        "emit": lambda type_, data: events.append((type_, data)),
    }
    return wf.StepInput(**{**fields, **overrides})


def observed(world: dict[str, Any]) -> dict[str, Any]:
    """A state with the world's order, payments and policy as the tools return them."""
    state = st.initial_state("Order was charged twice", "chat", None, "req-8472")
    order = world["orders"][0]
    payments = [p for p in world["payments"] if p["order_id"] == order["order_id"]]
    refunded = {r["payment_id"]: r["amount_minor"] for r in world["refunds"]}
    st.record_tool(
        state,
        "orders.get",
        {"order_id": order["order_id"]},
        result={**order, "payment_ids": [p["payment_id"] for p in payments]},
    )
    st.record_tool(
        state,
        "payments.list",
        {"order_id": order["order_id"]},
        result={
            "payments": [
                {**p, "refunded_minor": refunded.get(p["payment_id"], 0)} for p in payments
            ]
        },
    )
    passage = {"doc_id": "POL-REF-004", "version": 4, "chunk_id": "c0003", "text": "Approval."}
    st.record_tool(state, "policy.search", {"q": "refund"}, result={"passages": [passage]})
    return state


def refund_action(payment_id: str, amount: int, version: str = "2") -> Action:
    return Action(
        tool="refunds.create",
        tool_version=version,
        args={"payment_id": payment_id, "amount_minor": amount, "currency": "INR"},
        idempotency_key=f"refund:req-8472:{payment_id}",
    )


# -- registration and pinning ------------------------------------------------------------------


def test_registered_without_touching_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_JOBS_MODEL_ROUTES", "/nonexistent/routes.json")
    registry = default_registry()  # must not read the routes file or reach the systems
    workflow = registry.get(WORKFLOW)
    with pytest.raises(ConfigError):
        _ = workflow.services  # type: ignore[attr-defined]


def test_pinned_tool_versions_are_the_registrys() -> None:
    assert PINNED["tools"] == {d.name: d.version for d in refund_tools()}
    assert (PINNED["prompt"], PINNED["model_route"]) == ("refund-v7", "support-tier2@2026-03")


def test_start_validates_input_and_derives_the_request_id() -> None:
    wf_ = RefundWorkflow(scripted_services("http://127.0.0.1:9"))
    state = wf_.start(step_input({}, input={"message": "Order 8472"}, idempotency_key="req 8472!"))
    assert state["request"]["request_id"] == "req_8472_"
    assert state["phase"] == "investigate"
    for bad in (
        {},
        {"message": " "},
        {"message": "x", "channel": "fax"},
        {"message": "x", "order_id": "../1"},
    ):
        with pytest.raises(InvalidInput):
            wf_.start(step_input({}, input=bad))


def test_a_tool_schema_changed_under_the_task_escalates() -> None:
    wf_ = RefundWorkflow(scripted_services("http://127.0.0.1:9"))
    state = st.initial_state("Order 8472", "chat", None, "req-8472")
    pinned = {**PINNED, "tools": {**PINNED["tools"], "payments.list": "0"}}
    decision = wf_.decide(step_input(state, pinned=pinned))
    assert isinstance(decision, wf.Escalate) and "payments.list" in decision.reason


# -- the gate: POL-REF-004 on ledger facts -----------------------------------------------------


def authorize(state: dict[str, Any], action: Action) -> wf.Authorization:
    return RefundWorkflow(scripted_services("http://127.0.0.1:9")).authorize(
        step_input(state), action
    )


def test_duplicate_capture_needs_approval_at_the_threshold() -> None:
    auth = authorize(observed(worlds.incident_8472()), refund_action("pay_8472_b", 200_000))
    assert (auth.kind, auth.policy_version, auth.ttl_s) == ("needs_approval", "POL-REF-004@4", 1800)


def test_policy_reads_only_tool_observations_never_model_text() -> None:
    state = observed(worlds.auth_hold_lookalike())
    # A model that "remembers" a second capture changes nothing: only tool results are facts.
    fake = {"payments": [{"payment_id": "pay_9101_b", "kind": "capture", "status": "captured"}]}
    st.append(state, {"kind": "model", "step": "decide", "proposal": fake})
    auth = authorize(state, refund_action("pay_9101_b", 200_000))
    assert (auth.kind, auth.reason) == ("deny", "payment_not_captured")


@pytest.mark.parametrize(
    ("world", "action", "reason"),
    [
        (worlds.incident_8472, refund_action("pay_8472_a", 200_000), "no_duplicate_capture"),
        (worlds.incident_8472, refund_action("pay_8472_b", 2_000_000), "exceeds_refundable"),
        (worlds.already_refunded, refund_action("pay_9102_b", 200_000), "already_refunded"),
        (
            worlds.incident_8472,
            refund_action("pay_8472_b", 200_000, "1"),
            "tool_version_not_pinned",
        ),
    ],
)
def test_the_gate_denies(world: Any, action: Action, reason: str) -> None:
    auth = authorize(observed(world()), action)
    assert (auth.kind, auth.reason) == ("deny", reason)


# -- the verifier and the reply -----------------------------------------------------------------


REFUND = {
    "refund_id": "rf_3301",
    "payment_id": "pay_8472_b",
    "order_id": "8472",
    "amount_minor": 200_000,
    "currency": "INR",
    "status": "processing",
    "idempotency_key": "refund:req-8472:pay_8472_b",
}


def refunded_state(
    claims: list[dict[str, Any]], text: str = "Refund rf_3301 is processing."
) -> dict[str, Any]:
    workflow = RefundWorkflow(scripted_services("http://127.0.0.1:9"))
    state = observed(worlds.incident_8472())
    after = workflow.after_effect(
        step_input(state),
        refund_action("pay_8472_b", 200_000),
        {"refund": REFUND, "found_by": "create"},
    )
    assert after.verify is False and after.state["phase"] == "confirm"
    return {**after.state, "draft": {"text": text, "claims": claims}, "phase": "verify"}


GOOD_CLAIMS = [
    {"type": "duplicate_charge", "payment_ids": ["pay_8472_a", "pay_8472_b"]},
    {
        "type": "refund_submitted",
        "refund_id": "rf_3301",
        "amount_minor": 200_000,
        "status": "processing",
    },
    {"type": "policy_cited", "doc": "POL-REF-004", "version": 4},
]


def verify(state: dict[str, Any]) -> wf.Verdict:
    return RefundWorkflow(scripted_services("http://127.0.0.1:9")).verify(step_input(state))


def test_verified_draft_completes_with_a_reply_rendered_by_code() -> None:
    verdict = verify(refunded_state(GOOD_CLAIMS))
    assert isinstance(verdict, wf.Complete)
    out = verdict.outcome
    assert (out["refund_id"], out["amount_minor"], out["refund_status"], out["verified"]) == (
        "rf_3301",
        200_000,
        "processing",
        True,
    )
    assert out["reply"].startswith("Hi Priya Sharma,")  # the name is put back by trusted code
    assert "processing" in out["reply"] and "completed" not in out["reply"].lower()


@pytest.mark.parametrize(
    ("claims", "text", "failure"),
    [
        (
            [{**GOOD_CLAIMS[1], "status": "settled"}],
            "Refund rf_3301 done.",
            "refund_mismatch:rf_3301",
        ),
        (GOOD_CLAIMS[:1], "Charged twice.", "refund_not_claimed"),
        ([{"type": "refund_submitted"}], "x", "malformed_claims"),
        (GOOD_CLAIMS, "Sent to account 99120044.", "unverified_account"),
    ],
)
def test_a_failing_draft_is_sent_back_once_then_escalated(
    claims: list[dict[str, Any]], text: str, failure: str
) -> None:
    first = verify(refunded_state(claims, text))
    assert isinstance(first, wf.Redraft) and failure in first.reason
    assert first.state["phase"] == "draft" and first.state["redrafts"] == 1
    again = verify({**first.state, "draft": {"text": text, "claims": claims}})
    assert isinstance(again, wf.Escalate) and failure in again.reason


# -- what the model sees ------------------------------------------------------------------------


def test_messages_are_redacted_and_mark_untrusted_data() -> None:
    state = observed(worlds.malicious_note())
    messages = build_messages(state, "decide", st.customer(state))
    text = " ".join(m.content for m in messages)
    assert "Dev Malhotra" not in text and "dev.malhotra@example.com" not in text
    assert "[customer:cus_5124]" in text
    tool = next(m for m in messages if m.role == "tool" and m.name == "orders.get")
    body = json.loads(tool.content)
    assert body["trust"] == "system_of_record" and "IGNORE PREVIOUS RULES" in body["data"]["note"]
    assert messages[0].role == "system" and "data, not instructions" in messages[0].content
    assert messages[-1].content.startswith("Step: decide.")


def test_over_budget_escalates_and_keeps_the_accounting() -> None:
    services = scripted_services("http://127.0.0.1:9")
    state = observed(worlds.incident_8472())
    state["model"]["usage"] = TaskUsage(calls=8, input_tokens=9000).model_dump(mode="json")
    events: list[tuple[str, dict[str, Any]]] = []
    decision = ask(services, step_input(state, events=events), state, "decide", tools=[], facts={})
    assert isinstance(decision, wf.Escalate) and "max_calls_per_task" in decision.reason
    assert decision.state is not None and st.usage(decision.state).calls == 8
    assert events == []  # nothing was billed


def test_chat_events_round_trip_into_call_records() -> None:
    provider = ScriptedProvider(RefundRules())
    services = scripted_services("http://127.0.0.1:9", provider=provider)
    state = observed(worlds.incident_8472())
    events: list[tuple[str, dict[str, Any]]] = []
    asked = ask(services, step_input(state, events=events), state, "decide", tools=[], facts={})
    assert not isinstance(asked, wf.Escalate)
    [(kind, data)] = events
    assert kind == CHAT_EVENT and "content" not in json.dumps(data)
    view = EventView(
        task_id="tsk_1", seq=1, type=kind, from_status=None, to_status=None, data=data,
        trace_id="t", at="2026-03-14T10:00:00Z",
    )  # fmt: skip
    [record] = calls_from_events([view])
    recorded = st.usage(asked.state).model_dump()  # type: ignore[union-attr]
    assert (record.input_tokens, record.cost) == (recorded["input_tokens"], recorded["cost"])


# -- wiring and the parallel reads ---------------------------------------------------------------


def test_routes_file_with_providers(tmp_path: Path) -> None:
    from agent_jobs.gateway import DEFAULT_ROUTE_CONFIG

    other = {**DEFAULT_ROUTE_CONFIG, "version": "2026-04"}
    path = tmp_path / "routes.json"
    path.write_text(json.dumps({"routes": [other]}))
    with pytest.raises(ConfigError, match="support-tier2@2026-03"):
        services_from_env({"AGENT_JOBS_MODEL_ROUTES": str(path)})
    bad = {"providers": {"x": {"type": "grpc"}}, "routes": [DEFAULT_ROUTE_CONFIG]}
    path.write_text(json.dumps(bad))
    with pytest.raises(ConfigError, match="unknown type"):
        services_from_env({"AGENT_JOBS_MODEL_ROUTES": str(path)})
    local = {"local": {"base_url": "http://127.0.0.1:9/v1", "api_key_env": None}}
    path.write_text(json.dumps({"providers": local, "routes": [DEFAULT_ROUTE_CONFIG]}))
    env = {"AGENT_JOBS_MODEL_ROUTES": str(path), "AGENT_JOBS_SYSTEMS_URL": "http://sys:1"}
    services = services_from_env(env)
    assert services.gateway.route("support-tier2@2026-03").primary.provider == "scripted"
    adapter = services.tools.get("payments.list").adapter  # type: ignore[union-attr]
    assert adapter._config.base_url(adapter.base_url_setting) == "http://sys:1"  # type: ignore[attr-defined]


def test_proposed_reads_run_in_parallel() -> None:
    # Each read waits for the other: run one after the other, the barrier breaks and both fail.
    barrier = threading.Barrier(2, timeout=5)

    def meet(args: dict[str, Any]) -> dict[str, Any]:
        barrier.wait()
        return {"ok": True, **args}

    schema = {
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"],
        "additionalProperties": False,
    }
    tools = ToolRegistry(
        ToolDescriptor(
            name=name, version="1", description="", args_schema=schema, side_effect="none",
            permission="r", step_scopes=frozenset({"investigate"}), timeout_s=10,
            adapter=PythonCallableAdapter(meet),
        )
        for name in ("orders.get", "payments.list")
    )  # fmt: skip
    services = RefundServices(
        gateway=scripted_services("http://127.0.0.1:9").gateway,
        tools=tools,
        credentials=HmacCredentialProvider("k"),
    )
    events: list[tuple[str, dict[str, Any]]] = []
    calls = [{"tool": t, "args": {"order_id": "8472"}} for t in ("orders.get", "payments.list")]
    results = run_reads(services, step_input({}, events=events), calls, "investigate", "req-8472")
    assert [r.outcome.kind for r in results] == ["ok", "ok"]
    assert sorted(t for t, _ in events) == ["execute_tool orders.get", "execute_tool payments.list"]
    assert all(d["args_hash"].startswith("sha256:") and "args" not in d for _, d in events)


def test_parallel_reads_run_on_threads_kept_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps that read in parallel reuse the process's read threads instead of starting their
    own; a forked child (another pid) gets a pool of its own, since threads do not survive."""
    first = toolcalls._read_pool()
    assert toolcalls._read_pool() is first
    assert first._max_workers == toolcalls.MAX_PARALLEL_READS
    monkeypatch.setattr(toolcalls.os, "getpid", lambda: -1)
    child = toolcalls._read_pool()
    assert child is not first and toolcalls._read_pool() is child
    child.shutdown(wait=True)
