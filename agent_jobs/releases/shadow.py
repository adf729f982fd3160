"""Shadow: a candidate release processes copies of live tasks against simulated tools, and its
proposals are compared with the incumbent's. Nothing it does reaches a customer: the copies run
in a throwaway environment (its own database, broker, worker and simulator), the simulated world
is rebuilt from what the live task itself read, and no approval is ever granted to a copy.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from agent_jobs.sim import worlds

SHADOW_TENANT = "shadow"


def world_from_task(state: dict[str, Any]) -> dict[str, Any] | None:
    """The business systems as the live task saw them (its successful reads), or None."""
    order: dict[str, Any] | None = None
    payments: list[dict[str, Any]] = []
    refunds: list[dict[str, Any]] = []
    for e in state.get("history") or []:
        if e.get("kind") != "tool" or not e.get("ok"):
            continue
        result = e.get("result") or {}
        if e["tool"] == "orders.get":
            order = dict(result.get("order") or result)
        elif e["tool"] == "payments.list":
            payments = list(result.get("payments") or [])
        elif e["tool"] == "refunds.list":
            refunds = list(result.get("refunds") or [])
    if order is None or "order_id" not in order:
        return None
    # Read views carry derived fields (an order's payment ids, a payment's refunded total);
    # the world holds only the records they are derived from.
    world = worlds.empty()
    world["orders"] = [{k: v for k, v in order.items() if k != "payment_ids"}]
    world["payments"] = [{k: v for k, v in p.items() if k != "refunded_minor"} for p in payments]
    world["refunds"] = refunds
    return world


def decision(state: dict[str, Any], status: str) -> dict[str, Any]:
    """What a task decided, comparable across releases: the refund it proposed last (after the
    gate's denials) or none, and whether it escalated. Never the prose."""
    proposed = None
    for e in state.get("history") or []:
        if e.get("kind") != "model":
            continue
        for call in (e.get("proposal") or {}).get("calls") or []:
            if call.get("tool") == "refunds.create":
                proposed = {k: call["args"].get(k) for k in ("payment_id", "amount_minor")}
    refund = state.get("pending_action") or (state.get("runtime") or {}).get("pending_action")
    if refund and refund.get("tool") == "refunds.create":
        proposed = {k: refund["args"].get(k) for k in ("payment_id", "amount_minor")}
    return {"refund": proposed, "escalated": status in ("ESCALATED", "FAILED")}


def shadow_report(
    store: Any,
    candidate: dict[str, Any],
    *,
    workflow: str = "refund_resolution@3",
    window_s: float = 3600.0,
    limit: int = 50,
) -> dict[str, Any]:
    """Run `candidate` (a manifest) on copies of the incumbent's recent finished or waiting
    tasks; report how often their decisions agree, and each disagreement."""
    from agent_jobs.evals.runner import EvalEnvironment  # noqa: PLC0415
    from agent_jobs.evals.suites import Case, Expected  # noqa: PLC0415

    since = store.db_now() - timedelta(seconds=window_s)
    live = [
        t
        for t in store.tasks_since(workflow, since, limit=limit * 4)
        if t.release != candidate["release_id"]
        and t.status in ("COMPLETED", "ESCALATED", "FAILED", "APPROVAL_WAIT")
    ][:limit]
    copies: list[tuple[Any, Case]] = []
    for t in live:
        world = world_from_task(t.state)
        if world is None:
            continue
        order_id = str(world["orders"][0]["order_id"])
        message = str((t.state.get("request") or {}).get("message") or "")
        case = Case(
            f"shadow-{t.task_id}",
            world,
            order_id,
            Expected((), "no_refund"),
            approve=False,  # a copy is never approved: nothing it proposes can execute
            message=message,
            tenant=SHADOW_TENANT,
        )
        copies.append((t, case))
    rows = []
    if copies:
        with EvalEnvironment(release=(candidate, SHADOW_TENANT)) as env:
            for t, case in copies:
                env.run_batch([(case, 0)])
                run = env.last_runs[0]
                copy = env.store.get(run.task_id)
                mine = decision(dict(copy.state or {}), copy.status.value)
                theirs = decision(t.state, t.status)
                rows.append(
                    {
                        "task_id": t.task_id,
                        "tenant_id": t.tenant_id,
                        "incumbent": theirs,
                        "candidate": mine,
                        "agree": mine == theirs,
                    }
                )
    agreed = sum(r["agree"] for r in rows)
    return {
        "candidate": candidate["release_id"],
        "tasks": len(rows),
        "agreed": agreed,
        "agreement": round(agreed / len(rows), 4) if rows else None,
        "disagreements": [r for r in rows if not r["agree"]],
    }
