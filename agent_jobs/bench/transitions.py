"""`agent-jobs bench transitions`: transitions/s of a no-op workflow through the whole runtime
(claim, step, CAS commit with its event, publish to the tenant queue), beside a hand-built floor
measured in the same run by the same worker processes: plain Celery tasks that each do one
SELECT, one CAS UPDATE and one event INSERT on Postgres, then publish the next hop.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_jobs.bench.common import abba, bench_env, median, progress, require_services, wait
from agent_jobs.bench.procs import start_workers, stop_all
from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.names import tenant_queue
from agent_jobs.core.states import Status

TARGET_RATIO = 0.8


def run(
    *, tasks: int, steps: int, workers: int, rounds: int, progress: bool = True
) -> dict[str, Any]:
    require_services()
    from agent_jobs.bench.floor_task import FLOOR_TASK  # noqa: PLC0415 - imports Celery
    from agent_jobs.queue.app import app  # noqa: PLC0415
    from agent_jobs.queue.runtime import get_runtime  # noqa: PLC0415
    from agent_jobs.store.admin import analyze, prepare  # noqa: PLC0415
    from agent_jobs.store.benchdata import Floor  # noqa: PLC0415

    show = progress
    rt = get_runtime()
    store = prepare(rt.settings.database_url)
    floor = Floor(store)
    floor.setup()
    tenants = [f"bench{i}" for i in range(tasks)]
    logdir = Path(tempfile.mkdtemp(prefix="agent-jobs-bench-"))
    _progress(show, f"starting {workers} worker processes (solo pool), logs in {logdir}")
    procs = start_workers(bench_env(), workers, logdir)
    ours: list[float] = []
    floors: list[float] = []
    try:
        _progress(show, "warm-up: the workers learn the tenant queues")
        _ours_round(rt, tenants, 5, tag="warm")

        def ours_round(r: int) -> None:
            n, secs = _ours_round(rt, tenants, steps, tag=f"r{r}")
            ours.append(n / secs)
            _progress(
                show,
                f"round {r + 1}/{rounds}: agent_jobs {n} transitions in {secs:.2f} s = {n / secs:.0f}/s",
            )

        def floor_round(r: int) -> None:
            floor.setup()
            chains = [(f"chain{r}_{i}", t) for i, t in enumerate(tenants)]
            floor.create(chains, steps)
            start = time.monotonic()
            for chain_id, tenant in chains:
                app.send_task(
                    FLOOR_TASK,
                    args=[chain_id],
                    queue=tenant_queue(rt.settings.queue_prefix, tenant),
                )
            total = len(chains) * steps
            wait(_reached(floor, total), 600, 0.02, "for the floor")
            secs = time.monotonic() - start
            floors.append(total / secs)
            _progress(
                show,
                f"round {r + 1}/{rounds}: floor     {total} hops in {secs:.2f} s = {total / secs:.0f}/s",
            )

        for r in range(rounds):
            for one in abba(r, [ours_round, floor_round]):
                one(r)
            analyze(store)
    finally:
        stop_all(procs)
    tps, fps = median(ours), median(floors)
    return {
        "transitions_per_s": round(tps, 1),
        "floor_per_s": round(fps, 1),
        "ratio": round(tps / fps, 3),
        "target_ratio": TARGET_RATIO,
        "tasks": tasks,
        "steps": steps,
        "workers": workers,
        "rounds": rounds,
        "samples": {
            "transitions_per_s": [round(x, 1) for x in ours],
            "floor_per_s": [round(x, 1) for x in floors],
        },
    }


def _ours_round(rt: Any, tenants: list[str], steps: int, *, tag: str) -> tuple[int, float]:
    start = time.monotonic()
    ids = [
        rt.orchestrator.submit(
            t,
            f"{tag}-{time.time_ns()}",
            TaskRequest(workflow="noop@1", input={"steps": steps}),
            requester="bench",
        ).task.id
        for t in tenants
    ]

    # One cheap query every 50 ms: the poller must not compete with the workers for the CPU.
    wait(
        lambda: rt.store.count_in_status(ids, Status.COMPLETED) == len(ids),
        900,
        0.05,
        "for the no-op tasks",
    )
    secs = time.monotonic() - start
    # RECEIVED->RUNNING, `steps` observations, RUNNING->VERIFYING, VERIFYING->COMPLETED.
    transitions = sum(rt.store.get(i).version - 1 for i in ids)
    return transitions, secs


def _reached(floor: Any, total: int) -> Callable[[], bool]:
    return lambda: bool(floor.hops_done() >= total)


def _progress(enabled: bool, text: str) -> None:
    progress(enabled, text)


def render(r: dict[str, Any]) -> str:
    verdict = "meets" if r["ratio"] >= r["target_ratio"] else "MISSES"
    return "\n".join(
        [
            f"bench transitions: {r['tasks']} tasks x {r['steps']} steps, {r['workers']} worker processes, "
            f"median of {r['rounds']} alternating rounds",
            f"  agent_jobs   {r['transitions_per_s']:>8.1f} transitions/s   (samples {r['samples']['transitions_per_s']})",
            f"  floor        {r['floor_per_s']:>8.1f} hops/s          (samples {r['samples']['floor_per_s']})",
            f"  ratio        {r['ratio']:>8.3f}   target >= {r['target_ratio']} ({verdict})",
        ]
    )
