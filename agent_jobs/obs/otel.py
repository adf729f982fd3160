"""Export of task traces over OTLP/HTTP with the OpenTelemetry SDK. Off by default.

On when `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` is set, unless
`OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`. Everything else is the SDK's own
configuration: `OTEL_EXPORTER_OTLP_*` (headers, timeout, compression, certificates),
`OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES` (the service defaults to `agent-jobs`),
`OTEL_TRACES_SAMPLER[_ARG]` (decided on the task's trace id, so every process agrees) and
`OTEL_BSP_*` for the batch processor.

A task is exported once, when it ends: the orchestrator calls `Observer.task_ended`, and
`TracingObserver` queues the task id for a background thread that reads the task's events from
the store, builds the spans with `obs.tracing.spans_from_events` (the same spans
`agent-jobs trace` prints) and hands them to a `BatchSpanProcessor`. Nothing here can raise into
a step or block it: a full queue drops the export with a warning, and every failure is logged.
Spans are built from the event log rather than recorded live, so the API's, each worker's and the
sweeper's part of a task are in its one trace without propagating a context between processes.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from agent_jobs import __version__
from agent_jobs.obs.observers import Observers
from agent_jobs.obs.tracing import SEMCONV, SpanRecord, spans_from_events

log = logging.getLogger(__name__)

ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
DEFAULT_SERVICE = "agent-jobs"
SCOPE = InstrumentationScope(
    "agent_jobs.obs.tracing",
    __version__,
    f"https://opentelemetry.io/schemas/{SEMCONV}",
)
MAX_PENDING = 1024
_KINDS = {"internal": SpanKind.INTERNAL, "client": SpanKind.CLIENT}
_STATUS = {"OK": StatusCode.OK, "ERROR": StatusCode.ERROR, "UNSET": StatusCode.UNSET}


def export_enabled(env: Mapping[str, str] | None = None) -> bool:
    """True when the standard variables ask for OTLP trace export."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters and "otlp" not in [e.strip() for e in exporters.split(",")]:
        return False  # `none`, or an exporter this package does not ship
    protocol = env.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    ).strip()
    if protocol and protocol != "http/protobuf":
        log.warning("OTLP protocol %r is not supported: traces are sent as http/protobuf", protocol)
    return any(env.get(name, "").strip() for name in ENDPOINT_VARS)


def resource() -> Resource:
    """The process's resource from `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES`, named
    `agent-jobs` unless those name it."""
    res = Resource.create()
    if str(res.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        res = res.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE}))
    return res


def readable_spans(spans: Sequence[SpanRecord], res: Resource) -> list[ReadableSpan]:
    """The SDK's span objects for spans that were recorded as events, with their own ids.

    The SDK's tracer mints span ids itself and timestamps with the local clock; these spans
    already have deterministic ids and the database's times, so they are handed to the exporter
    as finished `ReadableSpan`s, the type every span processor and exporter consumes."""
    flags = TraceFlags(TraceFlags.SAMPLED)
    out = []
    for s in spans:
        trace_id = int(s.trace_id, 16)
        context = SpanContext(trace_id, int(s.span_id, 16), is_remote=False, trace_flags=flags)
        parent = None
        if s.parent_id is not None:
            parent = SpanContext(trace_id, int(s.parent_id, 16), is_remote=False, trace_flags=flags)
        events = [Event(ev.name, dict(ev.attrs), _ns(ev.at)) for ev in s.events]
        error = s.attrs.get("error.type") if s.status == "ERROR" else None
        status = Status(_STATUS[s.status], None if error is None else str(error))
        out.append(
            ReadableSpan(
                name=s.name,
                context=context,
                parent=parent,
                resource=res,
                attributes=dict(s.attrs),
                events=events,
                kind=_KINDS[s.kind],
                status=status,
                start_time=_ns(s.start),
                end_time=_ns(s.end),
                instrumentation_scope=SCOPE,
            )
        )
    return out


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ns(at: datetime) -> int:
    # Integer arithmetic: a float timestamp loses the microseconds of a 2026 date.
    return (at - _EPOCH) // timedelta(microseconds=1) * 1000


class TraceExport:
    """Exports ended tasks' traces in the background. `store` is the task store (`Store`)."""

    def __init__(
        self,
        store: Any,
        exporter: SpanExporter | None = None,
        *,
        max_pending: int = MAX_PENDING,
        sampler: Sampler | None = None,
        schedule_delay_ms: float | None = None,
    ) -> None:
        if exporter is None:
            # Imported only when export is on: it pulls in requests and protobuf.
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
                OTLPSpanExporter,
            )

            exporter = OTLPSpanExporter()
        self.store = store
        self.resource = resource()
        # The SDK reads OTEL_TRACES_SAMPLER[_ARG]; a ratio sampler decides on the trace id, the
        # same answer in every process.
        self.sampler = sampler or TracerProvider(shutdown_on_exit=False).sampler
        self.processor = BatchSpanProcessor(exporter, schedule_delay_millis=schedule_delay_ms)
        self._pending: queue.Queue[str | None] = queue.Queue(maxsize=max_pending)
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._lock = threading.Lock()
        self._closed = False
        atexit.register(self.shutdown)

    def task_ended(self, task_id: str) -> None:
        """Queue the task's export; never blocks, never raises."""
        try:
            self._ensure_thread()
            self._pending.put_nowait(task_id)
        except queue.Full:
            log.warning("trace export queue full: the trace of %s is not exported", task_id)
        except Exception:
            log.exception("could not queue the trace export of %s", task_id)

    def export(self, task_id: str) -> int:
        """Build the task's spans from its events and hand them to the batch processor; the
        number of spans queued (0 when the sampler drops the trace)."""
        task = self.store.get(task_id)
        spans = spans_from_events(task, self.store.events(task_id))
        if not spans:
            return 0
        decision = self.sampler.should_sample(None, int(spans[0].trace_id, 16), spans[0].name)
        if decision.decision is not Decision.RECORD_AND_SAMPLE:
            return 0
        readable = readable_spans(spans, self.resource)
        for span in readable:
            self.processor.on_end(span)
        return len(readable)

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Wait until every queued task has been handed over and exported."""
        self._pending.join()
        return bool(self.processor.force_flush(int(timeout_s * 1000)))

    def shutdown(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._thread is not None and self._thread.is_alive() and self._pid == os.getpid():
            self._pending.put(None)
            self._thread.join(timeout=5)
        try:
            self.processor.shutdown()  # type: ignore[no-untyped-call]
        except Exception:
            log.exception("trace exporter shutdown failed")

    def _ensure_thread(self) -> None:
        # A prefork child inherits the object but not the thread: start one in each process.
        if self._thread is not None and self._pid == os.getpid() and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._run, name="agent-jobs-trace-export", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            task_id = self._pending.get()
            try:
                if task_id is None:
                    return
                self.export(task_id)
            except Exception:
                log.exception("could not export the trace of %s", task_id)
            finally:
                self._pending.task_done()


class TracingObserver(Observers):
    """`inner` (another `Observer`: obs sits below the orchestrator, so the port is not named
    here) and the trace export, as one observer list (`obs/observers.py`): every hook reaches
    `inner`; the export hears `task_ended` (after `inner`) and exports the task's trace."""

    def __init__(self, inner: Any, export: TraceExport) -> None:
        super().__init__(inner, export)
        self.inner = inner
        self.export = export


_exports: dict[int, TraceExport] = {}
_exports_lock = threading.Lock()


def traced(observer: Any, store: Any, env: Mapping[str, str] | None = None) -> Any:
    """`observer`, exporting each ended task's trace when the `OTEL_*` variables ask for it;
    `observer` itself otherwise (no SDK work at all)."""
    if not export_enabled(env):
        return observer
    try:
        with _exports_lock:
            export = _exports.get(id(store))
            if export is None:
                export = _exports[id(store)] = TraceExport(store)
        log.info("exporting task traces over OTLP/HTTP")
        return TracingObserver(observer, export)
    except Exception:
        log.exception("OTLP trace export is configured but could not start; traces stay local")
        return observer


__all__ = [
    "TraceExport",
    "TracingObserver",
    "export_enabled",
    "readable_spans",
    "resource",
    "traced",
]
