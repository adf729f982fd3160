"""`agent-jobs bench webhooks`: what webhooks cost and how fast they go, on Postgres + Redis.

- `delivery`: on `--workers` worker processes (solo pool), a receiver of the bench's own on
  127.0.0.1 answering 204 at once: **deliveries per second** for a burst of events written
  before the workers start (first to last delivery, by the database's clock), then the
  **event-to-delivery** time of single events on an idle system (a no-op task's commit of its
  `task.completed` to the receiver's answer, both as the delivery row records them).
- `hot-path`: the `bench peers` workload (no-op tasks through the whole runtime) in alternating
  rounds on tenants without an endpoint and tenants with one each: steps/s and CPU per step,
  medians and their ratio. With `--baseline DIR --baseline-database URL`, instead: `bench
  peers` with no webhook on the code before webhooks beside this checkout
  (`cli/bench_webhooks.py`).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agent_jobs.bench.common import bench_env, median, percentile, progress, require_services, wait
from agent_jobs.bench.procs import start_workers, stop_all
from agent_jobs.core.contracts import TaskRequest

LOCAL = {"AGENT_JOBS_WEBHOOK_ALLOW_NETWORKS": "127.0.0.1/32", "AGENT_JOBS_WEBHOOK_ALLOW_HTTP": "1"}


class _Receiver:
    """Answers every POST with 204 at once (the endpoint is not what is measured)."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _runtime() -> Any:
    """This process's runtime, allowed to send to the bench's own receiver."""
    from agent_jobs.config import settings  # noqa: PLC0415
    from agent_jobs.queue.runtime import get_runtime, set_runtime  # noqa: PLC0415

    os.environ.update(LOCAL)
    settings.cache_clear()
    set_runtime(None)
    return get_runtime()


def _register(rt: Any, tenants: list[str], url: str, types: list[str]) -> Any:
    from agent_jobs.notify.service import WebhookService  # noqa: PLC0415
    from agent_jobs.store.webhooks import WebhookStore  # noqa: PLC0415

    ws = WebhookStore(rt.store.engine)
    svc = WebhookService(ws, rt.settings)
    for t in tenants:
        for old in svc.endpoints(t):  # an earlier run's, to a receiver gone since
            svc.delete(t, old.id)
        svc.register(t, url, types, "bench")
    return ws


def _escalated(rt: Any, tenant: str, n: int, tag: str) -> None:
    """`n` events: tasks created and moved RUNNING -> ESCALATED here (one outbox row each)."""
    from agent_jobs.core.patch import Patch  # noqa: PLC0415
    from agent_jobs.core.states import Status  # noqa: PLC0415
    from agent_jobs.store.guard import Guard  # noqa: PLC0415

    store = rt.store
    for i in range(n):
        task = store.create_or_get(
            tenant, f"{tag}-{i}", TaskRequest(workflow="noop@1", input={}), requester="bench"
        ).task
        lease = store.claim(task.id, "bench", 30.0)
        assert lease is not None
        moved = store.transition(
            Guard.lease(lease), Patch(to=Status.RUNNING, event="started", keep_lease=True)
        )
        assert moved.lease is not None
        store.transition(Guard.lease(moved.lease), Patch(to=Status.ESCALATED, event="bench"))


def delivery(
    *, workers: int, tenants: int, events: int, samples: int, show: bool
) -> dict[str, Any]:
    require_services()
    rt = _runtime()
    rec = _Receiver()
    names = [f"whd{i}" for i in range(tenants)]
    tag = f"b{time.time_ns()}"
    procs: list[Any] = []
    try:
        ws = _register(rt, names, rec.url, ["task.escalated", "task.completed"])
        progress(show, f"writing {events} events over {tenants} tenants (no worker yet)")
        for t in names:
            _escalated(rt, t, events // tenants, f"{tag}-{t}")
        logdir = Path(tempfile.mkdtemp(prefix="agent-jobs-webhooks-"))
        progress(show, f"starting {workers} workers (solo pool), logs in {logdir}")
        procs = start_workers(bench_env(LOCAL), workers, logdir)
        total = (events // tenants) * tenants

        def delivered() -> bool:
            rt.sweepers.run("webhooks")  # beat's part: anything whose publish was lost
            return bool(sum(ws.delivery_counts(t)["delivered"] for t in names) >= total)

        wait(delivered, 600, 1.0, "for the burst's deliveries")
        burst = [d for t in names for d in ws.deliveries(t, limit=total + 10)]
        stamps = sorted(d.delivered_at for d in burst if d.delivered_at is not None)
        span = (stamps[-1] - stamps[0]).total_seconds() if len(stamps) > 1 else float("nan")
        progress(show, f"single events, one at a time: {samples}")
        lat = _latencies(rt, ws, names[0], samples, tag)
    finally:
        stop_all(procs)
        rec.close()
    return {
        "deliveries_per_s": round((len(stamps) - 1) / span, 1) if span > 0 else None,
        "burst_events": total,
        "event_to_delivery_p50_ms": round(percentile(lat, 50), 1),
        "event_to_delivery_p99_ms": round(percentile(lat, 99), 1),
        "samples": len(lat),
        "workers": workers,
        "tenants": tenants,
    }


def _latencies(rt: Any, ws: Any, tenant: str, samples: int, tag: str) -> list[float]:
    """Commit of a no-op task's end (its outbox row) to the receiver's answer, one at a time."""
    out = []
    for i in range(samples):
        task_id = rt.orchestrator.submit(
            tenant,
            f"{tag}-lat-{i}",
            TaskRequest(workflow="noop@1", input={"steps": 0}),
            requester="bench",
        ).task.id

        def done(task_id: str = task_id) -> Any:
            rows = ws.deliveries(tenant, task_id=task_id, status="delivered")
            return rows[0] if rows else None

        row = wait(done, 60, 0.005, "for one delivery")
        out.append((row.delivered_at - row.created_at).total_seconds() * 1000)
    return out


def hot_path(*, workers: int, tasks: int, steps: int, rounds: int, show: bool) -> dict[str, Any]:
    from agent_jobs.bench import peers  # noqa: PLC0415

    require_services()
    rt = _runtime()
    rec = _Receiver()
    none = [f"whn{i}" for i in range(tasks)]
    one = [f"whe{i}" for i in range(tasks)]
    samples: dict[str, list[tuple[float, float]]] = {"none": [], "one": []}
    procs: list[Any] = []
    try:
        _register(rt, one, rec.url, ["task.completed"])
        logdir = Path(tempfile.mkdtemp(prefix="agent-jobs-webhooks-"))
        progress(show, f"starting {workers} workers (solo pool), logs in {logdir}")
        procs = start_workers(bench_env(LOCAL), workers, logdir)
        peers._ours(rt, procs, none + one, 3, f"warm{time.time_ns()}")
        sides = [("none", none), ("one", one)]
        for r in range(rounds):
            for name, tenants in sides if r % 2 == 0 else sides[::-1]:
                per_s, cpu = peers._ours(rt, procs, tenants, steps, f"r{time.time_ns()}")
                samples[name].append((per_s, cpu))
                progress(show, f"round {r + 1}/{rounds}: {name:<4} endpoint(s) per tenant "
                         f"{per_s:7.0f} steps/s, {cpu:.2f} ms CPU/step")  # fmt: skip
    finally:
        stop_all(procs)
        rec.close()

    def med(name: str, i: int) -> float:
        return round(median([s[i] for s in samples[name]]), 2)

    return {
        "steps_per_s_no_endpoint": med("none", 0),
        "steps_per_s_one_endpoint": med("one", 0),
        "ratio_one_to_none": round(med("one", 0) / med("none", 0), 3),
        "cpu_ms_per_step_no_endpoint": med("none", 1),
        "cpu_ms_per_step_one_endpoint": med("one", 1),
        "tasks": tasks,
        "steps": steps,
        "workers": workers,
        "rounds": rounds,
        "samples": {k: [[round(a, 1), round(b, 3)] for a, b in v] for k, v in samples.items()},
    }


def render_delivery(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"webhooks on {r['workers']} workers, receiver on 127.0.0.1 answering 204:",
            f"  deliveries/s (burst of {r['burst_events']}, {r['tenants']} tenants): "
            f"{r['deliveries_per_s']}",
            f"  event-to-delivery, one at a time ({r['samples']}): "
            f"p50 {r['event_to_delivery_p50_ms']} ms, p99 {r['event_to_delivery_p99_ms']} ms",
        ]
    )


def render_hot_path(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"hot path, {r['tasks']} no-op tasks x {r['steps']} steps, {r['workers']} workers, "
            f"{r['rounds']} rounds (medians):",
            f"  no endpoint:              {r['steps_per_s_no_endpoint']} steps/s, "
            f"{r['cpu_ms_per_step_no_endpoint']} ms CPU/step",
            f"  one endpoint per tenant:  {r['steps_per_s_one_endpoint']} steps/s, "
            f"{r['cpu_ms_per_step_one_endpoint']} ms CPU/step",
            f"  ratio: {r['ratio_one_to_none']} (target >= 0.85)",
        ]
    )
