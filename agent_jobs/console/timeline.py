"""What the timeline page reads off a task's trace, beyond the spans themselves: where the work
moved from one worker to another and how long nobody held it (the lease gap of seed 004's
figure), and the model's and tools' totals.

Pure functions of `obs.tracing.trace_json` output, so the page and `agent-jobs trace` read the
same spans.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import suppress
from decimal import Decimal, InvalidOperation
from typing import Any

CHAT = "chat"
TOOL_PREFIX = "execute_tool "
_LEASE_EVENTS = frozenset({"lease_expired", "lease_lost_during_effect"})
_WORK = frozenset({CHAT, "policy.evaluate"})


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _worked(name: str) -> bool:
    # Spans of work a worker did. `reconcile` and `approval.wait` are intervals of the task's
    # state (they open when the state is entered), not of anyone's work.
    return name in _WORK or name.startswith(TOOL_PREFIX)


def _activity(trace: Mapping[str, Any]) -> list[tuple[float, float, str]]:
    """(start, end, worker) of everything a worker did: work spans and root transitions."""
    spans: Sequence[Mapping[str, Any]] = trace.get("spans") or []
    out: list[tuple[float, float, str]] = []
    for i, s in enumerate(spans):
        attrs = s.get("attrs") or {}
        if i > 0 and attrs.get("worker") and _worked(str(s.get("name") or "")):
            start = _num(s.get("start_ms"))
            out.append((start, start + _num(s.get("duration_ms")), str(attrs["worker"])))
        if i == 0:
            for ev in s.get("events") or []:
                worker = (ev.get("attrs") or {}).get("worker")
                if worker and ev.get("name") not in _LEASE_EVENTS:
                    at = _num(ev.get("at_ms"))
                    out.append((at, at, str(worker)))
    return sorted(out, key=lambda a: (a[0], a[1]))


def worker_changes(trace: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each hand-over of the task from one worker to another: the last moment the first worker
    was seen working, the first moment the next one was, the gap between them, and whether a
    lease lapsed in it (a worker lost, not a worker finished)."""
    spans: Sequence[Mapping[str, Any]] = trace.get("spans") or []
    lapses = [
        _num(ev.get("at_ms"))
        for ev in (spans[0].get("events") or [] if spans else [])
        if ev.get("name") in _LEASE_EVENTS
    ]
    changes: list[dict[str, Any]] = []
    worker: str | None = None
    last_end = 0.0
    for start, end, who in _activity(trace):
        if worker is not None and who != worker:
            changes.append(
                {
                    "from_worker": worker,
                    "to_worker": who,
                    "start_ms": last_end,
                    "end_ms": start,
                    "gap_ms": round(max(0.0, start - last_end), 3),
                    "lease_expired": any(last_end <= at <= start for at in lapses),
                }
            )
            last_end = end
        else:
            last_end = max(last_end, end)
        worker = who
    return changes


def model_totals(trace: Mapping[str, Any]) -> dict[str, Any]:
    """Calls, tokens and cost of every model call in the trace."""
    calls = input_tokens = output_tokens = 0
    cost = Decimal(0)
    for s in trace.get("spans") or []:
        if s.get("name") != CHAT:
            continue
        attrs = s.get("attrs") or {}
        calls += 1
        input_tokens += int(_num(attrs.get("gen_ai.usage.input_tokens")))
        output_tokens += int(_num(attrs.get("gen_ai.usage.output_tokens")))
        with suppress(InvalidOperation):
            cost += Decimal(str(attrs.get("cost_inr") or 0))
    return {
        "calls": calls,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cost_inr": str(cost),
    }


def tool_calls(trace: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every tool call with its outcome, in start order."""
    out = []
    for s in trace.get("spans") or []:
        name = str(s.get("name") or "")
        if not name.startswith(TOOL_PREFIX):
            continue
        attrs = s.get("attrs") or {}
        out.append(
            {
                "tool": name[len(TOOL_PREFIX) :],
                "outcome": attrs.get("outcome"),
                "error_type": attrs.get("error.type"),
                "idempotency_key": attrs.get("idempotency_key"),
                "worker": attrs.get("worker"),
                "start_ms": s.get("start_ms"),
                "duration_ms": s.get("duration_ms"),
            }
        )
    return out
