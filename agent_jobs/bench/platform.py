"""`agent-jobs bench platform`: the platform's own time in one refund task, on the production
path, beside the seed's budget of about 80 ms of checkpoint commits (target: half of it).

The production path: a Postgres database of its own (emptied), Redis as the broker, real
`celery -A agent_jobs worker` processes with a queue prefix of their own, and the business
systems simulated over HTTP on loopback (the eval's `SimServer`), in a world where each task has
an order of its own charged twice, so every task proposes one refund that needs a person's
approval. The model is the eval's scripted one, named in a routes file as the eval runner does;
its time is subtracted like the tools' (what each `chat` event records).

Each task is submitted (one at a time by default, so no hand-off hides behind another task's
queueing; `concurrent` submits them all at once), its approval granted by a principal other than
the requester as soon as it appears (the call the API makes), and, once the task has ended, its
event log is read: `platform_time` (`agent-jobs cost --task ID`) gives wall, model, tool and
parked time and what is left, the platform's own. The breakdown takes every consecutive pair of
events, less the model and tool time inside the gap, summed by (event type -> next event type).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import secrets
import tempfile
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent_jobs.bench.common import Phase, median, progress, require_services
from agent_jobs.bench.procs import PRODUCTION_APP, workers_cpu
from agent_jobs.core.states import TERMINAL, Status
from agent_jobs.obs.platform_time import PARKED, SEED_COMMIT_BUDGET_MS, platform_time

WORKFLOW = "refund_resolution@3"
TENANT = "bench-platform"
REQUESTER = "svc-bench-platform"
APPROVER = "lead-bench-platform"  # never the requester: the store refuses self-approval
FIRST_ORDER = 7001
MESSAGE = (
    "Order {order} was charged twice, and my refund has not arrived. "
    "Please investigate and resolve it."
)
TARGET_MS = SEED_COMMIT_BUDGET_MS / 2
TOP_GAPS = 10
# The driver's polls: the approval poll's delay lands in parked time (excluded), the terminal
# poll's in nobody's (the task's own events end it); both kept cheap so the poller does not
# compete with the workers for the CPU.
POLL_S = 0.02
FIELDS = ("wall_ms", "model_ms", "tool_ms", "parked_ms", "platform_ms", "transitions")
COUNTS = ("events", "audit_events", "event_txs", "claims", "commits")
_TERMINAL = {s.value for s in TERMINAL}


def run(
    *,
    tasks: int = 10,
    workers: int = 2,
    concurrent: bool = False,
    warmup: int = 1,
    timeout_s: float = 300.0,
    progress: bool = True,
) -> dict[str, Any]:
    """Run `tasks` refund tasks (after `warmup` unmeasured ones) and measure each one's platform
    time from its event log. Returns one JSON-able object (see `render`)."""
    require_services()
    if tasks < 1:
        raise ValueError("--tasks must be at least 1")
    from agent_jobs.sim.server import SimServer  # noqa: PLC0415

    show = progress
    orders = [str(FIRST_ORDER + i) for i in range(warmup + tasks)]
    with (
        tempfile.TemporaryDirectory(prefix="agent-jobs-bench-platform-") as tmp,
        SimServer(_world(orders)) as sim,
    ):
        env = _worker_env(sim.base_url, Path(tmp))
        _say(show, f"business systems simulated at {sim.base_url}: {len(orders)} orders")
        # Stopped before the sim (inner `with`): no worker is left calling a closed port.
        # The workers on the production app, `celery -A agent_jobs`, exactly as an operator
        # starts them: the platform time measured is the one a deployment has.
        with Phase("platform", workers, show, env, app=PRODUCTION_APP) as phase:
            deadline = time.monotonic() + timeout_s
            if warmup:
                _say(show, f"warm-up: {warmup} task(s), not measured (queues, imports, pools)")
                _drive(phase.rt, orders[:warmup], False, deadline, show=False)
            mode = "all at once" if concurrent else "one at a time"
            _say(show, f"measuring {tasks} refund task(s), submitted {mode}")
            cpu0 = workers_cpu(phase.procs)
            ids = _drive(phase.rt, orders[warmup:], concurrent, deadline, show=show)
            cpu_ms = (workers_cpu(phase.procs) - cpu0) * 1000 / tasks
            measured = [_measure(phase.rt.store, task_id) for task_id in ids]
        refunds = len(sim.admin.dump()["refunds"])
    return _summary(
        measured,
        tasks=tasks,
        workers=workers,
        concurrent=concurrent,
        warmup=warmup,
        refunds=refunds,
        worker_cpu_ms=cpu_ms,
    )


def _world(orders: list[str]) -> dict[str, Any]:
    """One order per task, each captured twice (`pay_<order>_a`, `pay_<order>_b`): each task
    proposes refunding its duplicate, INR 2,000, which policy sends to a person."""
    from agent_jobs.sim import worlds  # noqa: PLC0415

    world = worlds.empty()
    for order in orders:
        one = worlds.double_capture(order, (f"cus_{order}", f"Customer {order}", "c@example.com"))
        world["orders"] += one["orders"]
        world["payments"] += one["payments"]
    return world


def _worker_env(base_url: str, tmp: Path) -> dict[str, str]:
    """What the eval runner gives its worker: every system at the sim, the eval's routes file
    (the scripted model), a tool secret, a short confirmation lag."""
    from agent_jobs.evals import models  # noqa: PLC0415
    from agent_jobs.tools.refund_tools import ORDERS_URL, PAYMENTS_URL, POLICIES_URL  # noqa: PLC0415
    from agent_jobs.workflows.refund import MODEL_ROUTES, SYSTEMS_URL  # noqa: PLC0415

    routes = tmp / "routes.json"
    routes.write_text(json.dumps(models.routes_file_data()), encoding="utf-8")
    return {
        SYSTEMS_URL: base_url,
        ORDERS_URL: base_url,
        PAYMENTS_URL: base_url,
        POLICIES_URL: base_url,
        MODEL_ROUTES: str(routes),
        # A secret of this run's own: nothing outside it can mint its tool credentials.
        "AGENT_JOBS_TOOL_SECRET": secrets.token_urlsafe(32),
        "AGENT_JOBS_CONFIRM_LAG_S": "2",
    }


def _submit(rt: Any, order: str) -> str:
    from agent_jobs.core.contracts import TaskRequest  # noqa: PLC0415

    request = TaskRequest(
        workflow=WORKFLOW, input={"message": MESSAGE.format(order=order), "channel": "chat"}
    )
    key = f"bench-platform-{order}-{time.time_ns()}"
    return str(rt.orchestrator.submit(TENANT, key, request, requester=REQUESTER).task.id)


def _drive(
    rt: Any, orders: list[str], concurrent: bool, deadline: float, *, show: bool
) -> list[str]:
    """Submit a task per order and settle them: all at once, or each before the next."""
    if concurrent:
        ids = [_submit(rt, o) for o in orders]
        statuses = _settle(rt, ids, deadline)
        done = sum(1 for t in ids if statuses.get(t) in _TERMINAL)
        _say(show, f"{done}/{len(ids)} tasks ended")
        return ids
    ids = []
    for i, order in enumerate(orders, 1):
        task_id = _submit(rt, order)
        ids.append(task_id)
        status = _settle(rt, [task_id], deadline)[task_id]
        _say(show, f"task {i}/{len(orders)} {task_id}: {status}")
    return ids


def _settle(rt: Any, ids: list[str], deadline: float) -> dict[str, str]:
    """Grant each pending approval of `ids` as soon as it appears, through the orchestrator as
    the API's grant does (store decision, then the task's next step published), until every
    task is terminal or the deadline passes. Returns the tasks' statuses."""
    from agent_jobs.core.errors import ApprovalError  # noqa: PLC0415

    store = rt.store
    open_ = set(ids)
    statuses: dict[str, str] = {}
    while open_:
        statuses.update(_statuses(store, open_))
        open_ = {t for t in open_ if statuses.get(t) not in _TERMINAL}
        if not open_ or time.monotonic() > deadline:
            break
        if any(statuses.get(t) == Status.APPROVAL_WAIT.value for t in open_):
            for ap in store.list_approvals(TENANT, status="pending", limit=500):
                if ap.task_id not in open_:
                    continue
                # Decided or expired meanwhile: the task moves on by itself.
                with contextlib.suppress(ApprovalError):
                    rt.orchestrator.decide_approval(
                        ap.approval_id, APPROVER, grant=True, tenant_id=TENANT, note="bench"
                    )
        time.sleep(POLL_S)
    return statuses


def _statuses(store: Any, ids: Iterable[str]) -> dict[str, str]:
    """One query for the statuses of `ids` (the store reads one task per call)."""
    from sqlalchemy import select  # noqa: PLC0415

    from agent_jobs.store.schema import tasks  # noqa: PLC0415

    q = select(tasks.c.id, tasks.c.status).where(tasks.c.id.in_(list(ids)))
    with store.engine.connect() as conn:
        return {str(i): str(s) for i, s in conn.execute(q)}


def _measure(store: Any, task_id: str) -> dict[str, Any]:
    """One task: `platform_time` of its events, what it wrote, and its gaps (for the breakdown).

    Commits that wrote, counted cheaply from what the rows keep: the transactions that wrote
    the task's events (distinct `xmin` of its `task_events` rows: the task's insert, each
    compare-and-set, each audit append or batch of them, the approval decision; effects and
    approvals are written in those same transactions), plus the claims (`tasks.lease_epoch`:
    each an UPDATE committed by itself). Not counted: lease renewals and releases, and reads."""
    task = store.get(task_id)
    events = store.events(task_id)
    p = platform_time(events)
    event_txs = _event_transactions(store, task_id)
    return {
        "task_id": task_id,
        "status": task.status.value,
        **{k: p.get(k, 0) for k in FIELDS},
        "events": len(events),
        "audit_events": sum(1 for e in events if e.to_status is None),
        "event_txs": event_txs,
        "claims": task.lease_epoch,
        "commits": event_txs + task.lease_epoch,
        "version": task.version,
        "gaps": gaps(events),
    }


def _event_transactions(store: Any, task_id: str) -> int:
    """How many transactions wrote the task's events (Postgres: each row's `xmin`)."""
    from sqlalchemy import text  # noqa: PLC0415

    q = text("SELECT count(DISTINCT xmin::text) FROM task_events WHERE task_id = :id")
    with store.engine.connect() as conn:
        return int(conn.execute(q, {"id": task_id}).scalar_one())


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def _tool_spans(events: list[Any]) -> list[tuple[datetime, datetime]]:
    """The union of the tool calls' recorded intervals (parallel reads count once)."""
    from datetime import timedelta  # noqa: PLC0415

    spans: list[tuple[datetime, datetime]] = []
    for e in events:
        if not e.type.startswith("execute_tool"):
            continue
        started = e.data.get("started_at")
        if isinstance(started, str):
            t0 = _aware(datetime.fromisoformat(started))
            spans.append((t0, t0 + timedelta(milliseconds=float(e.data.get("duration_ms", 0)))))
    merged: list[tuple[datetime, datetime]] = []
    for t0, t1 in sorted(spans):
        if merged and t0 <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], t1))
        else:
            merged.append((t0, t1))
    return merged


def _overlap_ms(spans: list[tuple[datetime, datetime]], a: datetime, b: datetime) -> float:
    total = 0.0
    for t0, t1 in spans:
        lo, hi = max(t0, a), min(t1, b)
        if hi > lo:
            total += (hi - lo).total_seconds() * 1000
    return total


def gaps(events: list[Any]) -> list[dict[str, Any]]:
    """Each consecutive pair of events outside a parked wait (as `platform_time` skips them):
    the gap, less the tool calls' time inside it (their recorded intervals) and the model
    calls' (each `chat` event's latency, taken from the gap that ends at the event, where the
    call ran, and from the gaps before it for any excess; a tool call recorded without a start
    likewise). Summed, this is the platform time."""
    spans = _tool_spans(events)
    out: list[dict[str, Any]] = []
    index: dict[int, int] = {}  # event position -> the gap (in `out`) that ends at it
    for i, (e, nxt) in enumerate(itertools.pairwise(events)):
        if e.to_status in PARKED:
            continue
        a, b = _aware(e.at), _aware(nxt.at)
        gap = (b - a).total_seconds() * 1000
        index[i + 1] = len(out)
        out.append({"from": e.type, "to": nxt.type, "ms": gap - _overlap_ms(spans, a, b)})
    for j, e in enumerate(events):
        loose = 0.0
        if e.type == "chat":
            loose = float(e.data.get("latency_ms", 0))
        elif e.type.startswith("execute_tool") and not isinstance(e.data.get("started_at"), str):
            loose = float(e.data.get("duration_ms", 0))
        k = index.get(j)
        while loose > 0 and k is not None and k >= 0:
            take = min(loose, max(out[k]["ms"], 0.0))
            out[k]["ms"] -= take
            loose -= take
            k -= 1
    for g in out:
        g["ms"] = round(g["ms"], 2)
    return out


def breakdown(measured: list[dict[str, Any]], top: int = TOP_GAPS) -> list[dict[str, Any]]:
    """The gaps of all measured tasks summed by (from event type -> to event type), top `top`
    by total: where the platform time goes."""
    sums: dict[tuple[str, str], list[float]] = {}
    for m in measured:
        for g in m["gaps"]:
            sums.setdefault((g["from"], g["to"]), []).append(g["ms"])
    n = max(len(measured), 1)
    rows: list[dict[str, Any]] = [
        {
            "from": frm,
            "to": to,
            "count": len(ms),
            "total_ms": round(sum(ms), 1),
            "per_task_ms": round(sum(ms) / n, 2),
            "mean_ms": round(sum(ms) / len(ms), 2),
            "max_ms": round(max(ms), 2),
        }
        for (frm, to), ms in sums.items()
    ]
    rows.sort(key=lambda r: -float(r["total_ms"]))
    return rows[:top]


def _summary(
    measured: list[dict[str, Any]],
    *,
    tasks: int,
    workers: int,
    concurrent: bool,
    warmup: int,
    refunds: int,
    worker_cpu_ms: float,
) -> dict[str, Any]:
    completed = [m for m in measured if m["status"] == Status.COMPLETED.value]
    # Medians over the tasks that completed (a stopped task ran a shorter path); all if none did.
    basis = completed or measured
    med = {k: round(median([float(m[k]) for m in basis]), 1) for k in FIELDS + COUNTS}
    per_task = [{k: v for k, v in m.items() if k != "gaps"} for m in measured]
    gap_total = sum(g["ms"] for m in basis for g in m["gaps"])
    return {
        "workflow": WORKFLOW,
        "tasks": tasks,
        "workers": workers,
        "concurrent": concurrent,
        "warmup": warmup,
        "completed": len(completed),
        "not_completed": [
            {"task_id": m["task_id"], "status": m["status"]} for m in measured if m not in completed
        ],
        "refunds_in_world": refunds,
        "per_task": per_task,
        "median": med,
        "seed_budget_ms": SEED_COMMIT_BUDGET_MS,
        "target_ms": TARGET_MS,
        "ratio_to_budget": round(med["platform_ms"] / SEED_COMMIT_BUDGET_MS, 3),
        # The worker processes' CPU (user + system) over the measured tasks, per task: the
        # hooks' work (prompts, the tools' HTTP) included, Postgres and Redis not.
        "worker_cpu_ms_per_task": round(worker_cpu_ms, 1),
        "breakdown": breakdown(basis),
        "breakdown_per_task_ms": round(gap_total / max(len(basis), 1), 1),
        "commits_counted": "transactions that wrote the task's events (distinct xmin of its "
        "task_events rows; effects and approvals ride in them) + claims (tasks.lease_epoch, "
        "each an UPDATE of its own); lease renewals, releases and reads not counted",
    }


def _say(show: bool, text: str) -> None:
    progress(show, text)


def render(r: dict[str, Any]) -> str:
    mode = (
        "submitted all at once (each one's time includes waiting behind the others' steps)"
        if r["concurrent"]
        else "one at a time"
    )
    med = r["median"]
    lines = [
        f"bench platform: {r['tasks']} {r['workflow']} task(s) {mode}, {r['workers']} worker "
        f"processes, {r['warmup']} warm-up task(s) not measured; {r['completed']} COMPLETED, "
        f"{r['refunds_in_world']} refunds in the simulated ledger",
    ]
    for m in r["not_completed"]:
        lines.append(f"  NOT COMPLETED: {m['task_id']} {m['status']}")
    head = f"  {'task':<38}{'status':<11}" + "".join(f"{k:>13}" for k in FIELDS + COUNTS)
    lines += ["", head]
    for m in r["per_task"]:
        cells = "".join(f"{float(m[k]):>13,.1f}" for k in FIELDS) + "".join(
            f"{int(m[k]):>13}" for k in COUNTS
        )
        lines.append(f"  {m['task_id']:<38}{m['status']:<11}{cells}")
    cells = "".join(f"{float(med[k]):>13,.1f}" for k in FIELDS + COUNTS)
    lines.append(f"  {'median':<38}{'':<11}{cells}")
    verdict = "meets" if med["platform_ms"] <= r["target_ms"] else "above"
    lines += [
        "",
        f"  platform time (median): {med['platform_ms']:,.1f} ms; the seed budgets "
        f"{r['seed_budget_ms']:.0f} ms of checkpoint commits: ratio {r['ratio_to_budget']:.2f}; "
        f"target {r['target_ms']:.0f} ms ({verdict})",
        f"  worker CPU per task: {r['worker_cpu_ms_per_task']:,.1f} ms (user + system of the "
        "worker processes over the measured tasks; model and tool hooks included)",
        f"  commits per task: {r['commits_counted']}",
        "",
        f"  where it goes (top {len(r['breakdown'])} event pairs, gap less model and tool time; "
        f"all pairs sum to {r['breakdown_per_task_ms']:,.1f} ms per task, mean):",
        f"  {'from event':<34}{'to event':<34}{'count':>6}{'ms/task':>10}{'mean ms':>10}"
        f"{'max ms':>10}",
    ]
    for b in r["breakdown"]:
        lines.append(
            f"  {b['from']:<34}{b['to']:<34}{b['count']:>6}{b['per_task_ms']:>10,.1f}"
            f"{b['mean_ms']:>10,.2f}{b['max_ms']:>10,.2f}"
        )
    return "\n".join(lines)
