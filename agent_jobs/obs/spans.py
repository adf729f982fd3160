"""The spans a task's trace is made of (`SpanRecord`, `SpanEvent`), the task facts the root span
reads (`TaskFacts`), their ids, and the redaction every attribute value passes through.

`obs.tracing` builds these from the event log and `obs.trace_render` prints them; both read the
records and helpers here, so neither depends on the other. Ids are derived, never random: the
task's stored `trace_id` is the trace id, and span ids are hashes of the task id and a part name,
so rebuilding a trace twice gives identical ids.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from agent_jobs.core.states import Status
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

_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_MAX_TEXT = 200


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


def put_attr(attrs: dict[str, AttrValue], key: str, value: Any) -> None:
    """Set `key` to the masked `value`; nothing for an empty value or a structure."""
    if value is None or value == "":
        return
    if isinstance(value, list | tuple | dict):
        return  # never a structure: it could be a payload
    attrs[key] = masked(value)


def error_type(reason: Any) -> str | None:
    """`connection_error` of `connection_error: ConnectionError`: the class, never the text."""
    if not reason:
        return None
    return str(reason).split(":", 1)[0].strip()[:64] or None


def utc(at: datetime) -> datetime:
    """`at` in UTC; a naive time is taken to be UTC already."""
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
