"""A real task's model calls priced with the seed's formula (`agent-jobs cost --task ID`).

Its own module so that the command tree does not import the gateway: `cmd_cost` imports it when
it runs.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from agent_jobs.gateway.contracts import CallRecord
from agent_jobs.gateway.costmodel import REDUCED_CALLS, price_usage
from agent_jobs.obs.platform_time import platform_time, platform_time_text


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
