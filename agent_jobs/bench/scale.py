"""`agent-jobs bench fairness --tenants 1000 --active 50`: throughput with many known tenants of
which few have work, against a deployment of 20 tenants. Workers consume only tenants with work
(idle ones are dropped), so the BRPOP over consumed queues stays short; `--compare-all` also runs
the 1,000 tenants with idle dropping off, to show what it saves.
"""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from agent_jobs.bench.common import Phase, abba, median, progress, require_services, wait
from agent_jobs.config import load_settings

TARGET_RATIO = 0.8
TOTAL_STEPS = 4000
QUICK_ENV = {"AGENT_JOBS_QUEUE_SYNC_INTERVAL_S": "0.5"}
IDLE_S = 30.0  # longer than a round of the other deployment: active tenants stay consumed


def run(
    *,
    tenants: int,
    active: int,
    workers: int,
    rounds: int,
    compare_all: bool,
    progress: bool = True,
) -> dict[str, Any]:
    require_services()
    show = progress
    # Both deployments run side by side (each its own workers, queue prefix and database; the
    # idle one's workers sit in a blocking BRPOP) and their rounds alternate, ABBA, so drift in the machine
    # or the database favours neither. Idle dropping is set longer than the other side's round,
    # so the active tenants stay consumed between rounds once the idle ones have gone.
    scaled_name = f"{tenants} known, {active} active"
    with ExitStack() as stack:
        base = stack.enter_context(_phase_of("20 tenants", workers, show, idle_s=60))
        scaled = stack.enter_context(
            _phase_of(scaled_name, workers, show, idle_s=IDLE_S, db="scale")
        )
        _make_known(base, 20, 20, show, idle_s=60)
        _make_known(scaled, tenants, active, show, idle_s=IDLE_S)
        rates: dict[str, list[float]] = {base.name: [], scaled.name: []}
        consumed: dict[str, int] = {base.name: 0, scaled.name: 0}
        for r in range(rounds):
            for ph, n in abba(r, [(base, 20), (scaled, active)]):
                rate, queues = _round(ph, n, show, f"round {r + 1}/{rounds}")
                rates[ph.name].append(rate)
                consumed[ph.name] = max(consumed[ph.name], queues)
        footprint = {ph.name: _footprint(ph) for ph in (base, scaled)}
    base_rate, scaled_rate = median(rates[base.name]), median(rates[scaled.name])
    result: dict[str, Any] = {
        "transitions_per_s": round(scaled_rate, 1),
        "baseline_per_s": round(base_rate, 1),
        "ratio": round(scaled_rate / base_rate, 3),
        "target_ratio": TARGET_RATIO,
        "tenants": tenants,
        "active": active,
        "workers": workers,
        "rounds": rounds,
        "queues_consumed": consumed[scaled.name],
        "worker_rss_mb": footprint[scaled.name]["rss_mb"],
        "baseline_worker_rss_mb": footprint[base.name]["rss_mb"],
        "redis_keys": footprint[scaled.name]["keys"],
        "baseline_redis_keys": footprint[base.name]["keys"],
        # What 10,000 more known tenants cost, from the difference between the deployments.
        "rss_mb_per_10k_tenants": _per_10k(footprint, scaled.name, base.name, "rss_mb", tenants),
        "keys_per_10k_tenants": _per_10k(footprint, scaled.name, base.name, "keys", tenants),
        "samples": {
            "transitions_per_s": [round(x, 1) for x in rates[scaled.name]],
            "baseline_per_s": [round(x, 1) for x in rates[base.name]],
        },
    }
    if compare_all:
        name = f"{tenants} known, all consumed"
        with _phase_of(name, workers, show, idle_s=86400) as every:
            _make_known(every, tenants, active, show, idle_s=86400)
            samples = [_round(every, active, show, f"round {r + 1}")
                       for r in range(max(1, rounds // 2))]  # fmt: skip
        result["all_consumed_per_s"] = round(median([rate for rate, _ in samples]), 1)
        result["all_consumed_queues"] = max(queues for _, queues in samples)
    return result


def _phase_of(name: str, workers: int, show: bool, *, idle_s: float, db: str = "") -> Phase:
    """A deployment; `db` names a database of its own beside the configured one, because a
    worker also learns tenants with runnable work from the database, and two deployments
    sharing one would consume each other's tenants."""
    env = {"AGENT_JOBS_TENANT_IDLE_S": str(idle_s), **QUICK_ENV}
    if db:
        env["AGENT_JOBS_DATABASE_URL"] = _sibling_database(load_settings().database_url, db)
    return Phase(name, workers, show, env)


def _sibling_database(url: str, suffix: str) -> str:
    """`postgresql://h/agent_jobs_bench?x` -> `postgresql://h/agent_jobs_bench_<suffix>?x`."""
    base, sep, query = url.partition("?")
    return f"{base}_{suffix}{sep}{query}"


def _make_known(ph: Phase, known: int, active: int, show: bool, *, idle_s: float) -> None:
    """Every tenant runs one empty task; then, when only some will have work, wait until the
    workers have dropped the idle ones."""
    names = _names(known)
    progress(show, f"[{ph.name}] {known} tenants become known (one task each)")
    for chunk in range(0, known, 200):
        ph.finish([ph.submit(t, {"steps": 0}) for t in names[chunk : chunk + 200]])
    if known > active:
        progress(show, f"[{ph.name}] waiting {idle_s:.0f} s for the workers to drop idle queues")
        time.sleep(idle_s + 1.0)
        wait(lambda: _consumed(ph) <= active, 60, 0.5, "for idle queues to be dropped")


def _round(ph: Phase, active: int, show: bool, label: str) -> tuple[float, int]:
    """One round: the first `active` tenants each run a no-op task; transitions/s and the tenant
    queues the busiest worker consumed."""
    steps = max(1, TOTAL_STEPS // active)
    start = time.monotonic()
    ids = [ph.submit(t, {"steps": steps}) for t in _names(active)]
    time.sleep(0.5)
    consumed = _consumed(ph)
    ph.finish(ids)
    secs = time.monotonic() - start
    done = sum(ph.rt.store.get(i).version - 1 for i in ids)
    progress(show, f"[{ph.name}] {label}: {done} transitions in {secs:.2f} s = {done / secs:.0f}/s, "
                   f"{consumed} tenant queues consumed per worker")  # fmt: skip
    return done / secs, consumed


def _footprint(ph: Phase) -> dict[str, float]:
    """The largest worker's resident memory (MB) and the Redis keys of this deployment: those
    under its prefix and kombu's bindings of its queues, on the broker and the directory."""
    import redis  # noqa: PLC0415

    from agent_jobs.config import from_environ  # noqa: PLC0415

    rss = 0.0
    for w in ph.procs:
        try:
            text = Path(f"/proc/{w.proc.pid}/status").read_text()
        except OSError:
            continue
        kb = next(
            (int(line.split()[1]) for line in text.splitlines() if line.startswith("VmRSS:")), 0
        )
        rss = max(rss, kb / 1024)
    cfg = from_environ({**os.environ, **ph.env})
    prefix = ph.env["AGENT_JOBS_QUEUE_PREFIX"]
    keys = 0
    for url in {cfg.broker_url, cfg.directory_redis_url or cfg.broker_url}:
        client = redis.Redis.from_url(url)
        for pattern in (f"{prefix}*", f"_kombu.binding*.{prefix}*"):
            keys += sum(1 for _ in client.scan_iter(pattern, count=1000))
        client.close()
    return {"rss_mb": round(rss, 1), "keys": keys}


def _per_10k(
    footprint: dict[str, dict[str, float]], scaled: str, base: str, what: str, tenants: int
) -> float:
    extra = footprint[scaled][what] - footprint[base][what]
    return round(extra * 10_000 / max(1, tenants - 20), 1)


def _names(n: int) -> list[str]:
    return [f"s{i}" for i in range(n)]


def _consumed(ph: Phase) -> int:
    """Tenant queues the busiest worker consumes, by asking the workers."""
    from agent_jobs.bench.procs import control_for  # noqa: PLC0415
    from agent_jobs.core.names import tenant_of_queue  # noqa: PLC0415

    prefix = ph.env["AGENT_JOBS_QUEUE_PREFIX"]
    control = control_for(prefix)
    # broadcast, not inspect(): Inspect goes through app.control, the default exchange.
    replies = control.broadcast("active_queues", reply=True, timeout=2.0) or []
    names = {w.name for w in ph.procs}
    counts = [
        sum(1 for q in queues if tenant_of_queue(prefix, q["name"]) is not None)
        for reply in replies
        for node, queues in reply.items()
        if node.split("@")[0] in names
    ]
    return max(counts, default=0)


def render(r: dict[str, Any]) -> str:
    verdict = "meets" if r["ratio"] >= r["target_ratio"] else "MISSES"
    lines = [
        f"bench fairness (scale): {r['tenants']} known tenants, {r['active']} with work, {r['workers']} worker processes, median of {r['rounds']} rounds",
        f"  20 tenants                       {r['baseline_per_s']:8.1f} transitions/s",
        f"  {r['tenants']} known, {r['active']} active           {r['transitions_per_s']:8.1f} transitions/s   ({r['queues_consumed']} queues consumed per worker)",
        f"  ratio                            {r['ratio']:8.3f}   target >= {r['target_ratio']} ({verdict})",
    ]
    if "worker_rss_mb" in r:
        lines.append(
            f"  worker memory (largest)          {r['worker_rss_mb']:8.1f} MB ({r['baseline_worker_rss_mb']:.1f} MB with 20 tenants): {r['rss_mb_per_10k_tenants']:+.1f} MB per 10,000 tenants"
        )
        lines.append(
            f"  Redis keys                       {r['redis_keys']:8d}    ({r['baseline_redis_keys']} with 20 tenants): {r['keys_per_10k_tenants']:+,.0f} per 10,000 tenants"
        )
    if "all_consumed_per_s" in r:
        lines.append(
            f"  {r['tenants']} known, all consumed       {r['all_consumed_per_s']:8.1f} transitions/s   ({r['all_consumed_queues']} queues: idle dropping off)"
        )
    return "\n".join(lines)
