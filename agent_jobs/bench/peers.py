"""`agent-jobs bench peers`: our transitions beside two peers, in one process tree, in rotating
order, medians reported:

- **agent_jobs**: a no-op workflow through the whole runtime (claim or read, step, CAS commit
  with its event and dispatch record, publish to the tenant queue), as `bench transitions`;
- **Celery chain**: a plain Celery task that sends the next hop to its queue with `send_task`
  (no database), on the same worker processes, queues and settings — what the broker hop costs;
- **DBOS** (the optional extra `peers`): workflows of no-op steps, each step checkpointed in its
  Postgres system database, in as many processes as we have workers. Skipped, with the reason
  printed, when DBOS is not installed or cannot start.

CPU per step is the CPU of the processes doing the steps (our and Celery's worker processes,
DBOS's processes), not of Postgres or Redis. Then the hand-off a user feels: one task alone,
the time from one step's commit to the next step's commit (a no-op step does nothing else), as
the events' database timestamps record it.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from agent_jobs.bench.common import bench_env, median, percentile, progress, require_services, wait
from agent_jobs.bench.procs import start_workers, stop_all, workers_cpu
from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.names import tenant_queue
from agent_jobs.core.states import Status

# Issue 25: at least one and a half times DBOS, half the plain chain (stretch 0.8).
TARGET_RATIO_DBOS = 1.5
TARGET_RATIO_CELERY = 0.5


def run(
    *,
    tasks: int,
    steps: int,
    workers: int,
    rounds: int,
    handoff_steps: int = 200,
    dbos: bool = True,
    progress: bool = True,
) -> dict[str, Any]:
    database_url, broker_url = require_services()
    from agent_jobs.queue.runtime import get_runtime  # noqa: PLC0415 - imports Celery
    from agent_jobs.store.admin import analyze, prepare  # noqa: PLC0415

    show = progress
    rt = get_runtime()
    store = prepare(rt.settings.database_url)
    tenants = [f"peer{i}" for i in range(tasks)]
    dbos_side, skipped = (
        _dbos_side(database_url, tasks, steps, workers) if dbos else (None, "--no-dbos")
    )
    if skipped:
        _say(show, f"DBOS skipped: {skipped}")
    logdir = Path(tempfile.mkdtemp(prefix="agent-jobs-peers-"))
    _say(show, f"starting {workers} worker processes (solo pool), logs in {logdir}")
    procs = start_workers(bench_env(), workers, logdir)
    samples: dict[str, list[tuple[float, float]]] = {"agent_jobs": [], "celery": [], "dbos": []}
    handoffs: list[float] = []
    try:
        _say(show, "warm-up: the workers learn the tenant queues")
        _ours(rt, procs, tenants, 5, "warm")
        _chain(rt, procs, broker_url, tenants, 5)
        sides: list[tuple[str, Any]] = [
            ("agent_jobs", lambda: _ours(rt, procs, tenants, steps, f"r{time.time_ns()}")),
            ("celery", lambda: _chain(rt, procs, broker_url, tenants, steps)),
        ]
        if dbos_side is not None:
            sides.append(("dbos", dbos_side))
        for r in range(rounds):
            order = sides[r % len(sides) :] + sides[: r % len(sides)]
            for name, side in order if r % 2 == 0 else order[::-1]:
                per_s, cpu_ms = side()
                samples[name].append((per_s, cpu_ms))
                _say(show, f"round {r + 1}/{rounds}: {name:<10} {per_s:7.0f} steps/s, "
                     f"{cpu_ms:.2f} ms CPU/step")  # fmt: skip
            analyze(store)
        _say(show, f"hand-off: one task of {handoff_steps} steps alone")
        handoffs = _handoffs(rt, handoff_steps)
    finally:
        stop_all(procs)
    return _result(samples, handoffs, skipped, tasks, steps, workers, rounds)


def _result(  # noqa: PLR0917 - private
    samples: dict[str, list[tuple[float, float]]],
    handoffs: list[float],
    skipped: str | None,
    tasks: int,
    steps: int,
    workers: int,
    rounds: int,
) -> dict[str, Any]:
    def med(name: str, i: int) -> float | None:
        values = [s[i] for s in samples[name]]
        return round(median(values), 2) if values else None

    ours, celery, dbos = med("agent_jobs", 0), med("celery", 0), med("dbos", 0)
    return {
        "steps_per_s": ours,
        "celery_chain_per_s": celery,
        "dbos_per_s": dbos,
        "ratio_celery": round(ours / celery, 3) if ours and celery else None,
        "ratio_dbos": round(ours / dbos, 3) if ours and dbos else None,
        "cpu_ms_per_step": med("agent_jobs", 1),
        "celery_cpu_ms_per_step": med("celery", 1),
        "dbos_cpu_ms_per_step": med("dbos", 1),
        "handoff_p50_ms": round(percentile(handoffs, 50), 2) if handoffs else None,
        "handoff_p99_ms": round(percentile(handoffs, 99), 2) if handoffs else None,
        "dbos_skipped": skipped,
        "target_ratio_dbos": TARGET_RATIO_DBOS,
        "target_ratio_celery": TARGET_RATIO_CELERY,
        "tasks": tasks,
        "steps": steps,
        "workers": workers,
        "rounds": rounds,
        "samples": {k: [[round(a, 1), round(b, 3)] for a, b in v] for k, v in samples.items()},
    }


def _ours(
    rt: Any, procs: list[Any], tenants: list[str], steps: int, tag: str
) -> tuple[float, float]:
    cpu0, start = workers_cpu(procs), time.monotonic()
    ids = [
        rt.orchestrator.submit(
            t,
            f"{tag}-{i}",
            TaskRequest(workflow="noop@1", input={"steps": steps}),
            requester="bench",
        ).task.id
        for i, t in enumerate(tenants)
    ]
    # One cheap query every 50 ms: the poller must not compete with the workers for the CPU.
    wait(
        lambda: rt.store.count_in_status(ids, Status.COMPLETED) == len(ids),
        900,
        0.05,
        "for the no-op tasks",
    )
    secs, cpu = time.monotonic() - start, workers_cpu(procs) - cpu0
    # RECEIVED->RUNNING, `steps` observations, RUNNING->VERIFYING, VERIFYING->COMPLETED.
    transitions = sum(rt.store.get(i).version - 1 for i in ids)
    return transitions / secs, cpu / transitions * 1000


def _chain(
    rt: Any, procs: list[Any], broker_url: str, tenants: list[str], hops: int
) -> tuple[float, float]:
    import redis  # noqa: PLC0415

    from agent_jobs.bench.floor_task import CHAIN_TASK  # noqa: PLC0415 - imports Celery
    from agent_jobs.queue.app import app  # noqa: PLC0415

    client = redis.Redis.from_url(broker_url)
    done_key = f"{rt.settings.queue_prefix}.bench.peers.{uuid.uuid4().hex}"
    try:
        cpu0, start = workers_cpu(procs), time.monotonic()
        for t in tenants:
            queue = tenant_queue(rt.settings.queue_prefix, t)
            # `hops` hops after the first: as many messages as our task has transitions, less 3.
            app.send_task(CHAIN_TASK, args=[queue, hops - 1, done_key], queue=queue)
        wait(lambda: int(client.get(done_key) or 0) >= len(tenants), 900, 0.05, "for the chains")
        secs, cpu = time.monotonic() - start, workers_cpu(procs) - cpu0
    finally:
        client.delete(done_key)
        client.close()
    total = hops * len(tenants)
    return total / secs, cpu / total * 1000


def _handoffs(rt: Any, steps: int) -> list[float]:
    """Commit-to-commit gaps of one no-op task running alone (ms): the step's own read and
    compare-and-set plus the hand-off (publish, broker, delivery) to the next step."""
    task_id = rt.orchestrator.submit(
        "peer0",
        f"handoff-{time.time_ns()}",
        TaskRequest(workflow="noop@1", input={"steps": steps}),
        requester="bench",
    ).task.id
    wait(lambda: rt.store.count_in_status([task_id], Status.COMPLETED) == 1, 300, 0.05, "")
    ats = [e.at for e in rt.store.events(task_id) if e.to_status is not None]
    # From the first step's commit: the submit's own commit is followed by the API's publish.
    return [(b - a).total_seconds() * 1000 for a, b in itertools.pairwise(ats[1:])]


def _dbos_side(database_url: str, tasks: int, steps: int, workers: int) -> tuple[Any, str | None]:
    """A callable running one DBOS round, or None and why DBOS is skipped."""
    try:
        import dbos  # noqa: F401, PLC0415
    except ImportError:
        return None, "DBOS is not installed (pip install 'agent_jobs[peers]')"
    from sqlalchemy.engine import make_url  # noqa: PLC0415

    from agent_jobs.store.admin import ensure_database  # noqa: PLC0415

    parsed = make_url(database_url)
    url = parsed.set(drivername="postgresql", database=f"{parsed.database}_dbos")
    dbos_url = url.render_as_string(hide_password=False)
    try:
        ensure_database(dbos_url)
        # DBOS migrates its schema at launch: once here, not in two processes at once.
        _dbos_cmd(dbos_url, "--migrate-only").check_returncode()
    except Exception as exc:
        return None, f"DBOS could not start: {exc}"
    per_process = [tasks // workers + (1 if i < tasks % workers else 0) for i in range(workers)]

    def side() -> tuple[float, float]:
        runners = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "agent_jobs.bench.dbos_peer",
                    "--url",
                    dbos_url,
                    "--workflows",
                    str(n),
                    "--steps",
                    str(steps),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            for n in per_process
            if n
        ]
        try:
            for p in runners:  # all launched before any starts
                assert p.stdout is not None
                if p.stdout.readline().strip() != "ready":
                    raise RuntimeError("a DBOS process did not start")
            for p in runners:
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.flush()
            outs = [
                json.loads(p.communicate(timeout=900)[0].strip().splitlines()[-1]) for p in runners
            ]
        finally:
            for p in runners:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        total = sum(int(o["steps"]) for o in outs)
        secs = max(o["end"] for o in outs) - min(o["start"] for o in outs)
        return total / secs, sum(o["cpu_s"] for o in outs) / total * 1000

    return side, None


def _dbos_cmd(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent_jobs.bench.dbos_peer", "--url", url, *extra],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _say(enabled: bool, text: str) -> None:
    progress(enabled, text)


def render(r: dict[str, Any]) -> str:
    def fmt(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    lines = [
        f"bench peers: {r['tasks']} tasks x {r['steps']} no-op steps, {r['workers']} worker "
        f"processes, median of {r['rounds']} rotating rounds",
        f"  {'':<14}{'steps/s':>9}  {'CPU ms/step':>11}",
        f"  {'agent_jobs':<14}{fmt(r['steps_per_s'], '9.1f')}  {fmt(r['cpu_ms_per_step'], '11.2f')}",
        f"  {'Celery chain':<14}{fmt(r['celery_chain_per_s'], '9.1f')}  "
        f"{fmt(r['celery_cpu_ms_per_step'], '11.2f')}",
    ]
    if r["dbos_skipped"]:
        lines.append(f"  {'DBOS':<14}skipped: {r['dbos_skipped']}")
    else:
        lines.append(
            f"  {'DBOS':<14}{fmt(r['dbos_per_s'], '9.1f')}  {fmt(r['dbos_cpu_ms_per_step'], '11.2f')}"
        )
    lines += [
        f"  ratio to Celery {fmt(r['ratio_celery'], '.3f')} (target >= {r['target_ratio_celery']}), "
        f"to DBOS {fmt(r['ratio_dbos'], '.3f')} (target >= {r['target_ratio_dbos']})",
        f"  hand-off, one task alone (commit to next commit): p50 {fmt(r['handoff_p50_ms'], '.2f')} ms, "
        f"p99 {fmt(r['handoff_p99_ms'], '.2f')} ms",
        "  CPU: the processes running the steps (workers; DBOS's processes), not Postgres or Redis",
    ]
    return "\n".join(lines)
