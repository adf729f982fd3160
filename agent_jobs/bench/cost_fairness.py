"""`agent-jobs bench cost-fairness`: tenants whose steps cost 1x and 10x compete, all backlogged;
each tenant's share of the consumed cost, and Jain's fairness index over the shares — with fair
share on (the dispatch gate's cost-weighted scheduling) and, for contrast, off (round robin,
one step each, so the 10x tenants take ten times the capacity).

A step's cost here is the work it declares (its sleep): the gate itself charges measured step
time, which also holds the few milliseconds of overhead every step has.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from agent_jobs.bench.common import Phase, jain, progress, require_services

TARGET_INDEX = 0.95


def run(
    *, tenants: int, cheap_ms: float, ratio: float, window_s: float, workers: int,
    compare: bool = True, progress: bool = True,
) -> dict[str, Any]:  # fmt: skip
    require_services()
    costs = {f"cheap{i}": cheap_ms for i in range(tenants // 2)}
    costs |= {f"costly{i}": cheap_ms * ratio for i in range(tenants - tenants // 2)}
    fair = _measure("fair share on", costs, window_s, workers, progress, fair=True)
    result: dict[str, Any] = {
        "jain_index": round(jain(list(fair.values())), 4), "target_index": TARGET_INDEX,
        "shares": {t: round(s, 4) for t, s in sorted(fair.items())},
        "step_ms": {t: c for t, c in sorted(costs.items())}, "window_s": window_s, "workers": workers,
    }  # fmt: skip
    if compare:
        rr = _measure("fair share off", costs, window_s, workers, progress, fair=False)
        result["round_robin_jain_index"] = round(jain(list(rr.values())), 4)
        result["round_robin_shares"] = {t: round(s, 4) for t, s in sorted(rr.items())}
    return result


def _measure(
    name: str, costs: dict[str, float], window_s: float, workers: int, show: bool, *, fair: bool
) -> dict[str, float]:
    env = {"AGENT_JOBS_FAIR_SHARE": "1" if fair else "0", "AGENT_JOBS_FAIR_QUANTUM_S": "0.1"}
    with Phase(name, workers, show, env) as ph:
        ids: dict[str, list[str]] = {
            t: [ph.submit(t, {"steps": 100_000, "sleep_ms": ms}) for _ in range(3)]
            for t, ms in costs.items()
        }
        time.sleep(2.0)  # warm-up: every tenant backlogged, workers busy
        t0 = ph.rt.store.db_now()
        time.sleep(window_s)
        t1 = ph.rt.store.db_now()
        for task_ids in ids.values():
            for task_id in task_ids:
                ph.rt.orchestrator.cancel(task_id)
        spent = {t: costs[t] * _steps_between(ph, task_ids, t0, t1) for t, task_ids in ids.items()}
    total = sum(spent.values()) or 1.0
    shares = {t: v / total for t, v in spent.items()}
    progress(
        show,
        f"[{name}] shares of cost: " + ", ".join(f"{t} {s:.3f}" for t, s in sorted(shares.items())),
    )
    progress(show, f"[{name}] Jain's index {jain(list(shares.values())):.4f}")
    return shares


def _steps_between(ph: Phase, ids: list[str], t0: datetime, t1: datetime) -> int:
    return sum(
        1
        for task_id in ids
        for e in ph.rt.store.events(task_id)
        if e.to_status is not None and e.from_status is not None and t0 <= e.at <= t1
    )


def render(r: dict[str, Any]) -> str:
    verdict = "meets" if r["jain_index"] >= r["target_index"] else "MISSES"
    lines = [
        f"bench cost-fairness: {len(r['shares'])} tenants, steps of {sorted(set(r['step_ms'].values()))} ms, "
        f"{r['workers']} worker processes, {r['window_s']:g} s window",
        "  shares of consumed cost (fair share on):",
        *(f"    {t:<10} {s:6.3f}" for t, s in r["shares"].items()),
        f"  Jain's index   {r['jain_index']:.4f}   target >= {r['target_index']} ({verdict})",
    ]
    if "round_robin_jain_index" in r:
        lines.append(
            f"  fair share off (one step each): Jain's index {r['round_robin_jain_index']:.4f}"
        )
    return "\n".join(lines)
