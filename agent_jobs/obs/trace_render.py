"""A task's trace printed: `trace_json` (the seed's trace shape, which the console's timeline and
the API serve) and `waterfall` (the text `agent-jobs trace` prints). Pure functions of the spans
`obs.tracing.spans_from_events` builds.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from agent_jobs.obs.spans import REDACTION, AttrValue, SpanRecord, utc


def _ms(value: float) -> float | int:
    rounded = round(value, 3)
    return int(rounded) if rounded == int(rounded) else rounded


def _iso(at: datetime) -> str:
    return utc(at).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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
