"""A task's trace, derived from its event log: one `invoke_agent` root, and under it the model
calls, tool calls, policy decisions, the approval wait and the reconciliation of an unknown effect.

The spans are a pure function of the task row and its events (`spans_from_events`), so the trace
an on-call engineer prints (`agent-jobs trace`) and the one exported over OTLP (`obs.otel`) are
the same spans, and every process that wrote an event (the API, each worker, the sweeper) is in
the task's one trace without passing a context around: the task's stored `trace_id` is the trace
id, and span ids are derived from the task id and the event's sequence number, so rebuilding a
trace twice gives identical ids.

Names follow the OpenTelemetry GenAI semantic conventions where they exist (`invoke_agent`,
`chat`, `execute_tool <tool>`, `gen_ai.*` attributes; the conventions are in development status,
so the version instrumented against is pinned in `SEMCONV`), ordinary attributes elsewhere.

Redaction happens here, where a span is built, before anything leaves the platform: attributes
are an allow-list of identities, hashes, counts and outcomes read from the event data (never a
payload, a prompt, a completion, a note or a message), tool arguments appear only as their hash,
approvers as a hash, and any string that still looks like an e-mail address is masked.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from agent_jobs.core.contracts import EventView
from agent_jobs.core.identity import worker_name
from agent_jobs.core.states import TERMINAL, Status
from agent_jobs.verify.redact import PII

SEMCONV = "1.37.0"  # the GenAI semantic conventions these names were checked against
REDACTION_POLICY = "trace-redaction@1"
REDACTION = {
    "policy": REDACTION_POLICY,
    "prompt_and_completion_content": "NOT_RECORDED",
    "tool_args": "sha256 only",
    "customer_fields": PII,
}

AttrValue = str | int | float | bool
SpanStatus = Literal["OK", "ERROR", "UNSET"]
SpanKind = Literal["internal", "client"]

CHAT = "chat"
TOOL_PREFIX = "execute_tool "
_SWEEPER = "sweeper"
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_MAX_TEXT = 200

# Events that carry a policy decision on a proposed action, and the decision when the event does
# not name one (a revalidated grant is "approved", as the metrics count it).
_POLICY_EVENTS = {
    "approval_requested": "needs_approval",
    "policy_denied": "deny",
    "policy_denied_on_retry": "deny",
    "intent_recorded": "allow",
}
# What a person (or the clock) decided on an approval, by the event that records it.
_APPROVAL_DECISIONS = {
    "approval_granted": "granted",
    "approval_denied": "denied",
    "approval_expired": "expired",
}
# Transitions whose `reason` starts with a failure class (`connection_error: ...`).
_FAILING = frozenset({Status.RETRY_WAIT, Status.EXEC_UNKNOWN, Status.FAILED})
_RECONCILE_RESULTS = {
    "reconciled_found": "found",
    "reconciled_not_found": "not_found",
    "reconciled_different": "different",
    "reconcile_exhausted": "exhausted",
    "lease_lost_during_effect": "lease_lost",
}


@dataclass(frozen=True)
class SpanEvent:
    """A moment inside a span: a status transition, a lapsed lease."""

    name: str
    at: datetime
    attrs: dict[str, AttrValue] = field(default_factory=dict)


@dataclass(frozen=True)
class SpanRecord:
    """One span, as both renderers and the OTLP exporter read it. Times are UTC."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start: datetime
    end: datetime
    status: SpanStatus = "OK"
    kind: SpanKind = "internal"
    attrs: dict[str, AttrValue] = field(default_factory=dict)
    events: tuple[SpanEvent, ...] = ()
    # The event this span was derived from (0 for the root): orders spans that start together.
    seq: int = 0

    @property
    def duration_ms(self) -> float:
        return max(0.0, (self.end - self.start).total_seconds() * 1000)


@dataclass(frozen=True)
class TaskFacts:
    """What the root span needs from the task row (`store.TaskRow` has all of it)."""

    id: str
    tenant_id: str
    workflow: str
    status: Status
    trace_id: str
    created_at: datetime


def facts_of(task: Any) -> TaskFacts:
    """`TaskFacts` of a `TaskRow` (or anything with the same attributes)."""
    return TaskFacts(
        id=task.id,
        tenant_id=task.tenant_id,
        workflow=task.workflow,
        status=Status(task.status),
        trace_id=task.trace_id,
        created_at=task.created_at,
    )


# -- ids and redaction ---------------------------------------------------------------------------


def trace_id_of(task: TaskFacts) -> str:
    """The task's stored W3C trace id; one derived from the task id if the stored one is not 32
    lowercase hex digits (a row from before trace ids were checked)."""
    tid = task.trace_id.lower()
    if _HEX32.fullmatch(tid) and tid != "0" * 32:
        return tid
    return _digest("trace", task.id)[:32]


def span_id_of(task_id: str, part: str) -> str:
    """A 16-hex span id, stable for (task, part): rebuilding a trace gives the same ids."""
    sid = _digest("span", task_id, part)[:16]
    return sid if sid != "0" * 16 else "0" * 15 + "1"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()


def masked(value: Any) -> AttrValue:
    """An attribute value with e-mail addresses masked and text bounded."""
    if isinstance(value, bool | int | float):
        return value
    text = _EMAIL.sub(PII, str(value))
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 1] + "…"


def hashed_identity(value: str) -> str:
    """A person's id as a short hash: spans by the same approver correlate, none names them."""
    return "sha256:" + hashlib.sha256(value.encode("utf-8")).hexdigest()[:16]


def _put(attrs: dict[str, AttrValue], key: str, value: Any) -> None:
    if value is None or value == "":
        return
    if isinstance(value, list | tuple | dict):
        return  # never a structure: it could be a payload
    attrs[key] = masked(value)


def _utc(at: datetime) -> datetime:
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def _error_type(reason: Any) -> str | None:
    """`connection_error` of `connection_error: ConnectionError`: the class, never the text."""
    if not reason:
        return None
    return str(reason).split(":", 1)[0].strip()[:64] or None


# -- who ran it ----------------------------------------------------------------------------------


def _workers(events: Sequence[EventView]) -> dict[int, str]:
    """The worker (or process) behind each event: its own `by`, else the worker of the step it
    was emitted in. Model and tool events are appended while a step runs and carry no `by`; the
    step's own commit follows with one. If the step never committed because its lease lapsed,
    the sweeper's `lease_expired` event names the owner that lost it."""
    out: dict[int, str] = {}
    pending: list[int] = []
    for e in events:
        by = e.data.get("by")
        if by:
            by = worker_name(str(by))
        if e.type == "lease_expired":
            owner = e.data.get("owner")
            for seq in pending if owner else ():
                out[seq] = worker_name(str(owner))
            pending = []
        if by and by != _SWEEPER and e.type != "lease_expired":
            for seq in pending:
                out[seq] = by
            pending = []
        if by:
            out[e.seq] = by
        elif e.to_status is None and e.type not in _APPROVAL_DECISIONS:
            pending.append(e.seq)
    return out


# -- the builder ---------------------------------------------------------------------------------


@dataclass
class _Open:
    """An interval span opened by one event and closed by a later one."""

    span_id: str
    name: str
    start: datetime
    seq: int
    attrs: dict[str, AttrValue]


class _Builder:
    def __init__(self, task: TaskFacts, events: Sequence[EventView]) -> None:
        self.task = task
        self.events = list(events)
        self.trace_id = trace_id_of(task)
        self.root_id = span_id_of(task.id, "root")
        self.workers = _workers(self.events)
        self.spans: list[SpanRecord] = []
        self.root_events: list[SpanEvent] = []
        self.approval: _Open | None = None
        self.reconcile: _Open | None = None
        self.last_unknown_tool: str | None = None
        self.last_intent_seq: int | None = None

    def span(
        self,
        seq: int,
        name: str,
        start: datetime,
        end: datetime,
        attrs: dict[str, AttrValue],
        *,
        status: SpanStatus = "OK",
        kind: SpanKind = "internal",
        parent: str | None = None,
        span_id: str | None = None,
    ) -> SpanRecord:
        record = SpanRecord(
            trace_id=self.trace_id,
            span_id=span_id or span_id_of(self.task.id, f"event:{seq}"),
            parent_id=parent or self.root_id,
            name=name,
            start=_utc(start),
            end=max(_utc(end), _utc(start)),
            status=status,
            kind=kind,
            attrs=attrs,
            seq=seq,
        )
        self.spans.append(record)
        return record

    def worker(self, attrs: dict[str, AttrValue], e: EventView) -> None:
        _put(attrs, "worker", self.workers.get(e.seq))

    # -- per event type

    def chat(self, e: EventView) -> None:
        d = e.data
        attrs: dict[str, AttrValue] = {"gen_ai.operation.name": CHAT}
        _put(attrs, "gen_ai.request.model", d.get("model"))
        _put(attrs, "gen_ai.provider.name", d.get("provider"))
        for key, name in (
            ("input_tokens", "gen_ai.usage.input_tokens"),
            ("output_tokens", "gen_ai.usage.output_tokens"),
            ("cached_input_tokens", "gen_ai.usage.cache_read.input_tokens"),
        ):
            if isinstance(d.get(key), int):
                attrs[name] = d[key]
        _put(attrs, "route", d.get("route"))
        _put(attrs, "step_type", d.get("step_type"))
        _put(attrs, "purpose", d.get("purpose"))
        if isinstance(d.get("fallback"), bool):
            attrs["fallback"] = d["fallback"]
        _put(attrs, "cost_inr", d.get("cost_inr"))
        outcome = str(d.get("outcome") or "ok")
        attrs["outcome"] = masked(outcome)
        self.worker(attrs, e)
        status: SpanStatus = "OK"
        if outcome != "ok":
            status = "ERROR"
            attrs["error.type"] = masked(outcome)
        latency = _millis(d.get("latency_ms"))
        start = e.at - timedelta(milliseconds=latency) if latency is not None else e.at
        self.span(e.seq, CHAT, start, e.at, attrs, status=status, kind="client")

    def tool(self, e: EventView) -> None:
        d = e.data
        tool = str(d.get("tool") or e.type.removeprefix(TOOL_PREFIX))
        attrs: dict[str, AttrValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": masked(tool),
        }
        _put(attrs, "tool.version", d.get("tool_version"))
        _put(attrs, "args_hash", d.get("args_hash"))
        outcome = str(d.get("outcome") or "ok")
        attrs["outcome"] = masked(outcome)
        _put(attrs, "error.type", d.get("code"))
        _put(attrs, "idempotency_key", d.get("idempotency_key"))
        _put(attrs, "policy.version", d.get("policy_version"))
        _put(attrs, "approval.id", d.get("approval_id"))
        _put(attrs, "step_scope", d.get("step_scope"))
        if isinstance(d.get("attempts"), int):
            attrs["attempts"] = d["attempts"]
        self.worker(attrs, e)
        status: SpanStatus = "OK"
        if outcome != "ok":
            status = "ERROR"
            attrs.setdefault("error.type", masked(outcome))
            if outcome == "unknown" and self.last_intent_seq is not None:
                # Where the intent is written down: what reconciliation starts from.
                attrs["checkpoint.seq"] = self.last_intent_seq
        parent = None
        if self.reconcile is not None and e.from_status is Status.EXEC_UNKNOWN:
            parent = self.reconcile.span_id
        start = _parse_time(d.get("started_at")) or e.at
        duration = _millis(d.get("duration_ms"))
        end = start + timedelta(milliseconds=duration) if duration is not None else e.at
        if parent is not None and self.reconcile is not None and self.last_unknown_tool:
            attrs["reconcile_for"] = self.last_unknown_tool
        name = TOOL_PREFIX + tool
        record = self.span(e.seq, name, start, end, attrs, status=status, parent=parent)
        if outcome == "unknown":
            self.last_unknown_tool = record.span_id

    def policy(self, e: EventView, decision: str) -> None:
        d = e.data
        attrs: dict[str, AttrValue] = {"decision": masked(d.get("decision") or decision)}
        if e.type == "intent_recorded" and d.get("approval_id"):
            attrs["decision"] = "approved"  # the grant revalidated before acting
        _put(attrs, "policy.version", d.get("policy_version"))
        _put(attrs, "policy.reason", d.get("reason"))
        _put(attrs, "gen_ai.tool.name", d.get("tool"))
        _put(attrs, "action_hash", d.get("action_hash"))
        _put(attrs, "idempotency_key", d.get("idempotency_key"))
        _put(attrs, "approval.id", d.get("approval_id"))
        self.worker(attrs, e)
        self.span(
            e.seq,
            "policy.evaluate",
            e.at,
            e.at,
            attrs,
            span_id=span_id_of(self.task.id, f"policy:{e.seq}"),
        )

    def open_approval(self, e: EventView) -> None:
        attrs: dict[str, AttrValue] = {"worker_held": False}
        _put(attrs, "approval.id", e.data.get("approval_id"))
        _put(attrs, "approval.ttl_s", e.data.get("ttl_s"))
        _put(attrs, "action_hash", e.data.get("action_hash"))
        sid = span_id_of(self.task.id, f"approval:{e.seq}")
        self.approval = _Open(sid, "approval.wait", e.at, e.seq, attrs)

    def approval_decided(self, e: EventView) -> None:
        if self.approval is None:
            return
        self.approval.attrs["decision"] = _APPROVAL_DECISIONS[e.type]
        approver = e.data.get("approver")
        if approver:
            self.approval.attrs["approver"] = hashed_identity(str(approver))

    def close_approval(self, e: EventView) -> None:
        if self.approval is None:
            return
        a, self.approval = self.approval, None
        if e.type == "cancelled":
            a.attrs.setdefault("decision", "cancelled")
        elif e.type in _APPROVAL_DECISIONS:
            a.attrs.setdefault("decision", _APPROVAL_DECISIONS[e.type])
        _put(a.attrs, "resumed_by", self.workers.get(e.seq))
        self.span(a.seq, a.name, a.start, e.at, a.attrs, span_id=a.span_id)

    def open_reconcile(self, e: EventView) -> None:
        attrs: dict[str, AttrValue] = {}
        _put(attrs, "gen_ai.tool.name", e.data.get("tool"))
        _put(attrs, "idempotency_key", e.data.get("idempotency_key"))
        _put(attrs, "unknown.reason", _error_type(e.data.get("reason")))
        if self.last_unknown_tool:
            attrs["reconcile_for"] = self.last_unknown_tool
        sid = span_id_of(self.task.id, f"reconcile:{e.seq}")
        self.reconcile = _Open(sid, "reconcile", e.at, e.seq, attrs)

    def close_reconcile(self, e: EventView) -> None:
        if self.reconcile is None:
            return
        r, self.reconcile = self.reconcile, None
        r.attrs["reconcile.result"] = _RECONCILE_RESULTS.get(e.type, e.type)
        _put(r.attrs, "entered_by", self.workers.get(r.seq))
        self.worker(r.attrs, e)
        # The unknown outcome is the error (on the tool span); settling it is not. An outcome
        # that could not be settled is.
        status: SpanStatus = "ERROR" if e.to_status is Status.ESCALATED else "OK"
        self.span(r.seq, r.name, r.start, e.at, r.attrs, status=status, span_id=r.span_id)

    def transition(self, e: EventView) -> None:
        attrs: dict[str, AttrValue] = {}
        if e.from_status is not None:
            attrs["from"] = e.from_status.value
        if e.to_status is not None:
            attrs["to"] = e.to_status.value
        self.worker(attrs, e)
        if e.type == "lease_expired":
            owner = e.data.get("owner")
            _put(attrs, "lease.owner", worker_name(str(owner)) if owner else owner)
        if e.to_status in _FAILING:
            _put(attrs, "reason.class", _error_type(e.data.get("reason")))
        if e.type in _APPROVAL_DECISIONS and e.data.get("approver"):
            attrs["approver"] = hashed_identity(str(e.data["approver"]))
        self.root_events.append(SpanEvent(str(masked(e.type)), _utc(e.at), attrs))

    # -- the walk

    def build(self) -> list[SpanRecord]:
        for e in self.events:
            self.visit(e)
        end = self.events[-1].at if self.events else self.task.created_at
        last = self.events[-1] if self.events else None
        if self.approval is not None and last is not None:
            # Still waiting: the span runs to the last thing recorded.
            a = self.approval
            a.attrs["approval.open"] = True
            self.span(a.seq, a.name, a.start, end, a.attrs, status="UNSET", span_id=a.span_id)
        if self.reconcile is not None:
            r = self.reconcile
            self.span(r.seq, r.name, r.start, end, r.attrs, status="UNSET", span_id=r.span_id)
        root = self.root(end)
        children = sorted(self.spans, key=lambda s: (s.start, s.seq))
        return [root, *children]

    def visit(self, e: EventView) -> None:
        if e.type == CHAT:
            self.chat(e)
        elif e.type.startswith(TOOL_PREFIX):
            self.tool(e)
        elif e.type in _APPROVAL_DECISIONS and e.to_status is None:
            self.approval_decided(e)
            self.transition(e)
        else:
            self.transition(e)
        if e.to_status is None:
            return
        if e.from_status is Status.APPROVAL_WAIT and e.to_status is not Status.APPROVAL_WAIT:
            self.close_approval(e)
        if e.from_status is Status.EXEC_UNKNOWN and e.to_status is not Status.EXEC_UNKNOWN:
            self.close_reconcile(e)
        decision = _POLICY_EVENTS.get(e.type)
        if decision is not None:
            self.policy(e, decision)
        if e.type in ("intent_recorded", "retry_same_key"):
            self.last_intent_seq = e.seq
        if e.to_status is Status.APPROVAL_WAIT and e.from_status is not Status.APPROVAL_WAIT:
            self.open_approval(e)
        if e.to_status is Status.EXEC_UNKNOWN and e.from_status is not Status.EXEC_UNKNOWN:
            self.open_reconcile(e)

    def root(self, end: datetime) -> SpanRecord:
        t = self.task
        agent = t.workflow.split("@", 1)[0]
        attrs: dict[str, AttrValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": masked(agent),
            "task.id": t.id,
            "tenant.id": t.tenant_id,
            "workflow.version": t.workflow,
            "task.status": t.status.value,
            "redaction.policy": REDACTION_POLICY,
        }
        status: SpanStatus = "UNSET"
        if t.status in TERMINAL:
            attrs["task.outcome"] = t.status.value
            status = "ERROR" if t.status is Status.FAILED else "OK"
        start = self.events[0].at if self.events else t.created_at
        return SpanRecord(
            trace_id=self.trace_id,
            span_id=self.root_id,
            parent_id=None,
            name=f"invoke_agent {agent}",
            start=_utc(start),
            end=max(_utc(end), _utc(start)),
            status=status,
            attrs=attrs,
            events=tuple(self.root_events),
        )


def _millis(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    return float(value) if ok else None


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return _utc(datetime.fromisoformat(value.replace("Z", "+00:00")))
    except ValueError:
        return None


def spans_from_events(task: TaskFacts | Any, events: Sequence[EventView]) -> list[SpanRecord]:
    """The task's spans, root first, then by start time. Pure: the same task and events always
    give the same spans, ids included."""
    facts = task if isinstance(task, TaskFacts) else facts_of(task)
    return _Builder(facts, sorted(events, key=lambda e: e.seq)).build()


# -- renderers -----------------------------------------------------------------------------------


def _ms(value: float) -> float | int:
    rounded = round(value, 3)
    return int(rounded) if rounded == int(rounded) else rounded


def _iso(at: datetime) -> str:
    return _utc(at).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def trace_json(spans: Sequence[SpanRecord]) -> dict[str, Any]:
    """The seed's trace shape: trace id, root start, the redaction block, and each span with its
    parent, offsets in milliseconds from the root's start, status and attributes."""
    if not spans:
        return {"trace_id": None, "root_start": None, "redaction": dict(REDACTION), "spans": []}
    t0 = spans[0].start
    out = []
    for s in spans:
        item: dict[str, Any] = {
            "span_id": s.span_id,
            "parent": s.parent_id,
            "name": s.name,
            "start_ms": _ms((s.start - t0).total_seconds() * 1000),
            "duration_ms": _ms(s.duration_ms),
            "status": s.status,
            "attrs": dict(s.attrs),
        }
        if s.events:
            item["events"] = [
                {
                    "name": ev.name,
                    "at_ms": _ms((ev.at - t0).total_seconds() * 1000),
                    "attrs": dict(ev.attrs),
                }
                for ev in s.events
            ]
        out.append(item)
    return {
        "trace_id": spans[0].trace_id,
        "root_start": _iso(t0),
        "redaction": dict(REDACTION),
        "spans": out,
    }


_WATERFALL_WIDTH = 40
# Root events the waterfall lists under the spans: the moments a lease gap is read from.
_NOTABLE = frozenset({"lease_expired", "lease_lost_during_effect", "late_result_dropped"})
_DETAIL_KEYS = (
    ("gen_ai.request.model", "model"),
    ("gen_ai.usage.input_tokens", "in"),
    ("gen_ai.usage.output_tokens", "out"),
    ("decision", "decision"),
    ("policy.version", "policy"),
    ("outcome", "outcome"),
    ("error.type", "error"),
    ("idempotency_key", "key"),
    ("reconcile.result", "result"),
    ("worker_held", "worker_held"),
)


def waterfall(spans: Sequence[SpanRecord], width: int = _WATERFALL_WIDTH) -> str:
    """The trace as text: one line per span, indented by depth, with its offset, duration, a bar
    on the root's time axis, its worker and the attributes an on-call engineer reads first. The
    one red span reads `!!` in the status column."""
    if not spans:
        return "(no events)"
    root = spans[0]
    total = max(root.duration_ms, 0.001)
    depth = {root.span_id: 0}
    lines = [f"trace {root.trace_id}  started {_iso(root.start)}  {_fmt_ms(root.duration_ms)}"]
    name_width = max(len(s.name) + 2 * _depth(s, depth) for s in spans)
    for s in spans:
        d = _depth(s, depth)
        offset = (s.start - root.start).total_seconds() * 1000
        lo = min(width - 1, int(offset / total * width))
        hi = max(lo + 1, min(width, round((offset + s.duration_ms) / total * width)))
        bar = " " * lo + "█" * (hi - lo) + " " * (width - hi)
        mark = {"OK": "ok", "ERROR": "!!", "UNSET": ".."}[s.status]
        worker = str(s.attrs.get("worker", ""))
        detail = " ".join(f"{n}={_text(s.attrs[k])}" for k, n in _DETAIL_KEYS if k in s.attrs)
        label = "  " * d + s.name
        lines.append(
            f"{_fmt_ms(offset):>11} {_fmt_ms(s.duration_ms):>10} |{bar}| {mark} "
            f"{label:<{name_width}} {worker:<8} {detail}".rstrip()
        )
    notable = [ev for ev in root.events if ev.name in _NOTABLE or "reason.class" in ev.attrs]
    for ev in notable:
        offset = (ev.at - root.start).total_seconds() * 1000
        attrs = " ".join(f"{k}={_text(v)}" for k, v in ev.attrs.items() if k != "worker")
        worker = str(ev.attrs.get("worker", ""))
        lines.append(f"{_fmt_ms(offset):>11}  event: {ev.name} ({worker}) {attrs}".rstrip())
    return "\n".join(lines)


def _text(value: AttrValue) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _depth(s: SpanRecord, depth: dict[str, int]) -> int:
    if s.span_id not in depth:
        depth[s.span_id] = (depth.get(s.parent_id or "", 0) + 1) if s.parent_id else 0
    return depth[s.span_id]


def _fmt_ms(ms: float) -> str:
    if ms >= 60_000:
        return f"{ms / 60_000:.1f}min"
    if ms >= 1_000:
        return f"{ms / 1000:.2f}s"
    return f"{ms:.1f}ms"
