"""Agent commands: `agent-jobs sim serve` and `agent-jobs cost`.

`cost` prints the seed's cost model (`gateway.costmodel`); `cost --task ID` prices a real task's
model calls, as the gateway recorded them in the task's `chat` events, with the same formula, so
a run can be set against the plan.
"""

from __future__ import annotations

import argparse
import itertools
import json
from decimal import Decimal
from typing import Any

from agent_jobs.gateway.contracts import CallRecord
from agent_jobs.gateway.costmodel import (
    REDUCED_CALLS,
    cost_report_json,
    price_usage,
    render_cost_table,
)


def cmd_sim_serve(args: argparse.Namespace) -> int:
    from agent_jobs.sim.server import serve  # noqa: PLC0415 - keep `--help` fast

    # No --world: the sim's default world (the README's order 8472); it prints which it serves.
    serve(args.host, args.port, args.state, world=args.world, access_log=args.access_log)
    return 0


def _task_calls(store: Any, task_id: str) -> tuple[Any, list[CallRecord], list[str]]:
    from agent_jobs.workflows.refund.model import CHAT_EVENT, calls_from_events  # noqa: PLC0415

    task = store.get(task_id)
    chats = [e for e in store.events(task_id) if e.type == CHAT_EVENT]
    return task, calls_from_events(chats), [str(e.data.get("step_type", "")) for e in chats]


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
    from datetime import datetime, timedelta  # noqa: PLC0415

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


def task_cost_json(store: Any, task_id: str) -> dict[str, Any]:
    """A task's billed model calls (from its `chat` events) priced with the seed's formula, and
    the platform's own time in it (`platform_time`)."""
    task, calls, steps = _task_calls(store, task_id)
    return {
        "platform": platform_time(store.events(task_id)),
        "task_id": task.id,
        "workflow": task.workflow,
        "status": task.status.value,
        "model_route": task.pinned.get("model_route"),
        "steps": steps,
        "recorded_cost_inr": str(sum((c.cost for c in calls), Decimal(0))),
        **price_usage(calls).to_json(),
    }


def task_cost_text(store: Any, task_id: str) -> str:
    """`task_cost_json` as a table, next to the seed's plan for the same design."""
    task, calls, steps = _task_calls(store, task_id)
    platform = platform_time(store.events(task_id))
    if not calls:
        return "\n".join(
            [f"task {task.id} ({task.workflow}) recorded no model calls"]
            + ([platform_time_text(platform)] if platform else [])
        )
    report = price_usage(calls)
    lines = [
        f"task {task.id} ({task.workflow}, {task.status.value}); route "
        f"{task.pinned.get('model_route', '-')}; priced with the seed's toy model",
        f"{'call':>4}  {'step':<16}{'model':<28}{'input':>7}  {'output':>6}  "
        f"{'latency ms':>10}  {'cost INR':>9}",
    ]
    for row, call, step in zip(report.rows, calls, steps, strict=True):
        lines.append(
            f"{row.call:>4}  {step:<16}{call.model:<28}{row.input_tokens:>7,}  "
            f"{row.output_tokens:>6,}  {row.latency_ms:>10,.0f}  {row.cost:>9.3f}"
        )
    lines.append(
        f"{'sum':>4}  {'':<16}{'':<28}{report.input_tokens:>7,}  {report.output_tokens:>6,}  "
        f"{report.latency_ms:>10,.0f}  {report.cost:>9.3f}"
    )
    recorded = sum((c.cost for c in calls), Decimal(0))
    plan = price_usage(REDUCED_CALLS)
    lines += [
        f"gateway-recorded cost (the route's price table): INR {recorded:.3f}",
        f"seed's plan for this design: {len(plan.rows)} calls, {plan.input_tokens:,} in / "
        f"{plan.output_tokens:,} out tokens, {plan.latency_ms:,.0f} ms, INR {plan.cost:.3f}",
    ]
    if platform:
        lines.append(platform_time_text(platform))
    return "\n".join(lines)


def cmd_cost(args: argparse.Namespace) -> int:
    if args.task is None:
        if args.json:
            print(json.dumps(cost_report_json(cap=args.cap), sort_keys=True, indent=2))
        else:
            print(render_cost_table(cap=args.cap), end="")
        return 0
    from agent_jobs.queue.runtime import get_runtime  # noqa: PLC0415 - Celery loads lazily

    store = get_runtime().store
    if args.json:
        print(json.dumps(task_cost_json(store, args.task), sort_keys=True, indent=2))
    else:
        print(task_cost_text(store, args.task))
    return 0


def register(sub: Any) -> None:
    from agent_jobs.sim.worlds import BUILDERS  # noqa: PLC0415

    p = sub.add_parser("sim", help="the simulated business systems (orders, payments, policies)")
    ssub = p.add_subparsers(dest="sim_command", metavar="SIM")
    ssub.required = True
    s = ssub.add_parser("serve", help="serve the business-systems HTTP contract until Ctrl-C")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8090, help="0 picks a free port")
    s.add_argument("--state", default=None, help="JSON state file, kept across restarts")
    s.add_argument("--world", default=None, choices=sorted(BUILDERS), help="seed a fresh state")
    s.add_argument("--access-log", action="store_true", help="one line per request on stderr")
    s.set_defaults(func=cmd_sim_serve)

    c = sub.add_parser("cost", help="the seed's token and latency arithmetic, or a task's calls")
    c.add_argument("--json", action="store_true", help="one JSON object")
    c.add_argument("--task", default=None, metavar="ID", help="price this task's model calls")
    c.add_argument("--cap", type=int, default=40, help="model-call concurrency cap (Little's law)")
    c.set_defaults(func=cmd_cost)
