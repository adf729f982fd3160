"""`agent-jobs bench noisy`: one tenant bursts to ten times its share of outstanding work while
19 others run steadily; the others' p99 wait for a step, with and without the burst.

Every tenant runs closed loops of no-op steps (each step re-enters its tenant's queue). A steady
tenant keeps one task going; the noisy one keeps one at baseline and ten during the burst. A
step's wait is the gap between its dispatch and the next transition (quick steps commit within
about a millisecond of starting, so the gap is the wait plus that millisecond). Per-tenant queues
with round-robin consumption give each tenant one step per turn however deep its queue is, so
the burst should not lengthen anyone else's turn.
"""

from __future__ import annotations

import itertools
from typing import Any

from agent_jobs.bench.common import Phase, abba, median, percentile, require_services
from agent_jobs.bench.common import progress as say

TARGET_RATIO = 1.1
STEADY = 19  # the default; `--steady N` for more


def run(
    *, steps: int, burst: int, workers: int, rounds: int, steady: int = STEADY,
    progress: bool = True,
) -> dict[str, Any]:  # fmt: skip
    require_services()
    show = progress
    base: list[float] = []
    loud: list[float] = []
    with Phase("noisy", workers, show) as ph:
        tenants = [f"steady{i}" for i in range(steady)]
        ph.finish([ph.submit(t, {"steps": 0}) for t in [*tenants, "noisy"]])  # all queues known
        for r in range(rounds):
            pair = [("baseline", 1, base), (f"burst x{burst}", burst, loud)]
            for label, copies, sink in abba(r, pair):
                steady_ids = [ph.submit(t, {"steps": steps}) for t in tenants]
                noisy = [ph.submit("noisy", {"steps": steps}) for _ in range(copies)]
                ph.finish(steady_ids + noisy)
                gaps = _gaps(ph, steady_ids)
                sink.append(percentile(gaps, 99))
                say(show, f"round {r + 1}/{rounds} {label:>10}: others' p99 wait {sink[-1] * 1000:.1f} ms "
                               f"over {len(gaps)} steps (median {percentile(gaps, 50) * 1000:.1f} ms)")  # fmt: skip
    p99, baseline = median(loud), median(base)
    return {
        "p99_s": round(p99, 4), "baseline_p99_s": round(baseline, 4), "ratio": round(p99 / baseline, 3),
        "target_ratio": TARGET_RATIO, "steady_tenants": steady, "burst": burst, "steps": steps,
        "workers": workers, "rounds": rounds,
        "samples": {"p99_s": [round(x, 4) for x in loud], "baseline_p99_s": [round(x, 4) for x in base]},
    }  # fmt: skip


def _gaps(ph: Phase, ids: list[str]) -> list[float]:
    """Seconds between consecutive transitions of each task, leaving out its first and last
    (arrival and completion are not steady state)."""
    out: list[float] = []
    for task_id in ids:
        moments = [e.at for e in ph.rt.store.events(task_id) if e.to_status is not None]
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(moments)]
        out.extend(gaps[2:-2])
    return out


def render(r: dict[str, Any]) -> str:
    verdict = "meets" if r["ratio"] <= r["target_ratio"] else "MISSES"
    return "\n".join([
        f"bench noisy: {r['steady_tenants']} steady tenants and one that bursts x{r['burst']}, {r['workers']} worker processes, median of {r['rounds']} rounds",
        f"  others' p99 wait, no burst    {r['baseline_p99_s'] * 1000:8.1f} ms",
        f"  others' p99 wait, burst       {r['p99_s'] * 1000:8.1f} ms",
        f"  ratio                         {r['ratio']:8.3f}   target <= {r['target_ratio']} ({verdict})",
    ])  # fmt: skip
