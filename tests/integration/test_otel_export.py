"""The seed incident's trace, exported over OTLP/HTTP to a real receiver that decodes it.

`agent-jobs demo refund` runs as the real CLI in a subprocess (a worker process SIGKILLed while it
reconciles, its lease lapsing, another worker finishing), with only the standard `OTEL_*`
variables set. The receiver here is an HTTP server on loopback that accepts `POST /v1/traces` and
parses the body as the collector's `ExportTraceServiceRequest` protobuf: what an OpenTelemetry
collector would receive. Then: the spans, their parentage, names and attributes, the one error
span, the change of worker across the lease gap, and no customer field or content anywhere in
the bytes that left the process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from agent_jobs.cli import main
from agent_jobs.core.contracts import TaskRequest
from agent_jobs.obs.otel import TraceExport, TracingObserver
from agent_jobs.obs.tracing import spans_from_events, trace_json
from agent_jobs.orchestrator.ports import NullObserver
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.testing import Harness
from agent_jobs.workflows import default_registry


class Receiver:
    """An OTLP/HTTP trace receiver: keeps every request body and its decoded spans."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.paths: list[str] = []
        self.content_types: list[str] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    receiver.paths.append(self.path)
                    receiver.content_types.append(self.headers.get("Content-Type", ""))
                    receiver.bodies.append(body)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """(resource attributes, span) for every span received."""
        out: list[tuple[dict[str, Any], Any]] = []
        for body in self.bodies:
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for rs in request.resource_spans:
                res = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
                for ss in rs.scope_spans:
                    out.extend((res, span) for span in ss.spans)
        return out


def _value(v: Any) -> Any:
    return getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None


def _attrs(span: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in span.attributes}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.thread.start()
    try:
        yield r
    finally:
        r.server.shutdown()
        r.server.server_close()


def _demo(receiver: Receiver) -> subprocess.CompletedProcess[str]:
    # The demo sets up its own embedded environment: no AGENT_JOBS_* of the test session, and
    # no OTEL_* of the developer's shell; only the standard variables pointing at the receiver.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENT_JOBS_", "OTEL_"))}
    env.update(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_SERVICE_NAME": "agent-jobs-demo",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "agent_jobs.cli", "demo", "refund"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )


@pytest.mark.slow
def test_the_incident_trace_reaches_an_otlp_receiver_whole_and_redacted(
    receiver: Receiver,
) -> None:
    run = _demo(receiver)
    assert run.returncode == 0, run.stdout + run.stderr
    trace_id = re.search(r"\(trace ([0-9a-f]{32})\)", run.stdout)
    assert trace_id, run.stdout
    assert set(receiver.paths) == {"/v1/traces"}
    assert set(receiver.content_types) == {"application/x-protobuf"}

    received = receiver.spans()
    spans = [s for _, s in received]
    assert {res["service.name"] for res, _ in received} == {"agent-jobs-demo"}
    # One trace: the task's own id, returned to the client at creation.
    assert {s.trace_id.hex() for s in spans} == {trace_id.group(1)}
    assert len({s.span_id for s in spans}) == len(spans)  # exported once, no duplicates

    roots = [s for s in spans if not s.parent_span_id]
    assert [r.name for r in roots] == ["invoke_agent refund_resolution"]
    root = roots[0]
    root_attrs = _attrs(root)
    assert root_attrs["gen_ai.operation.name"] == "invoke_agent"
    assert root_attrs["tenant.id"] == "ten_41"
    assert root_attrs["workflow.version"] == "refund_resolution@3"
    assert root_attrs["task.outcome"] == "COMPLETED"
    assert root.status.code == Status.STATUS_CODE_OK
    assert "lease_expired" in [e.name for e in root.events]

    by_name: dict[str, list[Any]] = {}
    for s in spans:
        by_name.setdefault(s.name, []).append(s)
    assert len(by_name["chat"]) == 4
    for name in (
        "execute_tool orders.get",
        "execute_tool payments.list",
        "execute_tool policy.search",
        "execute_tool refunds.create",
        "approval.wait",
        "reconcile",
    ):
        assert len(by_name[name]) == 1, name
    assert len(by_name["execute_tool refunds.get_by_key"]) == 2
    assert len(by_name["policy.evaluate"]) == 2

    # Parentage: everything under the root, the reconcile read under the reconciliation.
    reconcile = by_name["reconcile"][0]
    for s in spans:
        if s is root:
            continue
        assert s.start_time_unix_nano >= root.start_time_unix_nano, s.name
        assert s.end_time_unix_nano <= root.end_time_unix_nano, s.name
    lookups = by_name["execute_tool refunds.get_by_key"]
    assert [x.parent_span_id for x in lookups].count(reconcile.span_id) == 1
    assert all(
        s.parent_span_id == root.span_id for s in spans if s is not root and s not in lookups
    )

    chat = _attrs(by_name["chat"][0])
    assert chat["gen_ai.operation.name"] == "chat"
    assert chat["gen_ai.request.model"] == "scripted-refund-2026-03"
    assert chat["gen_ai.usage.input_tokens"] > 0 and chat["gen_ai.usage.output_tokens"] > 0
    assert chat["route"].startswith("support-tier2")

    # The one red span: the refund whose outcome is unknown, with its key; worker w-07.
    errors = [s for s in spans if s.status.code == Status.STATUS_CODE_ERROR]
    assert [s.name for s in errors] == ["execute_tool refunds.create"]
    refund = _attrs(errors[0])
    assert refund["outcome"] == "unknown"
    assert refund["idempotency_key"] == "refund:req-8472:pay_8472_b"
    assert refund["args_hash"].startswith("sha256:")
    assert refund["worker"] == "w-07"
    assert isinstance(refund["checkpoint.seq"], int)

    # The lease gap is a change of worker, not an error.
    rec = _attrs(reconcile)
    assert rec["reconcile.result"] == "found"
    assert rec["entered_by"] == "w-07" and rec["worker"] == "w-12"
    assert rec["reconcile_for"] == errors[0].span_id.hex()
    assert reconcile.status.code == Status.STATUS_CODE_OK

    wait = _attrs(by_name["approval.wait"][0])
    assert wait["worker_held"] is False
    assert wait["decision"] == "granted"
    assert wait["approver"].startswith("sha256:")
    decisions = sorted(_attrs(s)["decision"] for s in by_name["policy.evaluate"])
    assert decisions == ["approved", "needs_approval"]

    # Redaction: nothing of the customer or of any content left the process, in any form.
    payload = b"".join(receiver.bodies)
    for secret in (
        "Priya",
        "Sharma",
        "priya.sharma@example.com",
        "cus_5120",  # the customer's id in the orders system
        "charged twice",  # the customer's message
        "duplicate capture",  # the approver's note
        "lead-41",  # the approver, hashed
        "I checked order",  # the drafted reply
    ):
        assert secret.encode() not in payload, secret


class _Ended(NullObserver):
    def __init__(self) -> None:
        self.ended: list[str] = []

    def task_ended(self, task_id: str) -> None:
        self.ended.append(task_id)


def test_a_task_is_exported_once_when_it_ends_quick_or_leased(
    sqlite_store: Any, receiver: Receiver
) -> None:
    """The orchestrator reports the end once, after the commit, whichever path committed it: a
    quick step (no lease) or a leased one; the receiver gets exactly that task's spans."""
    store = sqlite_store
    exporter = OTLPSpanExporter(endpoint=receiver.url + "/v1/traces")
    export = TraceExport(store, exporter, schedule_delay_ms=10)
    ended = _Ended()
    try:
        h = Harness(store, default_registry(), observer=TracingObserver(ended, export))
        quick = h.submit("acme", "k1", TaskRequest(workflow="noop@1", input={"steps": 2})).id
        h.run_until_idle()
        assert ended.ended == [quick]
        # A task whose workflow this worker does not have is stopped under a lease (`_finish`).
        stray = h.submit("acme", "k2", TaskRequest(workflow="noop@1", input={"steps": 2})).id
        h.orchestrator.workflows = WorkflowRegistry()
        h.run_until_idle()
        assert ended.ended == [quick, stray]
        assert export.flush(10)
    finally:
        export.shutdown()
    spans = receiver.spans()
    roots = {s.trace_id.hex(): s for _, s in spans if not s.parent_span_id}
    assert set(roots) == {store.get(quick).trace_id, store.get(stray).trace_id}
    assert len(spans) == sum(
        len(spans_from_events(store.get(t), store.events(t))) for t in (quick, stray)
    )


def test_agent_jobs_trace_prints_the_trace_from_the_event_log(
    sqlite_store: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent_jobs.config import settings

    store = sqlite_store
    h = Harness(store, default_registry())
    task_id = h.submit("acme", "k1", TaskRequest(workflow="noop@1", input={"steps": 2})).id
    h.run_until_idle()
    monkeypatch.setenv("AGENT_JOBS_DATABASE_URL", str(store.engine.url))
    settings.cache_clear()
    try:
        assert main(["trace", task_id, "--json"]) == 0
        printed = json.loads(capsys.readouterr().out)
        assert printed == trace_json(spans_from_events(store.get(task_id), store.events(task_id)))
        assert printed["spans"][0]["attrs"]["task.outcome"] == "COMPLETED"
        assert main(["trace", task_id]) == 0
        text = capsys.readouterr().out
        assert text.startswith(f"trace {store.get(task_id).trace_id}")
        assert "invoke_agent noop" in text
        assert main(["trace", task_id, "--tenant", "other"]) == 2  # another tenant's: not found
        assert main(["trace", "../etc"]) == 2
    finally:
        monkeypatch.delenv("AGENT_JOBS_DATABASE_URL")
        settings.cache_clear()
