"""The platform's own time in a task, read from its event log: everything but the model calls,
the tool calls and the parked waits (`agent-jobs cost --task ID`, `agent-jobs bench platform`)."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

# Seed 004's budget for the platform's own part of one refund task: "about 80 ms of checkpoint
# commits (eight at 10 ms each)", beside ~11 s of model and tool time. Our target: half of it.
SEED_COMMIT_BUDGET_MS = 80.0
PARKED = ("APPROVAL_WAIT", "RETRY_WAIT")


def platform_time(events: list[Any]) -> dict[str, Any]:
    """The platform's own time in a task, from its event log: first event to the last, less the
    model calls (the gateway's measured latency in each `chat` event), the tool calls (the union
    of the `execute_tool` events' intervals: parallel reads count once) and the parked waits
    (from entering APPROVAL_WAIT or RETRY_WAIT to the next event: a person deciding, a timer).
    What is left is submit, claims, commits, hand-offs between steps and the steps' own code."""
    if not events:
        return {}
    wall = (events[-1].at - events[0].at).total_seconds() * 1000
    model = sum(float(e.data.get("latency_ms", 0)) for e in events if e.type == "chat")
    spans: list[tuple[datetime, datetime]] = []
    loose_tool_ms = 0.0
    for e in events:
        if not e.type.startswith("execute_tool"):
            continue
        ms = float(e.data.get("duration_ms", 0))
        started = e.data.get("started_at")
        if isinstance(started, str):
            t0 = datetime.fromisoformat(started)
            spans.append((t0, t0 + timedelta(milliseconds=ms)))
        else:
            loose_tool_ms += ms
    tool = loose_tool_ms
    end: datetime | None = None
    for t0, t1 in sorted(spans):
        if end is None or t0 > end:
            tool += (t1 - t0).total_seconds() * 1000
            end = t1
        elif t1 > end:
            tool += (t1 - end).total_seconds() * 1000
            end = t1
    parked = 0.0
    for e, nxt in itertools.pairwise(events):
        if e.to_status in PARKED:
            parked += (nxt.at - e.at).total_seconds() * 1000
    platform = wall - model - tool - parked
    return {
        "wall_ms": round(wall, 1),
        "model_ms": round(model, 1),
        "tool_ms": round(tool, 1),
        "parked_ms": round(parked, 1),
        "platform_ms": round(platform, 1),
        "transitions": sum(1 for e in events if e.to_status is not None),
        "seed_commit_budget_ms": SEED_COMMIT_BUDGET_MS,
        "target_ms": SEED_COMMIT_BUDGET_MS / 2,
    }


def platform_time_text(p: dict[str, Any]) -> str:
    return (
        f"platform time: {p['platform_ms']:,.1f} ms over {p['transitions']} transitions "
        f"(wall {p['wall_ms']:,.1f} ms less model {p['model_ms']:,.1f}, tools "
        f"{p['tool_ms']:,.1f}, parked {p['parked_ms']:,.1f}); the seed budgets about "
        f"{p['seed_commit_budget_ms']:.0f} ms of checkpoint commits (target: "
        f"{p['target_ms']:.0f} ms)"
    )
