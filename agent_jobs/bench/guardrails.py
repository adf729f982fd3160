"""`agent-jobs bench guardrails`: how soon beat's guardrails revert a canary whose model
degrades, and how many tasks the bad canary escalated meanwhile (its exposure).

An in-process runtime (the eval's throwaway environment: SQLite, the in-memory broker, an
embedded worker with beat, the simulator) runs an incumbent and a canary at 50% of tenants;
the canary's model route is served by a provider that answers honestly until the bench flips
it, then loops (every task it decides escalates). Nobody calls the guardrails: beat's entry
does, every `--interval` seconds. A watcher notes when the guardrails would first breach (read
only); the figures come from the database's own timestamps: breach to the audited revert.
"""

from __future__ import annotations

import copy
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from agent_jobs.evals import models
from agent_jobs.gateway import ModelRequest, ScriptedProvider
from agent_jobs.gateway.routes import DEFAULT_ROUTE_CONFIG
from agent_jobs.workflows.refund.rules import Behaviour, RefundRules

Json = dict[str, Any]
CANARY_ROUTE = "support-tier2-canary@2026-03"
INCUMBENT, CANARY = "bench-incumbent", "bench-canary"
# Flipped by the bench: from then on the canary's model loops.
DEGRADED = threading.Event()
PACING = {"AGENT_JOBS_RETRY_BASE_S": "0.05", "AGENT_JOBS_RETRY_MAX_S": "0.2"}


class _Degrading:
    """The refund model, honest until `DEGRADED` is set, then looping."""

    def __init__(self) -> None:
        self._honest, self._looping = RefundRules(), RefundRules(Behaviour(loop=True))

    def __call__(self, request: ModelRequest) -> Json:
        return (self._looping if DEGRADED.is_set() else self._honest)(request)


def degrading() -> ScriptedProvider:
    """Routes-file factory (`agent_jobs.bench.guardrails:degrading`)."""
    return ScriptedProvider(_Degrading())


def routes_data() -> Json:
    """The eval models' routes and the canary's, served by the degrading provider."""
    data = models.routes_file_data()
    data["providers"]["bench-degrading"] = {"type": "factory", "factory": f"{__name__}:degrading"}
    route = copy.deepcopy(DEFAULT_ROUTE_CONFIG)
    route["name"], route["version"] = CANARY_ROUTE.split("@")
    route["primary"]["provider"] = route["fallback"]["provider"] = "bench-degrading"
    data["routes"].append(route)
    return data


def _utc(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def run(  # noqa: PLR0915 - one scenario, start to end
    *,
    interval_s: float = 10.0,
    healthy: int = 6,
    gap_s: float = 0.25,
    timeout_s: float = 120.0,
    progress: Callable[[str], None] | None = None,
) -> Json:
    """The scenario once; its figures (JSON-able)."""
    from agent_jobs.core.contracts import TaskRequest  # noqa: PLC0415
    from agent_jobs.evals.runner import EvalEnvironment, release_manifest  # noqa: PLC0415
    from agent_jobs.releases.rollout import (  # noqa: PLC0415
        Guardrails,
        ReleaseService,
        WindowStats,
    )
    from agent_jobs.sim import worlds  # noqa: PLC0415
    from agent_jobs.store.releases import tenant_bucket  # noqa: PLC0415
    from agent_jobs.workflows.refund import WORKFLOW  # noqa: PLC0415

    say = progress or (lambda _m: None)
    DEGRADED.clear()
    # Read when the Celery app is first configured, inside the environment below.
    os.environ["AGENT_JOBS_GUARDRAILS_INTERVAL_S"] = str(interval_s)
    with EvalEnvironment(routes=routes_data(), pacing=PACING) as env:
        store = env.store
        env.sim.admin.load(worlds.auth_hold_lookalike())  # honest: completes; looping: escalates
        svc = ReleaseService(store)
        base = release_manifest("honest")
        svc.create({**base, "release_id": INCUMBENT}, "bench")
        svc.create({**base, "release_id": CANARY, "model_route": CANARY_ROUTE}, "bench")
        svc.promote(INCUMBENT, "bench", "bench baseline", force=True)
        svc.start(CANARY, "canary", 50, "bench", "bench canary")
        names = [f"bench-t{i}" for i in range(200)]
        inside = [t for t in names if tenant_bucket(t, WORKFLOW) < 50]
        outside = [t for t in names if tenant_bucket(t, WORKFLOW) >= 50]
        message = "Order 9101 was charged twice, and my refund has not arrived."
        request = TaskRequest(workflow=WORKFLOW, input={"message": message, "channel": "chat"})
        submitted: list[str] = []

        def submit(tenant: str) -> None:
            key = f"bench-{len(submitted)}"
            submitted.append(env.orch.submit(tenant, key, request, requester="bench").task.id)

        def finished() -> int:
            return sum(store.get(t).status.value in ("COMPLETED", "ESCALATED") for t in submitted)

        for i in range(healthy):  # the healthy window, both sides
            submit(inside[i])
            submit(outside[i])
        deadline = time.monotonic() + timeout_s
        while finished() < len(submitted) and time.monotonic() < deadline:
            time.sleep(0.05)
        say(f"healthy: {len(submitted)} tasks finished; the canary's model degrades now")
        DEGRADED.set()
        degraded_at = _utc(store.db_now())
        breach_at: datetime | None = None
        # The last look that found no breach, taken before that look's query: the breach came
        # after it. Beat can see the breach and revert between two of this loop's looks (its
        # check and ours race); then this bounds the breach from below.
        clear_at = degraded_at
        g = Guardrails()
        i = healthy
        while time.monotonic() < deadline:
            ro = store.rollout(WORKFLOW)
            if ro is None or ro.mode != "canary":
                break
            if breach_at is None:
                looked_at = _utc(store.db_now())
                stats = svc.stats(WORKFLOW, g.window_s)
                empty = WindowStats(0, 0.0, 0.0, 0.0, 0.0)
                cand, inc = stats.get(CANARY, empty), stats.get(INCUMBENT, empty)
                if g.breaches(cand, inc):
                    breach_at = _utc(store.db_now())
                    say("the guardrails would breach now; waiting for beat")
                else:
                    clear_at = looked_at
            submit(inside[i % len(inside)])
            submit(outside[i % len(outside)])
            i += 1
            time.sleep(gap_s)
        reverts = [h for h in store.release_history(WORKFLOW) if h.action == "auto_revert"]
        exposure = svc.escalated_tasks(CANARY)
        revert = reverts[0] if reverts else None
        revert_at = _utc(revert.at) if revert else None
        seen = breach_at is not None
        if breach_at is None and revert_at is not None:
            breach_at = clear_at  # beat was first: the figure below is an upper bound
        return {
            "interval_s": interval_s,
            "reverted": revert is not None,
            "revert_actor": revert.actor if revert else None,
            "revert_reason": revert.reason if revert else None,
            "degraded_at": degraded_at.isoformat(),
            "breach_at": breach_at.isoformat() if breach_at else None,
            # False: beat reverted before this loop saw the breach; breach_at is then the last
            # look without one, and breach_to_revert_s an upper bound.
            "breach_seen_by_bench": seen,
            "reverted_at": revert_at.isoformat() if revert_at else None,
            "breach_to_revert_s": (
                round((revert_at - breach_at).total_seconds(), 2)
                if revert_at and breach_at
                else None
            ),
            "degrade_to_revert_s": (
                round((revert_at - degraded_at).total_seconds(), 2) if revert_at else None
            ),
            "tasks_submitted": len(submitted),
            "escalated_on_canary": len(exposure),
            "escalated_task_ids": [t.task_id for t in exposure],
            "canary": CANARY,
        }


def render(r: Json) -> str:
    if not r["reverted"]:
        return f"the canary was NOT reverted (beat every {r['interval_s']:g} s)"
    return "\n".join(
        [
            f"guardrails on beat every {r['interval_s']:g} s: canary {r['canary']} reverted by "
            f"{r['revert_actor']} {'' if r['breach_seen_by_bench'] else 'at most '}"
            f"{r['breach_to_revert_s']} s after the breach "
            f"({r['degrade_to_revert_s']} s after its model degraded)",
            f"reason: {r['revert_reason']}",
            f"exposure: {r['escalated_on_canary']} task(s) escalated on the canary "
            f"(`agent-jobs incidents tasks --release {r['canary']}`), "
            f"of {r['tasks_submitted']} submitted",
        ]
    )
