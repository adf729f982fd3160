"""Spans from the event log (`obs.tracing`) and their OTLP form (`obs.otel`), without a network.

The events are the seed incident's, with the seed's timings (tsk_8472_a: the approval wait, the
refund call that times out on w-07, the lease gap, reconciliation on w-12), so the trace can be
read against the seed's trace JSON.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agent_jobs.core.contracts import EventView
from agent_jobs.core.states import Status
from agent_jobs.obs.otel import TraceExport, TracingObserver, export_enabled, traced
from agent_jobs.obs.tracing import TaskFacts, spans_from_events, trace_json, waterfall
from agent_jobs.orchestrator.ports import NullObserver

S = Status
T0 = datetime(2026, 3, 14, 10, 2, 11, tzinfo=UTC)
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
TASK = "tsk_8472_a"
KEY = "refund:req-8472:pay_8472_b"


def _at(ms: float) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def _iso(ms: float) -> str:
    return _at(ms).isoformat().replace("+00:00", "Z")


class _Log:
    def __init__(self) -> None:
        self.events: list[EventView] = []

    def add(
        self,
        ms: float,
        type_: str,
        frm: Status | None = None,
        to: Status | None = None,
        **data: Any,
    ) -> None:
        self.events.append(
            EventView(
                task_id=TASK,
                seq=len(self.events) + 1,
                type=type_,
                from_status=frm,
                to_status=to,
                data=data,
                trace_id=TRACE,
                at=_at(ms),
            )
        )


def _chat(log: _Log, start: float, ms: int, inp: int, out: int) -> None:
    log.add(
        start + ms,
        "chat",
        S.RUNNING,
        model="model-x-2026-03",
        route="support-tier2",
        provider="scripted",
        input_tokens=inp,
        output_tokens=out,
        latency_ms=ms,
        outcome="ok",
        prompt="Customer Priya Sharma <priya@example.com> says: charged twice",
    )


def _tool(log: _Log, start: float, ms: int, tool: str, frm: Status, **extra: Any) -> None:
    log.add(
        start + ms,
        f"execute_tool {tool}",
        frm,
        tool=tool,
        tool_version="1",
        args_hash="sha256:5e1c",
        args={"email": "priya@example.com"},
        result={"customer": {"name": "Priya Sharma"}},
        started_at=_iso(start),
        duration_ms=ms,
        **{"outcome": "ok", **extra},
    )


def incident() -> tuple[TaskFacts, list[EventView]]:
    log = _Log()
    log.add(0, "created", None, S.RECEIVED, workflow="refund_resolution@3", requester="svc")
    log.add(50, "started", S.RECEIVED, S.RUNNING, by="w-03")
    _chat(log, 60, 1430, 3200, 120)
    _tool(log, 1490, 300, "payments.list", S.RUNNING)
    log.add(1800, "observed", S.RUNNING, S.RUNNING, by="w-03", note="2 read(s) recorded")
    _tool(log, 3562, 450, "policy.search", S.RUNNING)
    action = {"tool": "refunds.create", "action_hash": "sha256:a91c4e07", "idempotency_key": KEY}
    log.add(
        6199,
        "approval_requested",
        S.RUNNING,
        S.APPROVAL_WAIT,
        by="w-03",
        policy_version="POL-REF-004@4",
        decision="needs_approval",
        approval_id="apr_5521",
        reason="POL-REF-004@4: >= INR 1,000",
        **action,
    )
    log.add(546199, "approval_granted", S.APPROVAL_WAIT, None, approval_id="apr_5521",
            approver="lead-41", note="duplicate capture, Priya Sharma")  # fmt: skip
    log.add(
        546239,
        "intent_recorded",
        S.APPROVAL_WAIT,
        S.EXECUTING,
        by="w-07",
        policy_version="POL-REF-004@4",
        approval_id="apr_5521",
        approver="lead-41",
        **action,
    )
    _tool(log, 546249, 5000, "refunds.create", S.EXECUTING, outcome="unknown",
          code="timeout", idempotency_key=KEY)  # fmt: skip
    log.add(551260, "effect_unknown", S.EXECUTING, S.EXEC_UNKNOWN, by="w-07",
            reason="timeout: no answer in 5 s", **action)  # fmt: skip
    log.add(576990, "lease_expired", S.EXEC_UNKNOWN, None, by="sweeper", owner="w-07")
    _tool(log, 577000, 180, "refunds.get_by_key", S.EXEC_UNKNOWN)
    log.add(577182, "reconciled_found", S.EXEC_UNKNOWN, S.RUNNING, by="w-12", **action)
    _chat(log, 577185, 2525, 6150, 220)
    log.add(579720, "draft_ready", S.RUNNING, S.VERIFYING, by="w-12")
    log.add(579750, "completed", S.VERIFYING, S.COMPLETED, by="w-12", verified=True)
    task = TaskFacts(TASK, "ten_41", "refund_resolution@3", S.COMPLETED, TRACE, T0)
    return task, log.events


def _by_name(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for s in doc["spans"]:
        out.setdefault(s["name"], []).append(s)
    return out


def test_the_incident_has_the_seeds_shape_timings_and_the_one_red_span() -> None:
    doc = trace_json(spans_from_events(*incident()))
    assert doc["trace_id"] == TRACE
    assert doc["root_start"] == "2026-03-14T10:02:11.000Z"
    assert doc["redaction"]["prompt_and_completion_content"] == "NOT_RECORDED"
    root, *children = doc["spans"]
    assert root["parent"] is None and root["name"] == "invoke_agent refund_resolution"
    assert (root["start_ms"], root["duration_ms"], root["status"]) == (0, 579750, "OK")
    assert root["attrs"]["task.outcome"] == "COMPLETED"
    assert {s["parent"] for s in children} <= {
        root["span_id"],
        _by_name(doc)["reconcile"][0]["span_id"],
    }
    names = _by_name(doc)
    chat = names["chat"][0]
    assert (chat["start_ms"], chat["duration_ms"]) == (60, 1430)
    assert chat["attrs"]["gen_ai.usage.input_tokens"] == 3200
    assert chat["attrs"]["gen_ai.request.model"] == "model-x-2026-03"
    assert chat["attrs"]["worker"] == "w-03"  # from the step's commit that followed
    wait = names["approval.wait"][0]
    assert (wait["start_ms"], wait["duration_ms"]) == (6199, 540040)
    assert wait["attrs"]["worker_held"] is False and wait["attrs"]["decision"] == "granted"
    [red] = [s for s in doc["spans"] if s["status"] == "ERROR"]
    assert red["name"] == "execute_tool refunds.create"
    assert (red["start_ms"], red["duration_ms"]) == (546249, 5000)
    assert red["attrs"]["outcome"] == "unknown" and red["attrs"]["idempotency_key"] == KEY
    assert red["attrs"]["worker"] == "w-07"
    # The lease gap: 25,751 ms from the end of the failed call to the reconcile read, which
    # reads as a change of worker, under a reconciliation that ends OK.
    [lookup] = names["execute_tool refunds.get_by_key"]
    assert lookup["start_ms"] - (red["start_ms"] + red["duration_ms"]) == 25751
    assert lookup["attrs"]["worker"] == "w-12"
    assert lookup["attrs"]["reconcile_for"] == red["span_id"]
    [reconcile] = names["reconcile"]
    assert lookup["parent"] == reconcile["span_id"]
    assert reconcile["status"] == "OK"
    assert reconcile["attrs"]["entered_by"] == "w-07" and reconcile["attrs"]["worker"] == "w-12"
    assert reconcile["attrs"]["reconcile.result"] == "found"
    events = [e["name"] for e in root["events"]]
    assert "lease_expired" in events and "completed" in events


def test_the_trace_is_a_pure_function_of_the_events() -> None:
    task, events = incident()
    first = trace_json(spans_from_events(task, events))
    again = trace_json(spans_from_events(task, list(reversed(events))))
    assert first == again
    ids = [s["span_id"] for s in first["spans"]]
    assert len(set(ids)) == len(ids)
    assert all(len(i) == 16 and int(i, 16) for i in ids)


def test_nothing_of_the_customer_or_any_content_reaches_a_span() -> None:
    task, events = incident()
    events.append(
        EventView(
            task_id=TASK, seq=99, type="custom_note", from_status=S.COMPLETED, to_status=None,
            data={"customer_name": "Priya Sharma", "message": "charged twice",
                  "by": "ops priya@example.com"},
            trace_id=TRACE, at=_at(579760),
        )
    )  # fmt: skip
    text = json.dumps(trace_json(spans_from_events(task, events)))
    for secret in ("Priya", "Sharma", "priya@example.com", "charged twice", "lead-41",
                   "duplicate capture"):  # fmt: skip
        assert secret not in text, secret
    assert "[REDACTED:pii]" in text  # the e-mail in a worker name was masked, not dropped


def test_a_task_still_waiting_has_an_open_approval_and_no_outcome() -> None:
    _, events = incident()
    waiting = TaskFacts(TASK, "ten_41", "refund_resolution@3", S.APPROVAL_WAIT, TRACE, T0)
    doc = trace_json(spans_from_events(waiting, events[:7]))
    root = doc["spans"][0]
    assert root["status"] == "UNSET" and "task.outcome" not in root["attrs"]
    [wait] = _by_name(doc)["approval.wait"]
    assert wait["status"] == "UNSET" and wait["attrs"]["approval.open"] is True


def test_a_bad_stored_trace_id_still_gives_a_valid_one() -> None:
    _, events = incident()
    odd = TaskFacts(TASK, "ten_41", "refund_resolution@3", S.COMPLETED, "not-hex", T0)
    tid = trace_json(spans_from_events(odd, events))["trace_id"]
    assert len(tid) == 32 and int(tid, 16)


def test_the_waterfall_shows_the_wait_the_red_span_and_the_worker_change() -> None:
    text = waterfall(spans_from_events(*incident()))
    lines = text.splitlines()
    assert lines[0].startswith(f"trace {TRACE}")
    [red] = [line for line in lines if "!!" in line]
    assert "execute_tool refunds.create" in red and "w-07" in red and "outcome=unknown" in red
    [wait] = [line for line in lines if "approval.wait" in line]
    assert "worker_held=false" in wait and "9.0min" in wait
    assert any("lease_expired (sweeper)" in line and "w-07" in line for line in lines)
    assert any("reconcile" in line and "w-12" in line for line in lines)


class _Store:
    def __init__(self, task: Any, events: list[EventView]) -> None:
        self.task, self._events = task, events

    def get(self, task_id: str, tenant_id: str | None = None) -> Any:
        return self.task

    def events(self, task_id: str, tenant_id: str | None = None) -> list[EventView]:
        return self._events


class _Row:
    """The attributes of a `TaskRow` the builder reads."""

    id, tenant_id, workflow, status, trace_id, created_at = (
        TASK, "ten_41", "refund_resolution@3", S.COMPLETED, TRACE, T0,
    )  # fmt: skip


def test_the_exported_spans_are_the_printed_spans() -> None:
    """`agent-jobs trace` and the OTLP export cannot disagree: same ids, parents, names,
    times, status and attributes."""
    _, events = incident()
    memory = InMemorySpanExporter()
    export = TraceExport(_Store(_Row(), events), memory, schedule_delay_ms=10)
    try:
        observer = TracingObserver(NullObserver(), export)
        observer.task_ended(TASK)
        assert export.flush(5)
    finally:
        export.shutdown()
    doc = trace_json(spans_from_events(_Row(), events))
    got = {f"{s.context.span_id:016x}": s for s in memory.get_finished_spans()}
    assert len(got) == len(doc["spans"])
    for want in doc["spans"]:
        span = got[want["span_id"]]
        assert f"{span.context.trace_id:032x}" == TRACE
        parent = f"{span.parent.span_id:016x}" if span.parent else None
        assert (span.name, parent) == (want["name"], want["parent"])
        assert dict(span.attributes or {}) == want["attrs"]
        assert span.start_time is not None and span.end_time is not None
        assert (span.end_time - span.start_time) / 1e6 == pytest.approx(want["duration_ms"])
        code = {"OK": StatusCode.OK, "ERROR": StatusCode.ERROR, "UNSET": StatusCode.UNSET}
        assert span.status.status_code is code[want["status"]]


def test_an_export_that_fails_never_reaches_the_step() -> None:
    class Broken(_Store):
        def events(self, task_id: str, tenant_id: str | None = None) -> list[EventView]:
            raise RuntimeError("database gone")

    memory = InMemorySpanExporter()
    export = TraceExport(Broken(_Row(), []), memory, max_pending=1)
    try:
        for _ in range(5):  # a full queue drops, a failing export logs
            TracingObserver(NullObserver(), export).task_ended(TASK)
        export.flush(5)
    finally:
        export.shutdown()
    assert memory.get_finished_spans() == ()


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "  "}, False),
    ],
)
def test_export_is_off_unless_the_standard_variables_ask(env: dict[str, str], on: bool) -> None:
    assert export_enabled(env) is on


def test_off_means_the_observer_is_returned_untouched() -> None:
    observer = NullObserver()
    assert traced(observer, store=None, env={}) is observer
