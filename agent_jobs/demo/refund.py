"""The refund incident of seed 004, end to end: order 8472, charged twice.

The simulated business systems run as a real HTTP server; the model is the scripted one; the
database is SQLite and the broker in-process. The customer double-taps send; the task reads the
order and payments in parallel, finds two captures of INR 2,000, retrieves POL-REF-004 v4 and
proposes refunding pay_8472_b; policy says it needs approval, and a lead grants it. Worker w-07
(its own process) commits the intent and sends the refund; the payments system commits it and the
response is lost; w-07 starts reconciling and is SIGKILLed. Its lease expires, the local worker
looks the refund up by its idempotency key, confirms it in the ledger, drafts and verifies the
reply ("processing", never "completed"). The ledger must hold exactly one refund.
"""

from __future__ import annotations

from typing import Any

from agent_jobs.core.contracts import EventView, TaskRequest
from agent_jobs.core.states import TERMINAL, Status
from agent_jobs.demo.harness import DemoEnv, Printer, reconciling, timeline, wait_for
from agent_jobs.sim.server import SimServer
from agent_jobs.sim.worlds import incident_8472
from agent_jobs.tools.refund_tools import ORDERS_URL, PAYMENTS_URL, POLICIES_URL
from agent_jobs.verify import format_money
from agent_jobs.workflows.refund import SYSTEMS_URL, WORKFLOW

MESSAGE = (
    "Order 8472 was charged twice, and my refund has not arrived. "
    "Please investigate and resolve it."
)
TENANT = "ten_41"
KEY = "req-8472"
_DETAIL = ("reason", "decision", "idempotency_key", "approval_id", "code", "note", "detail")


def _env(base_url: str) -> dict[str, str]:
    return {
        SYSTEMS_URL: base_url,
        # Set explicitly so a developer's own per-system variables cannot point the demo elsewhere.
        ORDERS_URL: base_url,
        PAYMENTS_URL: base_url,
        POLICIES_URL: base_url,
        "AGENT_JOBS_MODEL_ROUTES": "",
        "AGENT_JOBS_TOOL_SECRET": "demo-only-tool-secret",
    }


def run(*, quiet: bool = False) -> int:
    out = Printer(quiet)
    out.line(
        "agent-jobs demo: the refund incident of order 8472 (embedded: SQLite + in-process "
        "broker; business systems simulated over HTTP; scripted model)"
    )
    with SimServer(incident_8472()) as sim, DemoEnv(extra=_env(sim.base_url)) as env:
        # Imported after DemoEnv set the environment: the Celery config is read at import.
        from agent_jobs.queue.embedded import EmbeddedWorker  # noqa: PLC0415
        from agent_jobs.queue.runtime import get_runtime  # noqa: PLC0415
        from agent_jobs.store.migrate import upgrade  # noqa: PLC0415

        rt = get_runtime()
        upgrade(rt.store.engine)
        store, orch = rt.store, rt.orchestrator
        out.step(f"business systems (simulated) at {sim.base_url}: order 8472, INR 2,000")
        request = TaskRequest(workflow=WORKFLOW, input={"message": MESSAGE, "channel": "chat"})
        with EmbeddedWorker(concurrency=4):
            first = orch.submit(TENANT, KEY, request, requester="svc-support-chat")
            second = orch.submit(TENANT, KEY, request, requester="svc-support-chat")
            task_id = first.task.id
            out.step(
                f"double tap: two submits with Idempotency-Key {KEY} -> {task_id} "
                f"(created={first.created}) and {second.task.id} (created={second.created})"
            )
            wait_for("APPROVAL_WAIT", lambda: store.get(task_id).status is Status.APPROVAL_WAIT)
            _describe_investigation(out, store.get(task_id).state)
            approval = store.list_approvals(TENANT, status="pending", task_id=task_id)[0]
            args = approval.args
            out.step(
                f"gate (POL-REF-004@4, on ledger facts): refunds.create {args['payment_id']} "
                f"{format_money(args['amount_minor'], args['currency'])} -> needs_approval "
                f"{approval.approval_id}; task parked, no worker held"
            )
        out.step("local worker w-12 stopped; worker w-07 will run the approved step")

        sim.admin.arm("refunds.create", "drop_after_commit")
        sim.admin.arm("refunds.get_by_key", "delay", delay_s=30)
        out.step(
            "armed the payments system: refunds.create commits, then drops the response; "
            "the next refunds.get_by_key hangs"
        )
        orch.decide_approval(approval.approval_id, "lead-41", grant=True, note="duplicate capture")
        out.step("lead-41 granted the approval (bound to the action hash, single use)")

        w07 = env.spawn_worker("w-07", concurrency=1)
        out.step(f"worker w-07 started (pid {w07.pid})")
        wait_for(
            "w-07 reconciling",
            lambda: reconciling(store, task_id, "w-07") and _in_flight(sim, "refunds.get_by_key"),
        )
        out.step(
            "w-07: intent committed, refund sent, response lost -> EXEC_UNKNOWN; "
            "w-07 is looking the refund up by its key"
        )
        env.kill(w07)
        out.step(f"SIGKILL w-07 (pid {w07.pid}) mid-step, holding the lease")

        with EmbeddedWorker(concurrency=4):
            out.step("worker w-12 back; waiting for w-07's lease to expire")
            done = wait_for(
                "completion", lambda: store.get(task_id).status in TERMINAL and store.get(task_id)
            )
        out.step(f"{task_id} reached {done.status.value}")

        events = store.events(task_id)
        out.line()
        out.line(f"timeline of {task_id} (trace {done.trace_id}):")
        for row in timeline(events, _agent_detail, type_width=30):
            out.line(row)
        outcome: dict[str, Any] = done.outcome or {}
        out.line()
        out.line("outcome: " + ", ".join(f"{k}={v}" for k, v in outcome.items() if k != "reply"))
        out.line(f"reply:   {outcome.get('reply')}")
        return _checks(out, sim, done, first.task.id == second.task.id and not second.created)


def _describe_investigation(out: Printer, state: dict[str, Any]) -> None:
    history = state.get("history") or []
    payments = [
        p
        for e in history
        if e.get("kind") == "tool" and e.get("tool") == "payments.list" and e.get("ok")
        for p in e["result"]["payments"]
    ]
    captures = [p for p in payments if p["kind"] == "capture"]
    listed = ", ".join(
        f"{p['payment_id']} {format_money(p['amount_minor'], p['currency'])}" for p in captures
    )
    out.step(
        f"orders.get + payments.list in parallel (tool executor, scope investigate): "
        f"{len(captures)} captures: {listed}"
    )
    docs = sorted(
        {
            f"{p['doc_id']} v{p['version']} {p['chunk_id']}"
            for e in history
            if e.get("kind") == "tool" and e.get("tool") == "policy.search" and e.get("ok")
            for p in e["result"]["passages"]
        }
    )
    out.step(f"policy.search: {len(docs)} passages with provenance ({', '.join(docs[:3])}, ...)")


def _in_flight(sim: SimServer, operation: str) -> bool:
    return any(r["outcome"] == "in_flight" for r in sim.admin.requests(operation))


def _agent_detail(e: EventView) -> str:
    """Model calls with their tokens and cost, tool calls with their outcome and scope."""
    d = e.data
    if e.type == "chat":
        return (
            f"{d.get('step_type')}: {d.get('input_tokens')} in / {d.get('output_tokens')} out"
            f" tokens, INR {d.get('cost_inr')}"
        )
    if e.type.startswith("execute_tool "):
        extra = f"{d.get('outcome')}" + (f" ({d['code']})" if d.get("code") else "")
        return extra + f" scope={d.get('step_scope')}"
    return " ".join(f"{k}={d[k]}" for k in _DETAIL if d.get(k))


def _checks(out: Printer, sim: SimServer, task: Any, deduplicated: bool) -> int:
    world = sim.admin.dump()  # GET /admin/world: the system of record, every refund ever made
    refunds = world["refunds"]
    sent = sim.admin.requests("refunds.create")
    outcome: dict[str, Any] = task.outcome or {}
    reply = str(outcome.get("reply") or "")
    one = len(refunds) == 1 and refunds[0]["payment_id"] == "pay_8472_b"
    checks = {
        "double tap deduplicated": deduplicated,
        "task COMPLETED": task.status is Status.COMPLETED,
        "verified, status processing": outcome.get("verified") is True
        and outcome.get("refund_status") == "processing",
        "reply says processing, not completed": "processing" in reply
        and "completed" not in reply.lower(),
        "found by reconciliation": outcome.get("reconciled") is True,
        "refunds.create sent once (no blind retry)": len(sent) == 1,
        "model calls within budget (8)": 0 < int(outcome.get("model_calls") or 0) <= 8,
        "exactly one refund in the ledger": one,
    }
    out.line()
    for name, ok in checks.items():
        out.line(f"  [{'ok' if ok else 'FAILED'}] {name}")
    ledger = "; ".join(
        f"{r['refund_id']} {r['payment_id']} {format_money(r['amount_minor'], r['currency'])} "
        f"{r['status']} key={r['idempotency_key']}"
        for r in refunds
    )
    passed = all(checks.values())
    out.line(
        f"ledger check (GET /admin/world): {len(refunds)} refund(s): {ledger or 'none'} -> "
        f"{'exactly one refund' if passed else 'FAILED'}"
    )
    return 0 if passed else 1
