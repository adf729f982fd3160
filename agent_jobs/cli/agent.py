"""Agent commands: `agent-jobs sim serve` and `agent-jobs cost`.

`cost` prints the seed's cost model (`gateway.costmodel`); `cost --task ID` prices a real task's
model calls, as the gateway recorded them in the task's `chat` events, with the same formula, so
a run can be set against the plan.
"""

from __future__ import annotations

import argparse
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
from agent_jobs.obs.platform_time import platform_time, platform_time_text


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
