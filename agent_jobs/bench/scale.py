"""`agent-jobs bench fairness --tenants 1000 --active 50`: throughput with many known tenants of
which few have work, against a deployment of 20 tenants. Workers consume only tenants with work
(idle ones are dropped), so the BRPOP over consumed queues stays short; `--compare-all` also runs
the 1,000 tenants with idle dropping off, to show what it saves.
"""

from __future__ import annotations

import time
from typing import Any

from agent_jobs.bench.common import Phase, median, progress, require_services, wait

TARGET_RATIO = 0.8
TOTAL_STEPS = 4000
QUICK_ENV = {"AGENT_JOBS_QUEUE_SYNC_INTERVAL_S": "0.5"}


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
    base = _phase("20 tenants", 20, 20, workers, rounds, show, idle_s="60")
    scaled = _phase(
        f"{tenants} known, {active} active", tenants, active, workers, rounds, show, idle_s="2"
    )
    result: dict[str, Any] = {
        "transitions_per_s": round(scaled["rate"], 1),
        "baseline_per_s": round(base["rate"], 1),
        "ratio": round(scaled["rate"] / base["rate"], 3),
        "target_ratio": TARGET_RATIO,
        "tenants": tenants,
        "active": active,
        "workers": workers,
        "rounds": rounds,
        "queues_consumed": scaled["queues"],
        "samples": {"transitions_per_s": scaled["samples"], "baseline_per_s": base["samples"]},
    }
    if compare_all:
        every = _phase(f"{tenants} known, all consumed", tenants, active, workers, max(1, rounds // 2),
                       show, idle_s="86400")  # fmt: skip
        result["all_consumed_per_s"] = round(every["rate"], 1)
        result["all_consumed_queues"] = every["queues"]
    return result


def _phase(  # noqa: PLR0917 - one call site per phase, read as a sentence
    name: str, known: int, active: int, workers: int, rounds: int, show: bool, *, idle_s: str
) -> dict[str, Any]:
    with Phase(name, workers, show, AGENT_JOBS_TENANT_IDLE_S=idle_s, **QUICK_ENV) as ph:
        names = [f"s{i}" for i in range(known)]
        progress(show, f"[{name}] {known} tenants become known (one task each)")
        for chunk in range(0, known, 200):
            ph.finish([ph.submit(t, {"steps": 0}) for t in names[chunk : chunk + 200]])
        if known > active and float(idle_s) < 60:
            time.sleep(float(idle_s) + 1.0)  # every tenant idle now: workers drop their queues
            wait(lambda: _consumed(ph) <= active, 60, 0.5, "for idle queues to be dropped")
        steps = max(1, TOTAL_STEPS // active)
        rates = []
        consumed = 0
        for r in range(rounds):
            start = time.monotonic()
            ids = [ph.submit(t, {"steps": steps}) for t in names[:active]]
            time.sleep(0.5)
            consumed = max(consumed, _consumed(ph))
            ph.finish(ids)
            secs = time.monotonic() - start
            done = sum(ph.rt.store.get(i).version - 1 for i in ids)
            rates.append(done / secs)
            progress(show, f"[{name}] round {r + 1}/{rounds}: {done} transitions in {secs:.2f} s = "
                           f"{done / secs:.0f}/s, {consumed} tenant queues consumed per worker")  # fmt: skip
        return {"rate": median(rates), "samples": [round(x, 1) for x in rates], "queues": consumed}


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
    if "all_consumed_per_s" in r:
        lines.append(
            f"  {r['tenants']} known, all consumed       {r['all_consumed_per_s']:8.1f} transitions/s   ({r['all_consumed_queues']} queues: idle dropping off)"
        )
    return "\n".join(lines)
