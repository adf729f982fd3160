"""Shadow: a candidate release processes copies of live tasks against simulated tools, and its
decisions are compared with the live ones. Nothing it does reaches a customer or production: the
copies run in the release gate's process of its own (no `AGENT_JOBS_*` variable: a throwaway
SQLite, the in-memory broker, an embedded worker and the simulator), on the candidate's model
route as the deployment's routes file defines it; the simulated world is rebuilt from what the
live task itself read, and no approval is ever granted to a copy. Production is only read.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from agent_jobs.sim import worlds
from agent_jobs.sim.models import WorldData

SHADOW_TENANT = "shadow"


def world_from_task(state: dict[str, Any]) -> dict[str, Any] | None:
    """The business systems as the live task saw them (its successful reads), or None when
    they cannot be rebuilt (no order read, or reads the simulator's records refuse: what a
    live task stored came from outside, so a malformed one is skipped, never fatal)."""
    try:
        world = _world_from_reads(state)
        if world is not None:
            WorldData.model_validate(world)  # what the shadow process's simulator will load
    except (AttributeError, KeyError, TypeError, ValueError):  # ValidationError is a ValueError
        return None
    return world


def _world_from_reads(state: dict[str, Any]) -> dict[str, Any] | None:
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
    if not refunds:
        # The task saw earlier refunds only as its payments' refunded totals (it listed no
        # refunds): one standing refund per payment rebuilds what those totals said, so a copy
        # is not offered a payment the live task knew was already refunded.
        refunds = [
            {
                "refund_id": f"rf_shadow_{p['payment_id']}",
                "payment_id": p["payment_id"],
                "amount_minor": int(p["refunded_minor"]),
                "currency": p.get("currency", "INR"),
                "status": "processing",
                "reason": "seen by the live task",
                "idempotency_key": f"shadow:{p['payment_id']}",
                "created_at": p.get("created_at") or "1970-01-01T00:00:00Z",
            }
            for p in payments
            if int(p.get("refunded_minor") or 0) > 0
        ]
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


def live_copies(
    store: Any, candidate_id: str, workflow: str, window_s: float, limit: int
) -> list[tuple[Any, dict[str, Any]]]:
    """Recent live tasks of other releases that finished or wait for a person, each with the
    input of its copy: the world it read, its order and its message (read-only on `store`)."""
    since = store.db_now() - timedelta(seconds=window_s)
    live = [
        t
        for t in store.tasks_since(workflow, since, limit=limit * 4)
        if t.release != candidate_id
        and t.status in ("COMPLETED", "ESCALATED", "FAILED", "APPROVAL_WAIT")
    ][:limit]
    out = []
    for t in live:
        world = world_from_task(t.state)
        if world is None:  # nothing to copy (no order read, or unreadable reads)
            continue
        message = str((t.state.get("request") or {}).get("message") or "")
        order_id = str(world["orders"][0]["order_id"])
        copy = {"task_id": t.task_id, "world": world, "order_id": order_id, "message": message}
        out.append((t, copy))
    return out


def shadow_report(
    store: Any,
    candidate: dict[str, Any],
    *,
    routes_path: str | None,
    workflow: str = "refund_resolution@3",
    window_s: float = 3600.0,
    limit: int = 50,
    progress: Callable[[str], None] | None = None,
    pacing: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run `candidate` (a manifest) on copies of recent live tasks, against its route as the
    deployment's routes file (`routes_path`) defines it; report how often the copies' decisions
    agree with the live ones, and each disagreement. The copies run in the gate's isolated
    process (`evals.gate.shadow`): `store` is only read."""
    from agent_jobs.evals import gate  # noqa: PLC0415
    from agent_jobs.releases.manifest import Manifest  # noqa: PLC0415

    manifest = Manifest.parse_stored(candidate)
    copies = live_copies(store, manifest.release_id, workflow, window_s, limit)
    decided = gate.shadow(
        manifest,
        [c for _, c in copies],
        routes_path=routes_path,
        progress=progress,
        pacing=pacing,
    )
    rows = []
    for t, _ in copies:
        mine = decided.get(t.task_id)
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
        "candidate": manifest.release_id,
        "manifest_hash": manifest.content_hash(),
        "tasks": len(rows),
        "agreed": agreed,
        "agreement": round(agreed / len(rows), 4) if rows else None,
        "disagreements": [r for r in rows if not r["agree"]],
    }
