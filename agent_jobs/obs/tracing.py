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

The span records, their ids and the redaction helpers are in `obs.spans`, the printed forms in
`obs.trace_render`; both are re-exported here, so `obs.tracing` stays the one import.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from agent_jobs.core.contracts import EventView
from agent_jobs.core.identity import worker_name
from agent_jobs.core.states import TERMINAL, Status
from agent_jobs.obs.spans import (
    REDACTION,
    REDACTION_POLICY,
    SEMCONV,
    AttrValue,
    SpanEvent,
    SpanKind,
    SpanRecord,
    SpanStatus,
    TaskFacts,
    error_type,
    facts_of,
    hashed_identity,
    masked,
    put_attr,
    span_id_of,
    trace_id_of,
    utc,
)
from agent_jobs.obs.trace_render import trace_json, waterfall

__all__ = [
    "CHAT",
    "REDACTION",
    "REDACTION_POLICY",
    "SEMCONV",
    "TOOL_PREFIX",
    "AttrValue",
    "SpanEvent",
    "SpanKind",
    "SpanRecord",
    "SpanStatus",
    "TaskFacts",
    "facts_of",
    "hashed_identity",
    "masked",
    "span_id_of",
    "spans_from_events",
    "trace_id_of",
    "trace_json",
    "waterfall",
]

CHAT = "chat"
TOOL_PREFIX = "execute_tool "
_SWEEPER = "sweeper"

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
            start=utc(start),
            end=max(utc(end), utc(start)),
            status=status,
            kind=kind,
            attrs=attrs,
            seq=seq,
        )
        self.spans.append(record)
        return record

    def worker(self, attrs: dict[str, AttrValue], e: EventView) -> None:
        put_attr(attrs, "worker", self.workers.get(e.seq))

    # -- per event type

    def chat(self, e: EventView) -> None:
        d = e.data
        attrs: dict[str, AttrValue] = {"gen_ai.operation.name": CHAT}
        put_attr(attrs, "gen_ai.request.model", d.get("model"))
        put_attr(attrs, "gen_ai.provider.name", d.get("provider"))
        for key, name in (
            ("input_tokens", "gen_ai.usage.input_tokens"),
            ("output_tokens", "gen_ai.usage.output_tokens"),
            ("cached_input_tokens", "gen_ai.usage.cache_read.input_tokens"),
        ):
            if isinstance(d.get(key), int):
                attrs[name] = d[key]
        put_attr(attrs, "route", d.get("route"))
        put_attr(attrs, "step_type", d.get("step_type"))
        put_attr(attrs, "purpose", d.get("purpose"))
        if isinstance(d.get("fallback"), bool):
            attrs["fallback"] = d["fallback"]
        put_attr(attrs, "cost_inr", d.get("cost_inr"))
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
        put_attr(attrs, "tool.version", d.get("tool_version"))
        put_attr(attrs, "args_hash", d.get("args_hash"))
        outcome = str(d.get("outcome") or "ok")
        attrs["outcome"] = masked(outcome)
        put_attr(attrs, "error.type", d.get("code"))
        put_attr(attrs, "idempotency_key", d.get("idempotency_key"))
        put_attr(attrs, "policy.version", d.get("policy_version"))
        put_attr(attrs, "approval.id", d.get("approval_id"))
        put_attr(attrs, "step_scope", d.get("step_scope"))
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
        put_attr(attrs, "policy.version", d.get("policy_version"))
        put_attr(attrs, "policy.reason", d.get("reason"))
        put_attr(attrs, "gen_ai.tool.name", d.get("tool"))
        put_attr(attrs, "action_hash", d.get("action_hash"))
        put_attr(attrs, "idempotency_key", d.get("idempotency_key"))
        put_attr(attrs, "approval.id", d.get("approval_id"))
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
        put_attr(attrs, "approval.id", e.data.get("approval_id"))
        put_attr(attrs, "approval.ttl_s", e.data.get("ttl_s"))
        put_attr(attrs, "action_hash", e.data.get("action_hash"))
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
        put_attr(a.attrs, "resumed_by", self.workers.get(e.seq))
        self.span(a.seq, a.name, a.start, e.at, a.attrs, span_id=a.span_id)

    def open_reconcile(self, e: EventView) -> None:
        attrs: dict[str, AttrValue] = {}
        put_attr(attrs, "gen_ai.tool.name", e.data.get("tool"))
        put_attr(attrs, "idempotency_key", e.data.get("idempotency_key"))
        put_attr(attrs, "unknown.reason", error_type(e.data.get("reason")))
        if self.last_unknown_tool:
            attrs["reconcile_for"] = self.last_unknown_tool
        sid = span_id_of(self.task.id, f"reconcile:{e.seq}")
        self.reconcile = _Open(sid, "reconcile", e.at, e.seq, attrs)

    def close_reconcile(self, e: EventView) -> None:
        if self.reconcile is None:
            return
        r, self.reconcile = self.reconcile, None
        r.attrs["reconcile.result"] = _RECONCILE_RESULTS.get(e.type, e.type)
        put_attr(r.attrs, "entered_by", self.workers.get(r.seq))
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
            put_attr(attrs, "lease.owner", worker_name(str(owner)) if owner else owner)
        if e.to_status in _FAILING:
            put_attr(attrs, "reason.class", error_type(e.data.get("reason")))
        if e.type in _APPROVAL_DECISIONS and e.data.get("approver"):
            attrs["approver"] = hashed_identity(str(e.data["approver"]))
        self.root_events.append(SpanEvent(str(masked(e.type)), utc(e.at), attrs))

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
            start=utc(start),
            end=max(utc(end), utc(start)),
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
        return utc(datetime.fromisoformat(value.replace("Z", "+00:00")))
    except ValueError:
        return None


def spans_from_events(task: TaskFacts | Any, events: Sequence[EventView]) -> list[SpanRecord]:
    """The task's spans, root first, then by start time. Pure: the same task and events always
    give the same spans, ids included."""
    facts = task if isinstance(task, TaskFacts) else facts_of(task)
    return _Builder(facts, sorted(events, key=lambda e: e.seq)).build()
