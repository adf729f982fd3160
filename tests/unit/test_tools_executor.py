"""The tool executor: its order of checks, classification, retries, credentials and audit."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_jobs.core.clock import FixedClock
from agent_jobs.core.hashing import action_hash, args_hash
from agent_jobs.tools import (
    AdapterResult,
    ExecContext,
    HmacCredentialProvider,
    InMemorySwitches,
    Invocation,
    Ok,
    PolicyStamp,
    PythonCallableAdapter,
    Rejected,
    RetryPolicy,
    ServiceFailed,
    ServiceRejected,
    ToolCall,
    ToolDescriptor,
    ToolExecutor,
    ToolRegistry,
    TransportFailed,
    Unknown,
    classify,
)
from agent_jobs.tools.adapter import Adapter
from agent_jobs.tools.testing import FakeCredentialProvider, InMemoryAuditSink, ScriptedAdapter

ARGS = {"payment_id": "pay_8472_b", "amount_minor": 200_000, "currency": "INR"}
KEY = "refund:req-8472:pay_8472_b"
REFUND = {"refund_id": "rf_3301", "payment_id": "pay_8472_b", "status": "processing"}
CTX = ExecContext(
    tenant_id="ten_41",
    task_id="tsk_8472_a",
    trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
    step_scope="execute",
    request_id="req-8472",
)
READ_CTX = CTX.model_copy(update={"step_scope": "investigate"})


def obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


def write_tool(adapter: Adapter, version: str = "2", timeout_s: float = 5.0) -> ToolDescriptor:
    return ToolDescriptor(
        name="refunds.create",
        version=version,
        description="refund",
        args_schema=obj(
            {
                "payment_id": {"type": "string"},
                "amount_minor": {"type": "integer", "minimum": 1},
                "currency": {"type": "string"},
            },
            ["payment_id", "amount_minor", "currency"],
        ),
        side_effect="keyed",
        permission="support-agent-runtime",
        step_scopes=frozenset({"execute"}),
        timeout_s=timeout_s,
        idempotency_key_template="refund:{request_id}:{payment_id}",
        reconcile_tool="refunds.get_by_key",
        adapter=adapter,
    )


def read_tool(adapter: Adapter, timeout_s: float = 3.0) -> ToolDescriptor:
    return ToolDescriptor(
        name="orders.get",
        version="1",
        description="order",
        args_schema=obj({"order_id": {"type": "string"}}, ["order_id"]),
        side_effect="none",
        permission="support-agent-runtime",
        step_scopes=frozenset({"investigate"}),
        timeout_s=timeout_s,
        retry=RetryPolicy(max_attempts=3, backoff_s=0.5),
        adapter=adapter,
    )


class Rig:
    def __init__(
        self, write: list[Any] | None = None, read: list[Any] | None = None, **kw: Any
    ) -> None:
        self.clock: FixedClock = kw.pop("clock", None) or FixedClock()
        self.write = ScriptedAdapter(write or [AdapterResult(REFUND, 201)])
        self.read = ScriptedAdapter(read or [{"order_id": "ord_8472"}])
        self.switches = InMemorySwitches()
        self.registry = ToolRegistry(
            [write_tool(kw.pop("write_adapter", self.write)), read_tool(self.read)],
            switches=self.switches,
        )
        self.creds = kw.pop("creds", FakeCredentialProvider(self.clock))
        self.audit = InMemoryAuditSink(fail=kw.pop("audit_fails", False))
        self.sleeps: list[float] = []
        self.executor = ToolExecutor(
            self.registry, self.creds, self.audit, clock=self.clock, sleep=self.sleeps.append
        )


def stamp(args: dict[str, Any] = ARGS, **kw: Any) -> PolicyStamp:
    base: dict[str, Any] = {
        "decision": "approved",
        "action_hash": action_hash("refunds.create", "2", args),
        "policy_version": "POL-REF-004@4",
        "approval_id": "apr_5521",
    }
    base.update(kw)
    return PolicyStamp(**base)


def refund_call(args: dict[str, Any] = ARGS, **kw: Any) -> ToolCall:
    base: dict[str, Any] = {"idempotency_key": KEY, "policy_decision": stamp()}
    base.update(kw)
    return ToolCall(tool="refunds.create", args=args, **base)


def test_an_approved_refund_runs_once_with_key_and_scoped_credential() -> None:
    rig = Rig()
    out = rig.executor.execute(refund_call(), CTX)
    assert out == Ok(result=REFUND, status_code=201)
    assert rig.write.calls == 1
    inv = rig.write.invocations[0]
    assert inv.idempotency_key == KEY and inv.timeout_s == 5.0 and inv.args == ARGS
    assert inv.credential.scope == "tool:refunds.create tenant:ten_41"
    assert rig.creds.minted == [("refunds.create", "ten_41", 60, "support-agent-runtime")]
    assert (inv.credential.expires_at - rig.clock.now()).total_seconds() == 60


def test_hmac_credential_reaching_the_adapter_verifies_for_that_tool_and_tenant() -> None:
    clock = FixedClock()
    provider = HmacCredentialProvider("s3cret", clock=clock)
    rig = Rig(creds=provider)
    rig.executor.execute(refund_call(), CTX)
    token = rig.write.invocations[0].credential.token
    claims = provider.verify(token, tool="refunds.create", tenant_id="ten_41")
    assert claims["role"] == "support-agent-runtime"
    assert claims["exp"] - claims["iat"] == 60


@pytest.mark.parametrize(
    ("call", "code"),
    [
        # Arguments changed after the approval: the stamp binds the old amount.
        (refund_call({**ARGS, "amount_minor": 199_999}), "action_hash_mismatch"),
        (
            refund_call(
                {**ARGS, "payment_id": "pay_8472_a"}, idempotency_key="refund:req-8472:pay_8472_a"
            ),
            "action_hash_mismatch",
        ),
        (refund_call(policy_decision=None), "no_policy_decision"),
        (refund_call(policy_decision=stamp(approval_id=None)), "approval_missing"),
        (refund_call(idempotency_key=None), "idempotency_key_required"),
        # A key naming the attempt, not the action, would defeat the service's dedup.
        (
            refund_call(idempotency_key="refund:req-8472:pay_8472_b:attempt-2"),
            "idempotency_key_mismatch",
        ),
        (refund_call({**ARGS, "destination_account": "123456789012"}), "bad_args"),
        (refund_call({"payment_id": "pay_8472_b", "amount_minor": 200_000}), "bad_args"),
        (refund_call({**ARGS, "amount_minor": "200000"}), "bad_args"),
        (ToolCall(tool="refunds.create_v9", args=ARGS), "unknown_tool"),
    ],
)
def test_refused_before_any_credential_or_call(call: ToolCall, code: str) -> None:
    rig = Rig()
    out = rig.executor.execute(call, CTX)
    assert isinstance(out, Rejected) and out.code == code
    assert rig.write.calls == 0
    assert rig.creds.minted == []
    assert [r.code for r in rig.audit.records] == [code]


def test_a_tool_version_bump_after_approval_is_a_different_action() -> None:
    adapter = ScriptedAdapter([REFUND])
    rig = Rig(write_adapter=adapter)
    rig.registry = ToolRegistry([write_tool(adapter, version="3")])
    ex = ToolExecutor(rig.registry, rig.creds, rig.audit, clock=rig.clock)
    out = ex.execute(refund_call(), CTX)
    assert isinstance(out, Rejected) and out.code == "action_hash_mismatch"
    assert adapter.calls == 0


def test_scope_is_checked_after_validation_and_before_policy() -> None:
    rig = Rig()
    out = rig.executor.execute(refund_call(policy_decision=None), READ_CTX)
    assert isinstance(out, Rejected) and out.code == "outside_scope"
    out = rig.executor.execute(ToolCall(tool="orders.get", args={"order_id": "o"}), CTX)
    assert isinstance(out, Rejected) and out.code == "outside_scope"
    assert rig.write.calls == rig.read.calls == 0


def test_disabled_tool_and_read_only_tenant_are_rejections() -> None:
    rig = Rig()
    rig.switches.disable_tool("refunds.create", "ten_41")
    out = rig.executor.execute(refund_call(), CTX)
    assert isinstance(out, Rejected) and out.code == "tool_disabled"
    rig.switches.enable_tool("refunds.create", "ten_41")
    rig.switches.set_read_only("ten_41")
    out = rig.executor.execute(refund_call(), CTX)
    assert isinstance(out, Rejected) and out.code == "tenant_read_only"
    # Reads still work for a read-only tenant: the downgrade is the incident lever.
    assert isinstance(
        rig.executor.execute(ToolCall(tool="orders.get", args={"order_id": "o"}), READ_CTX), Ok
    )
    assert rig.write.calls == 0


def test_credential_mint_failure_is_a_transient_rejection_and_nothing_is_sent() -> None:
    rig = Rig(creds=FakeCredentialProvider(fail=True))
    out = rig.executor.execute(refund_call(), CTX)
    assert out == Rejected(code="credential_unavailable", transient=True)
    assert rig.write.calls == 0


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (
            ServiceFailed("internal", status=500),
            Unknown(reason="server_error_after_send", message="internal"),
        ),
        (TransportFailed("timeout", sent=True), Unknown(reason="timeout")),
        (TransportFailed("connection_error", sent=True), Unknown(reason="connection_error")),
        (TransportFailed("connection_error", sent=False), Unknown(reason="connection_error")),
        (RuntimeError("boom"), Unknown(reason="server_error_after_send", message="RuntimeError")),
        (
            ServiceRejected("already_refunded", "dup", status=409),
            Rejected(code="already_refunded", message="dup"),
        ),
        (
            ServiceRejected("rate_limited", status=429, transient=True),
            Rejected(code="rate_limited", transient=True),
        ),
    ],
)
def test_writes_are_classified_and_never_retried(failure: Exception, expected: object) -> None:
    rig = Rig(write=[failure, AdapterResult(REFUND, 201)])
    assert rig.executor.execute(refund_call(), CTX) == expected
    assert rig.write.calls == 1
    assert rig.sleeps == []


@pytest.mark.parametrize(
    ("failure", "write", "expected"),
    [
        (
            ServiceRejected("payment_not_found", status=404),
            False,
            Rejected(code="payment_not_found"),
        ),
        (ServiceFailed("internal", status=503), False, Rejected(code="internal", transient=True)),
        (TransportFailed("timeout", sent=True), False, Rejected(code="timeout", transient=True)),
        (
            TransportFailed("connection_error", sent=False),
            False,
            Rejected(code="connection_error", transient=True),
        ),
        (ValueError("bug"), False, Rejected(code="adapter_error", message="ValueError")),
        (
            ServiceRejected("exceeds_refundable", status=422),
            True,
            Rejected(code="exceeds_refundable"),
        ),
        (
            ServiceFailed("internal", status=500),
            True,
            Unknown(reason="server_error_after_send", message="internal"),
        ),
    ],
)
def test_classification_table(failure: Exception, write: bool, expected: object) -> None:
    assert classify(failure, write=write) == expected


def test_reads_retry_transient_failures_with_doubling_backoff() -> None:
    rig = Rig(
        read=[ServiceFailed("x", status=502), TransportFailed("timeout", sent=True), {"ok": 1}]
    )
    out = rig.executor.execute(ToolCall(tool="orders.get", args={"order_id": "o"}), READ_CTX)
    assert out == Ok(result={"ok": 1})
    assert rig.read.calls == 3
    assert rig.sleeps == [0.5, 1.0]
    assert rig.audit.records[0].attempts == 3


def test_reads_give_up_after_max_attempts_and_do_not_retry_definitive_answers() -> None:
    rig = Rig(read=[ServiceFailed("x", status=500)])
    out = rig.executor.execute(ToolCall(tool="orders.get", args={"order_id": "o"}), READ_CTX)
    assert out == Rejected(code="x", transient=True)
    assert rig.read.calls == 3
    rig = Rig(read=[ServiceRejected("order_not_found", status=404), {"never": 1}])
    out = rig.executor.execute(ToolCall(tool="orders.get", args={"order_id": "o"}), READ_CTX)
    assert out == Rejected(code="order_not_found")
    assert rig.read.calls == 1


def test_audit_is_written_for_every_outcome_with_hashed_args_only() -> None:
    secret_args = {"order_id": "ord_SECRET_8472"}
    clock = FixedClock()

    def slow_read(inv: Invocation) -> dict[str, int]:
        clock.advance(0.25)
        return {"x": 1}

    rig = Rig(read=[slow_read], clock=clock)
    rig.executor.execute(ToolCall(tool="orders.get", args=secret_args), READ_CTX)
    rig.executor.execute(ToolCall(tool="nope", args=secret_args), READ_CTX)
    rig.executor.execute(refund_call(), CTX)
    ok, unknown_tool, write = rig.audit.records
    assert (
        ok.outcome == "ok" and ok.duration_ms == 250 and ok.span_name == "execute_tool orders.get"
    )
    assert ok.args_hash == args_hash(secret_args) and ok.tool_version == "1"
    assert (ok.tenant_id, ok.task_id, ok.trace_id) == ("ten_41", "tsk_8472_a", CTX.trace_id)
    assert unknown_tool.outcome == "rejected" and unknown_tool.tool_version is None
    assert write.idempotency_key == KEY and write.approval_id == "apr_5521"
    assert write.policy_version == "POL-REF-004@4"
    for record in rig.audit.records:
        dumped = record.model_dump_json()
        assert "ord_SECRET_8472" not in dumped and "200000" not in dumped
        assert "amount_minor" not in dumped


def test_audit_written_even_when_the_registry_switches_fail() -> None:
    class Broken(InMemorySwitches):
        def tool_disabled(self, tool: str, tenant_id: str) -> bool:
            raise ConnectionError("db down")

    rig = Rig()
    rig.registry.switches = Broken()
    out = rig.executor.execute(refund_call(), CTX)
    assert out == Rejected(code="switches_unavailable", transient=True)
    assert [r.code for r in rig.audit.records] == ["switches_unavailable"]


def test_a_failing_audit_sink_does_not_lose_the_outcome_of_a_write() -> None:
    rig = Rig(audit_fails=True)
    assert rig.executor.execute(refund_call(), CTX) == Ok(result=REFUND, status_code=201)


def test_python_callable_timeout_is_unknown_for_a_write() -> None:
    release = threading.Event()
    calls: list[dict[str, Any]] = []

    def slow(args: dict[str, Any]) -> dict[str, Any]:
        calls.append(args)
        release.wait(5)
        return REFUND

    rig = Rig()
    rig.registry = ToolRegistry([write_tool(PythonCallableAdapter(slow), timeout_s=0.05)])
    ex = ToolExecutor(rig.registry, rig.creds, rig.audit, clock=rig.clock)
    try:
        out = ex.execute(refund_call(), CTX)
    finally:
        release.set()
    assert isinstance(out, Unknown) and out.reason == "timeout"
    assert len(calls) == 1


def test_python_callable_adapter_passes_invocation_and_signals() -> None:
    seen: list[Invocation] = []

    def fn(args: dict[str, Any], inv: Invocation) -> dict[str, Any]:
        seen.append(inv)
        if args["order_id"] == "missing":
            raise ServiceRejected("order_not_found", status=404)
        return {"order_id": args["order_id"]}

    rig = Rig()
    rig.registry = ToolRegistry([read_tool(PythonCallableAdapter(fn, takes_invocation=True))])
    ex = ToolExecutor(rig.registry, rig.creds, rig.audit, clock=rig.clock)
    assert ex.execute(ToolCall(tool="orders.get", args={"order_id": "o1"}), READ_CTX) == Ok(
        result={"order_id": "o1"}
    )
    assert seen[0].trace_id == CTX.trace_id and seen[0].idempotency_key is None
    out = ex.execute(ToolCall(tool="orders.get", args={"order_id": "missing"}), READ_CTX)
    assert out == Rejected(code="order_not_found")


@settings(max_examples=50, deadline=None)
@given(st.permutations(list(ARGS.items())))
def test_a_stamp_made_on_reordered_args_still_binds(items: list[tuple[str, Any]]) -> None:
    reordered = dict(items)
    assert action_hash("refunds.create", "2", reordered) == action_hash("refunds.create", "2", ARGS)
    rig = Rig()
    out = rig.executor.execute(refund_call(ARGS, policy_decision=stamp(reordered)), CTX)
    assert isinstance(out, Ok)
