"""`agent-jobs bench pgbouncer`: many worker processes sharing few Postgres server connections
through PgBouncer, beside the same workers straight to Postgres, in one run.

Two deployments, each with `workers` real worker processes (`celery worker --pool solo`, as
`bench transitions` starts them), its own queue prefix and its own database: **direct** on the
configured database, and **pgbouncer** on a sibling database (`<name>_pooled`) reached only
through a PgBouncer of the bench's own (`bench/bouncer.py`) in transaction mode with
`pool_size` server connections. Both run with `AGENT_JOBS_PG_PREPARE=0` (what a
transaction-mode pooler needs), so the pooler is the only difference. They run one at a time,
in blocks A B A (the pooled side's rounds between the two halves of the direct side's); each
round submits one no-op task of `steps` steps per worker process (a tenant each) and waits for
all of them.

Reported per side (medians over rounds): steps/s (transitions committed from the round's first
task start to its last commit, by the database's clock), p50 and p99 of the commit-to-commit gap of a
task's transitions under that load (claim, step, compare-and-set, publish, hand-off), the most
connections Postgres held open for the side's database (`pg_stat_activity`, sampled every
100 ms), and for PgBouncer the most clients waiting for a server (`SHOW POOLS`' `cl_waiting`)
and the longest wait. The ratio is pgbouncer over direct.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from datetime import datetime
from typing import Any

from agent_jobs.bench.bouncer import PrivateBouncer, pg
from agent_jobs.bench.common import (
    Phase,
    bench_env,
    median,
    percentile,
    progress,
    require_services,
)
from agent_jobs.bench.procs import bench_worker
from agent_jobs.store.admin import database_name, prepare

SAMPLE_EVERY_S = 0.1
SIDES = ("direct", "pgbouncer")
# Workers re-read their tenants (and enrol queued messages in the ring) this often.
QUICK_ENV = {"AGENT_JOBS_QUEUE_SYNC_INTERVAL_S": "0.5"}
START_BATCH = 8
START_TIMEOUT_S = 180.0


def run(
    *, workers: int, pool_size: int, steps: int, rounds: int, progress: bool = True
) -> dict[str, Any]:
    direct_url, _ = require_services()
    started = time.monotonic()
    show = progress
    pooled_url = _sibling(direct_url, "pooled")
    # This process's own store (its submits and polls) follows the same rule as its workers.
    os.environ["AGENT_JOBS_PG_PREPARE"] = "0"
    from agent_jobs.config import settings  # noqa: PLC0415

    settings.cache_clear()
    for url in (direct_url, pooled_url):
        prepare(url).dispose()  # created and marked by this bench, or refused
    samples: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    # Blocks A B A: the pooled side's rounds between the two halves of the direct side's, so
    # drift favours neither; one deployment at a time, since forty workers straight to Postgres
    # hold about two connections each, and beside the pooler's they pass a max_connections of
    # 100 (every other client of the server then refused).
    blocks = [("direct", rounds // 2), ("pgbouncer", rounds), ("direct", rounds - rounds // 2)]
    with PrivateBouncer(direct_url, pool_size=pool_size) as bouncer:
        progress_line(show, f"pgbouncer on port {bouncer.port}, {pool_size} server connections")
        urls = {"direct": direct_url, "pgbouncer": bouncer.url_for(pooled_url)}
        watcher = _Watcher(bouncer, {"direct": direct_url, "pgbouncer": pooled_url})
        for side, count in blocks:
            if count == 0:
                continue
            with ExitStack() as stack:
                ph = stack.enter_context(_phase(side, urls[side], workers, show))
                stack.callback(_stop_at_once, ph)  # before the phase's own one-by-one stop
                _start_workers(ph, workers, show)
                # The workers' first tasks (connections opened, code warm), then a round that is
                # not counted: a block's first round had a p99 of 2.3 to 2.6 s on either side
                # (measured at 40 workers), which the side with more blocks would carry more of.
                ph.finish([ph.submit(f"pool{i}", {"steps": 1}) for i in range(workers)])
                _round(ph, side, watcher, workers, steps)
                progress_line(show, f"{side:<9} warm-up round done (not counted)")
                for _ in range(count):
                    figures = _round(ph, side, watcher, workers, steps)
                    samples[side].append(figures)
                    progress_line(
                        show,
                        f"{side:<9} round {len(samples[side])}/{rounds}: "
                        f"{figures['steps_per_s']:7.1f} steps/s, p50 {figures['p50_ms']:.1f} ms, "
                        f"p99 {figures['p99_ms']:.1f} ms, {figures['servers']:.0f} Postgres "
                        f"connections, cl_waiting max {figures['cl_waiting']:.0f}",
                    )
    return _result(samples, workers, pool_size, steps, rounds, time.monotonic() - started)


def progress_line(show: bool, text: str) -> None:
    progress(show, f"[bench pgbouncer] {text}")


def _sibling(url: str, suffix: str) -> str:
    base, sep, query = url.partition("?")
    return f"{base}_{suffix}{sep}{query}"


def _phase(name: str, database_url: str, workers: int, show: bool) -> Phase:
    env = {"AGENT_JOBS_DATABASE_URL": database_url, "AGENT_JOBS_PG_PREPARE": "0", **QUICK_ENV}
    return Phase(name, 0, show, env, fresh=False)  # its workers: `_start_workers`


def _stop_at_once(ph: Phase) -> None:
    """Forty workers' warm shutdowns side by side, not one after another."""
    with ThreadPoolExecutor(max_workers=max(1, len(ph.procs))) as pool:
        list(pool.map(lambda w: w.stop(), ph.procs))


def _start_workers(ph: Phase, workers: int, show: bool) -> None:
    """The phase's worker processes, a batch at a time: forty Celery workers importing at once
    on two cores do not answer a ping within a minute. Each is in `ph.procs` from its start,
    so the phase stops it whatever happens."""
    for first in range(0, workers, START_BATCH):
        batch = [
            bench_worker(bench_env(ph.env), f"bench{i}", ph.logdir)
            for i in range(first, min(workers, first + START_BATCH))
        ]
        ph.procs += batch
        for w in batch:
            w.wait_ready(timeout_s=START_TIMEOUT_S)
        progress_line(show, f"[{ph.name}] {len(ph.procs)}/{workers} workers ready")


class _Watcher:
    """Samples, while a round runs, the connections Postgres holds for each side's database and
    PgBouncer's pool of the pooled one."""

    def __init__(self, bouncer: PrivateBouncer, urls: dict[str, str]) -> None:
        self.bouncer = bouncer
        self.names = {side: database_name(url) for side, url in urls.items()}
        self.admin_url = urls["direct"].partition("?")[0].rsplit("/", 1)[0] + "/postgres"

    def during(self, side: str, stop: threading.Event, out: dict[str, float]) -> None:
        while not stop.is_set():
            try:
                self._sample(side, stop, out)
            except pg.Error:
                out["sample_errors"] += 1  # e.g. the server full: sampled again next tick
                stop.wait(SAMPLE_EVERY_S)

    def _sample(self, side: str, stop: threading.Event, out: dict[str, float]) -> None:
        conn = pg.connect(self.admin_url.replace("+psycopg2", ""), connect_timeout=2)
        conn.autocommit = True
        try:
            cur = conn.cursor()
            while not stop.is_set():
                cur.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (self.names[side],)
                )
                out["servers"] = max(out["servers"], float(cur.fetchone()[0]))
                if side == "pgbouncer":
                    pools = self.bouncer.pools(self.names[side])
                    out["cl_waiting"] = max(out["cl_waiting"], float(pools.cl_waiting))
                    out["maxwait_ms"] = max(out["maxwait_ms"], pools.maxwait_s * 1000)
                    out["bouncer_servers"] = max(out["bouncer_servers"], float(pools.servers))
                stop.wait(SAMPLE_EVERY_S)
        finally:
            conn.close()


def _round(ph: Phase, side: str, watcher: _Watcher, workers: int, steps: int) -> dict[str, float]:
    seen = {
        "servers": 0.0, "cl_waiting": 0.0, "maxwait_ms": 0.0, "bouncer_servers": 0.0,
        "sample_errors": 0.0,
    }  # fmt: skip
    stop = threading.Event()
    sampler = threading.Thread(target=watcher.during, args=(side, stop, seen), daemon=True)
    sampler.start()
    try:
        start = time.monotonic()
        ids = [ph.submit(f"pool{i}", {"steps": steps}) for i in range(workers)]
        ph.finish(ids)
        secs = time.monotonic() - start
    finally:
        stop.set()
        sampler.join(timeout=5)
    gaps: list[float] = []
    transitions = 0
    first: list[datetime] = []
    last: list[datetime] = []
    for task_id in ids:
        ats = [e.at for e in ph.rt.store.events(task_id) if e.to_status is not None]
        transitions += len(ats) - 1
        first.append(ats[1])
        last.append(ats[-1])
        # From the first step's commit: the submit's own commit is followed by its publish.
        gaps += [(b - a).total_seconds() * 1000 for a, b in itertools.pairwise(ats[1:])]
    # The rate while the load ran, by the database's clock: from the first task's start to the
    # last commit. (This process's publish enters its own prefix's ring, not the side's, so a
    # submitted task waits for a worker's tenant sync to enrol it; that wait is the harness's,
    # not the pooler's, and is left out.)
    busy_s = (max(last) - min(first)).total_seconds()
    return {
        "steps_per_s": transitions / busy_s,
        "p50_ms": percentile(gaps, 50),
        "p99_ms": percentile(gaps, 99),
        "seconds": secs,
        **seen,
    }


def _result(  # noqa: PLR0917 - private
    samples: dict[str, list[dict[str, float]]],
    workers: int,
    pool_size: int,
    steps: int,
    rounds: int,
    wall_s: float,
) -> dict[str, Any]:
    def med(side: str, key: str) -> float:
        return round(median([s[key] for s in samples[side]]), 2)

    def most(side: str, key: str) -> float:
        return max((s[key] for s in samples[side]), default=0.0)

    out: dict[str, Any] = {
        "workers": workers, "pool_size": pool_size, "tasks": workers, "steps": steps,
        "rounds": rounds, "wall_s": round(wall_s, 1),
        "measured_s": round(sum(x["seconds"] for side in SIDES for x in samples[side]), 1),
    }  # fmt: skip
    for side in SIDES:
        out[side] = {
            "steps_per_s": med(side, "steps_per_s"),
            "p50_ms": med(side, "p50_ms"),
            "p99_ms": med(side, "p99_ms"),
            "round_s": med(side, "seconds"),
            "server_connections_max": int(most(side, "servers")),
        }
    out["pgbouncer"]["cl_waiting_max"] = int(most("pgbouncer", "cl_waiting"))
    out["pgbouncer"]["maxwait_ms"] = round(most("pgbouncer", "maxwait_ms"), 1)
    out["pgbouncer"]["pool_servers_max"] = int(most("pgbouncer", "bouncer_servers"))
    direct, pooled = out["direct"], out["pgbouncer"]
    out["ratio"] = round(pooled["steps_per_s"] / direct["steps_per_s"], 3)
    out["p50_ratio"] = round(pooled["p50_ms"] / direct["p50_ms"], 3)
    out["samples"] = {
        side: [{k: round(v, 2) for k, v in s.items()} for s in samples[side]] for side in SIDES
    }
    return out


def render(r: dict[str, Any]) -> str:
    d, p = r["direct"], r["pgbouncer"]
    return "\n".join(
        [
            f"bench pgbouncer: {r['workers']} worker processes (--pool solo), one no-op task of "
            f"{r['steps']} steps each per round, median of "
            f"{r['rounds']} rounds per side, in blocks direct / pgbouncer / direct (one side "
            "at a time); AGENT_JOBS_PG_PREPARE=0 on both sides",
            f"  the rounds took {r['measured_s']:.0f} s, the whole run {r['wall_s']:.0f} s (most "
            "of the rest: starting each block's worker processes, a batch at a time)",
            "                             straight to Postgres   through PgBouncer "
            f"({r['pool_size']} server connections)",
            f"  steps/s                      {d['steps_per_s']:10.1f}   {p['steps_per_s']:10.1f}"
            f"   ratio {r['ratio']:.3f}",
            f"  step latency p50 (ms)        {d['p50_ms']:10.1f}   {p['p50_ms']:10.1f}"
            f"   ratio {r['p50_ratio']:.3f}",
            f"  step latency p99 (ms)        {d['p99_ms']:10.1f}   {p['p99_ms']:10.1f}",
            f"  Postgres connections (max)   {d['server_connections_max']:10d}   "
            f"{p['server_connections_max']:10d}   (PgBouncer's pool: "
            f"{p['pool_servers_max']} at most)",
            f"  SHOW POOLS cl_waiting (max)  {'-':>10}   {p['cl_waiting_max']:10d}"
            f"   (longest wait {p['maxwait_ms']:.1f} ms)",
        ]
    )
