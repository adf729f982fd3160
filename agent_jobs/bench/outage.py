"""`agent-jobs bench outage`: how soon work moves again after Postgres stops for a while and
comes back, and after Redis is killed and restarted empty, with the default timings.

The bench owns what it stops. Its workers and beat reach Postgres through a TCP proxy it cuts
(`bench.proxy.CuttableProxy`: every connection reset, new ones refused, as a stopped server) and
restores; the server others use is never touched. The broker is a redis-server of its own on a
free port, killed with SIGKILL and started again with nothing in it. The bench's own runtime (it
submits and reads the figures) reaches Postgres directly.

Per scenario: `WORKERS` worker processes (solo pool) and a beat, all with the default timings;
`tasks` no-op tasks of `STEPS` steps over `TENANTS` tenants (half quick steps, half leased ones
sleeping `SLEEP_MS`), and half as many example payouts (one effect each) submitted just before the
outage so that some are mid-effect. Then the service goes away for `down_s` and comes back.

Figures, from the event log (database timestamps): for every task runnable when the service went
away, the time from the service answering again to its next commit ("moving again"), median and
max; tasks lost (not terminal `DRAIN_S` after the service came back); effects applied twice
(ledger transfers sharing an idempotency key); worker processes that exited; and the tries the
workers' steps made while the database was away (their log lines).
"""

from __future__ import annotations

import logging
import os
import secrets
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from agent_jobs.bench.common import median, require_services
from agent_jobs.bench.common import progress as say
from agent_jobs.bench.procs import (
    BeatProcess,
    PrivateRedis,
    WorkerProcess,
    start_workers,
    stop_all,
)
from agent_jobs.bench.proxy import CuttableProxy
from agent_jobs.config import Settings
from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import TERMINAL, Status

SCENARIOS = ("postgres", "redis")
WORKERS = 2
TENANTS = 4
STEPS = 40
SLEEP_MS = 20
FLOWING_S = 1.5  # from the first submissions to the payouts: the queues are flowing
PAYOUTS_LEAD_S = 0.3  # the payouts go in this long before the outage, to catch some mid-effect
DRAIN_S = 180.0
POLL_S = 0.25
# Set in the bench's own shell, these would not be the defaults the figures are about.
TIMING_VARIABLES = (
    "AGENT_JOBS_LEASE_TTL_S", "AGENT_JOBS_SWEEP_INTERVAL_S", "AGENT_JOBS_DISPATCH_GRACE_S",
    "AGENT_JOBS_OUTAGE_WAIT_S", "AGENT_JOBS_OUTAGE_RETRY_MAX_S", "AGENT_JOBS_RETRY_BASE_S",
    "AGENT_JOBS_RETRY_MAX_S", "AGENT_JOBS_STEP_ACKS", "AGENT_JOBS_CELERY_CONFIG",
)  # fmt: skip
LEDGER = "ledger.db"  # the payouts' example ledger, in the scenario's log directory
RETRY_LINE = "the database cannot be reached"  # a step's try, as orchestrator/runner.py logs it


def run(
    *,
    tasks: int = 20,
    down_s: float = 10.0,
    scenarios: tuple[str, ...] = SCENARIOS,
    progress: bool = True,
) -> dict[str, Any]:
    database_url, _ = require_services()
    if tasks < 2 or down_s <= 0:
        raise ValueError("--tasks must be at least 2 and --down more than 0")
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown or not scenarios:
        raise ValueError(f"scenarios are {', '.join(SCENARIOS)}; not {', '.join(unknown)}")
    result: dict[str, Any] = {"tasks": tasks, "down_s": down_s, "workers": WORKERS,
                              "steps": STEPS, "sleep_ms": SLEEP_MS, "scenarios": list(scenarios)}  # fmt: skip
    logdir = Path(tempfile.mkdtemp(prefix="agent-jobs-outage-"))
    say(progress, f"logs in {logdir}")
    with PrivateRedis(logdir) as broker:
        # This process's Celery app (the bench's submissions, the workers' readiness pings)
        # talks to the bench's own Redis too: set before anything reads the app's settings.
        from agent_jobs.config import settings  # noqa: PLC0415

        os.environ["AGENT_JOBS_BROKER_URL"] = broker.url
        os.environ.pop("AGENT_JOBS_REDIS_URL", None)
        settings.cache_clear()
        for scenario in scenarios:
            where = logdir / scenario
            where.mkdir()
            one = _scenario(
                scenario, database_url, broker,
                tasks=tasks, down_s=down_s, logdir=where, show=progress,
            )  # fmt: skip
            result.update({f"{scenario}_{k}": v for k, v in one.items() if k != "timings"})
            result["timings"] = one["timings"]
            say(progress, f"[{scenario}] moving again p50 {_fmt(one['moving_p50_s'])} s, max "
                          f"{_fmt(one['moving_max_s'])} s; {one['lost']} lost, "
                          f"{one['duplicate_effects']} duplicate effects")  # fmt: skip
    result["logs"] = str(logdir)
    return result


def _env(database_url: str, broker_url: str, logdir: Path) -> dict[str, str]:
    """The workers' and beat's environment: this shell's AGENT_JOBS_* without any timing
    override (the figures are about the defaults), this scenario's services, prefix, ledger."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith("AGENT_JOBS_") and k not in TIMING_VARIABLES
    }
    env.update({
        "AGENT_JOBS_DATABASE_URL": database_url,
        "AGENT_JOBS_BROKER_URL": broker_url,
        "AGENT_JOBS_QUEUE_PREFIX": f"outage{uuid.uuid4().hex[:6]}",
        "AGENT_JOBS_EXAMPLE_BACKEND": str(logdir / LEDGER),
    })  # fmt: skip
    env.pop("AGENT_JOBS_REDIS_URL", None)  # the directory lives in the broker's Redis
    # A worker outside the embedded mode wants a tool secret: the bench's own if none is set.
    env.setdefault("AGENT_JOBS_TOOL_SECRET", secrets.token_urlsafe(32))
    return env


def _scenario(
    scenario: str,
    database_url: str,
    broker: PrivateRedis,
    *,
    tasks: int,
    down_s: float,
    logdir: Path,
    show: bool,
) -> dict[str, Any]:
    from agent_jobs.config import from_environ  # noqa: PLC0415
    from agent_jobs.orchestrator.sweepers import Sweepers  # noqa: PLC0415
    from agent_jobs.queue.runtime import build_runtime  # noqa: PLC0415
    from agent_jobs.store.admin import prepare  # noqa: PLC0415
    from agent_jobs.workflows.example_backend import ExampleBackend  # noqa: PLC0415

    direct = make_url(database_url)
    workers: list[WorkerProcess] = []
    rt: Any = None
    with CuttableProxy((direct.host or "127.0.0.1", direct.port or 5432)) as proxy:
        proxied = direct.set(host="127.0.0.1", port=proxy.port)
        env = _env(proxied.render_as_string(hide_password=False), broker.url, logdir)
        cfg = from_environ({**env, "AGENT_JOBS_DATABASE_URL": database_url})
        prepare(database_url).dispose()
        rt = build_runtime(cfg)
        ledger = ExampleBackend(logdir / LEDGER)
        try:
            workers = start_workers(env, WORKERS, logdir)
            with BeatProcess(env, logdir):
                # The broker's sentinel for this new Redis, set now: the first sweep would
                # otherwise take the empty server for one that lost its messages.
                quiet = logging.getLogger(Sweepers.__module__)
                level = quiet.level
                quiet.setLevel(logging.ERROR)
                try:
                    rt.sweepers.dispatch()
                finally:
                    quiet.setLevel(level)
                ids, cut_at, back_at, runnable = _drive(
                    scenario, rt, broker, proxy, tasks=tasks, down_s=down_s, show=show
                )
                _drain(rt, ids, show, scenario)
            # A worker that exited on its own (the broker went away): it must never happen.
            exits = [w.proc.returncode for w in workers if w.proc.poll() is not None]
            figures = _figures(rt.store, ids, runnable, back_at, ledger)
        finally:
            stop_all(workers)
            rt.store.dispose()
        figures.update({
            "timings": _timings(cfg),
            "outage_s": round((back_at - cut_at).total_seconds(), 2),
            "worker_exits": len(exits),
            "step_retries": sum(
                p.read_text(errors="replace").count(RETRY_LINE) for p in logdir.glob("*.log")
            ),
        })  # fmt: skip
        return figures


def _drive(
    scenario: str,
    rt: Any,
    broker: PrivateRedis,
    proxy: CuttableProxy,
    *,
    tasks: int,
    down_s: float,
    show: bool,
) -> tuple[list[str], Any, Any, list[str]]:
    """Submit the load, take the service away for `down_s`, bring it back. Returns every task,
    the instants the service went and came back (database clock), and the tasks runnable then."""
    store = rt.store

    def submit(tenant: str, workflow: str, data: dict[str, Any]) -> str:
        request = TaskRequest(workflow=workflow, input=data)
        key = f"o{time.time_ns()}"
        return str(rt.orchestrator.submit(tenant, key, request, requester="bench").task.id)

    # Warm-up, not measured: the workers learn the tenant queues.
    warm = [submit(f"outage{t}", "noop@1", {"steps": 1}) for t in range(TENANTS)]
    warm.append(submit("outage-pay", "noop@1", {"steps": 1}))
    _wait(lambda: all(store.get(t).status in TERMINAL for t in warm), 60, "the warm-up")
    ids = []
    for i in range(tasks):
        data: dict[str, Any] = {"steps": STEPS}
        if i % 2:
            data["sleep_ms"] = SLEEP_MS
        ids.append(submit(f"outage{i % TENANTS}", "noop@1", data))
    time.sleep(FLOWING_S)
    for i in range(max(1, tasks // 2)):
        payout = {"account": f"acc_{i}", "amount_minor": 900, "reads": 1}
        ids.append(submit("outage-pay", "example@1", payout))
    time.sleep(PAYOUTS_LEAD_S)
    cut_at = store.db_now()
    runnable = [t for t in ids if store.get(t).status not in TERMINAL]
    if scenario == "postgres":
        proxy.cut()
        say(
            show,
            f"[{scenario}] Postgres cut ({len(runnable)} tasks runnable); back in {down_s:g} s",
        )
    else:
        broker.kill()
        say(show, f"[{scenario}] Redis killed ({len(runnable)} tasks runnable); back empty in {down_s:g} s")  # fmt: skip
    time.sleep(down_s)
    if scenario == "postgres":
        proxy.restore()
    else:
        broker.start()
    back_at = store.db_now()
    say(show, f"[{scenario}] service back")
    return ids, cut_at, back_at, runnable


def _drain(rt: Any, ids: list[str], show: bool, scenario: str) -> None:
    deadline = time.monotonic() + DRAIN_S
    while time.monotonic() < deadline:
        left = sum(rt.store.get(t).status not in TERMINAL for t in ids)
        if not left:
            return
        time.sleep(POLL_S)
    say(show, f"[{scenario}] {left} task(s) still running after {DRAIN_S:g} s")


def _figures(
    store: Any, ids: list[str], runnable: list[str], back_at: Any, ledger: Any
) -> dict[str, Any]:
    moving: list[float] = []
    finished_meanwhile = 0
    for task_id in runnable:
        commits = [e.at for e in store.events(task_id) if e.to_status is not None]
        after = [at for at in commits if at > back_at]
        if after:
            moving.append((after[0] - back_at).total_seconds())
        elif store.get(task_id).status in TERMINAL:
            finished_meanwhile += 1  # its last steps ran while the broker was away
    statuses = Counter(store.get(t).status for t in ids)
    per_key = Counter(tr.idempotency_key for tr in ledger.transfers())
    return {
        "runnable": len(runnable),
        "moving_n": len(moving),
        "moving_p50_s": round(median(moving), 2) if moving else None,
        "moving_max_s": round(max(moving), 2) if moving else None,
        "moving_samples": sorted(round(v, 2) for v in moving),
        "finished_during_outage": finished_meanwhile,
        "submitted": len(ids),
        "completed": statuses[Status.COMPLETED],
        "other_terminal": sum(n for s, n in statuses.items() if s in TERMINAL)
        - statuses[Status.COMPLETED],
        "lost": sum(n for s, n in statuses.items() if s not in TERMINAL),
        "transfers": len(per_key),
        "duplicate_effects": sum(n - 1 for n in per_key.values() if n > 1),
    }


def _timings(cfg: Settings) -> dict[str, float]:
    return {
        "dispatch_grace_s": cfg.dispatch_grace_s,
        "sweep_interval_s": cfg.sweep_interval_s,
        "lease_ttl_s": cfg.lease_ttl_s,
        "outage_wait_s": cfg.outage_wait_s,
        "outage_retry_max_s": cfg.outage_retry_max_s,
    }


def _wait(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render(r: dict[str, Any]) -> str:
    t = r["timings"]
    lines = [
        f"bench outage: {r['tasks']} no-op tasks of {r['steps']} steps (half quick, half leased "
        f"{r['sleep_ms']} ms steps) and {max(1, r['tasks'] // 2)} payouts, {r['workers']} worker "
        f"processes and beat; each service away {r['down_s']:g} s",
        f"  default timings: dispatch grace {t['dispatch_grace_s']:g} s, sweep interval "
        f"{t['sweep_interval_s']:g} s, lease TTL {t['lease_ttl_s']:g} s, a step waits out the "
        f"database for {t['outage_wait_s']:g} s, pausing at most {t['outage_retry_max_s']:g} s",
        f"  {'scenario':<24}{'runnable':>9}{'moving p50':>12}{'max':>8}{'completed':>11}"
        f"{'lost':>6}{'dup. effects':>14}{'worker exits':>14}{'step tries':>12}",
    ]
    names = {"postgres": "postgres (proxy cut)", "redis": "redis (killed, empty)"}
    for s in r["scenarios"]:
        done = f"{r[f'{s}_completed'] + r[f'{s}_other_terminal']}/{r[f'{s}_submitted']}"
        lines.append(
            f"  {names[s]:<24}{r[f'{s}_runnable']:>9}{_fmt(r[f'{s}_moving_p50_s']):>10} s"
            f"{_fmt(r[f'{s}_moving_max_s']):>6} s{done:>11}{r[f'{s}_lost']:>6}"
            f"{r[f'{s}_duplicate_effects']:>14}{r[f'{s}_worker_exits']:>14}"
            f"{r[f'{s}_step_retries']:>12}"
        )
    lines += [
        "  moving: from the service answering again to each runnable task's next commit "
        "(database clock); step tries: a worker's step trying again while the database was away",
    ]
    bad = [s for s in r["scenarios"] if r[f"{s}_lost"] or r[f"{s}_duplicate_effects"]]
    if bad:
        lines.append(f"  LOST TASKS OR DUPLICATE EFFECTS: {', '.join(bad)}")
    return "\n".join(lines)
