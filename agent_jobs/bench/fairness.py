"""`agent-jobs bench fairness`: how long a lone tenant waits for its first step while another
tenant's backlog is queued, against the same wait on an idle system — and, for context, the same
measurement with every tenant on one shared queue.

Tenant A floods `backlog` steps of about `step_ms` each (noop tasks with three sleeping reads:
four sleeping decisions per task), then tenant B submits one task. B's wait is the database's
time of B's first transition minus its creation time.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from agent_jobs.bench.common import bench_env, median, progress, require_services, wait
from agent_jobs.bench.procs import start_workers, stop_all
from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import Status

TARGET_RATIO = 3.0
STEPS_PER_TASK = 3  # sleeping decisions per backlog task: STEPS_PER_TASK + 1


def run(
    *, tenants: int, backlog: int, step_ms: float, workers: int, rounds: int,
    shared: bool = True, progress: bool = True,
) -> dict[str, Any]:  # fmt: skip
    require_services()
    result = _measure(tenants, backlog, step_ms, workers, rounds, routing="tenant", show=progress)
    if shared:
        base = _measure(
            tenants, backlog, step_ms, workers, max(1, rounds // 2), routing="shared", show=progress
        )
        result["shared_wait_s"] = base["wait_s"]
        result["shared_ratio"] = round(base["wait_s"] / result["idle_wait_s"], 1)
    return result


def _measure(
    tenants: int,
    backlog: int,
    step_ms: float,
    workers: int,
    rounds: int,
    *,
    routing: str,
    show: bool,
) -> dict[str, Any]:
    from agent_jobs.config import settings  # noqa: PLC0415
    from agent_jobs.queue.runtime import build_runtime  # noqa: PLC0415
    from agent_jobs.store.admin import prepare  # noqa: PLC0415

    cfg = settings().with_overrides(routing=routing)
    rt = build_runtime(cfg)
    prepare(cfg.database_url)
    logdir = Path(tempfile.mkdtemp(prefix="agent-jobs-bench-"))
    progress(show, f"[{routing} queues] starting {workers} worker processes, logs in {logdir}")
    procs = start_workers(bench_env({"AGENT_JOBS_ROUTING": routing}), workers, logdir)
    idle: list[float] = []
    loaded: list[float] = []
    try:
        names = [f"fair{i}" for i in range(tenants)]
        a, b = names[0], names[1]
        _finish(
            rt, [_submit(rt, t, {"steps": 0}) for t in names]
        )  # every queue known to the workers
        per_task = STEPS_PER_TASK + 1
        count = max(1, backlog // per_task)
        for r in range(rounds):
            idle.append(_lone_wait(rt, b))
            progress(
                show,
                f"[{routing} queues] round {r + 1}/{rounds}: idle wait {idle[-1] * 1000:.1f} ms",
            )
            flood = [
                _submit(rt, a, {"steps": STEPS_PER_TASK, "sleep_ms": step_ms}) for _ in range(count)
            ]
            loaded.append(_lone_wait(rt, b))
            progress(
                show,
                f"[{routing} queues] round {r + 1}/{rounds}: wait behind {count * per_task} "
                f"queued steps {loaded[-1] * 1000:.1f} ms; draining the backlog",
            )
            _finish(rt, flood)
    finally:
        stop_all(procs)
        rt.store.dispose()
    w, i = median(loaded), median(idle)
    return {
        "wait_s": round(w, 4), "idle_wait_s": round(i, 4), "ratio": round(w / i, 2),
        "target_ratio": TARGET_RATIO, "tenants": tenants, "backlog": count * per_task,
        "step_ms": step_ms, "workers": workers, "rounds": rounds, "routing": routing,
        "samples": {"wait_s": [round(x, 4) for x in loaded], "idle_wait_s": [round(x, 4) for x in idle]},
    }  # fmt: skip


def _submit(rt: Any, tenant: str, data: dict[str, Any]) -> str:
    request = TaskRequest(workflow="noop@1", input=data)
    return str(
        rt.orchestrator.submit(tenant, f"f{time.time_ns()}", request, requester="bench").task.id
    )


def _lone_wait(rt: Any, tenant: str) -> float:
    task_id = _submit(rt, tenant, {"steps": 0})
    _finish(rt, [task_id])
    events = rt.store.events(task_id)
    created = events[0].at
    first = next(e.at for e in events if e.type == "started")
    return float((first - created).total_seconds())


def _finish(rt: Any, ids: list[str]) -> None:
    wait(
        lambda: rt.store.count_in_status(ids, Status.COMPLETED) == len(ids), 1800, 0.1, "for tasks"
    )


def render(r: dict[str, Any]) -> str:
    verdict = "meets" if r["ratio"] <= r["target_ratio"] else "MISSES"
    lines = [
        f"bench fairness: {r['tenants']} tenant queues, tenant A queues {r['backlog']} steps of "
        f"~{r['step_ms']:g} ms, {r['workers']} worker processes, median of {r['rounds']} rounds",
        f"  B's wait, idle            {r['idle_wait_s'] * 1000:8.1f} ms",
        f"  B's wait behind backlog   {r['wait_s'] * 1000:8.1f} ms",
        f"  ratio                     {r['ratio']:8.2f}   target <= {r['target_ratio']:g} ({verdict})",
    ]
    if "shared_wait_s" in r:
        lines.append(
            f"  one shared queue instead  {r['shared_wait_s'] * 1000:8.1f} ms  ({r['shared_ratio']:g}x idle)"
        )
    return "\n".join(lines)
