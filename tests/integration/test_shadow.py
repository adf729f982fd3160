"""Shadow runs a candidate on copies of recent live tasks, against the deployment's routes, in
the release gate's isolated process; its agreement with the live decisions separates a healthy
candidate from a broken one, and production's database is only read.

Before, shadow replaced the deployment's routes with the eval models' (a candidate on a route
only the deployment defines could not run: healthy and broken both scored low) and ran on the
calling process's runtime."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select

from agent_jobs.evals import models
from agent_jobs.evals.runner import release_manifest
from agent_jobs.gateway.routes import DEFAULT_ROUTE_CONFIG
from agent_jobs.releases.rollout import ReleaseService
from agent_jobs.releases.shadow import shadow_report
from agent_jobs.sim import worlds
from agent_jobs.sim.server import SimServer
from agent_jobs.store.schema import release_history, tasks
from agent_jobs.testing import Harness
from agent_jobs.workflows.refund import WORKFLOW
from tests.integration.test_rollout import business, catalog, harness, services, submit

pytestmark = [pytest.mark.slow]
__all__ = ["harness", "services"]  # the fixture, imported for its name

PACING = {"AGENT_JOBS_RETRY_BASE_S": "0.05", "AGENT_JOBS_RETRY_MAX_S": "0.2"}
# Routes only the deployment defines: the eval models' routes know neither.
NEXT_ROUTE = "support-tier2-next@2026-04"
LOOPS_ROUTE = "support-tier2-loops-next@2026-04"


@pytest.fixture(scope="module")
def routes_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The deployment's routes file: the eval models' routes and two of its own, an honest
    model's next version and one whose model loops."""
    data = models.routes_file_data()
    data["providers"]["deploy-next"] = {
        "type": "factory",
        "factory": "agent_jobs.evals.models:honest",
    }
    data["providers"]["deploy-loops"] = {
        "type": "factory",
        "factory": "agent_jobs.evals.models:loops",
    }
    for name, provider in (
        ("support-tier2-next", "deploy-next"),
        ("support-tier2-loops-next", "deploy-loops"),
    ):
        route = copy.deepcopy(DEFAULT_ROUTE_CONFIG)
        route["name"], route["version"] = name, "2026-04"
        route["primary"]["provider"] = route["fallback"]["provider"] = provider
        data["routes"].append(route)
    path = tmp_path_factory.mktemp("deployment") / "routes.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


@pytest.fixture
def sim() -> Iterator[SimServer]:
    with SimServer(worlds.empty()) as server:
        yield server


@pytest.fixture
def store(pg_store: Any) -> Any:
    """Production is Postgres here: what shadow must leave untouched."""
    return pg_store


WORLDS = ("single_capture", "auth_hold_lookalike", "already_refunded", "amount_above_captured")


def live_traffic(store: Any, sim: SimServer, h: Harness) -> list[Any]:
    """Tasks of the incumbent (the honest eval release, promoted) on four worlds, twice each."""
    merged = worlds.empty()
    for name in WORLDS:
        w = getattr(worlds, name)()
        for k in ("orders", "payments", "refunds"):
            merged[k] += w[k]
    sim.admin.load(merged)
    svc = ReleaseService(store, catalog())
    svc.create(release_manifest("honest"), "alice")
    svc.promote("eval-honest", "alice", "baseline", force=True)
    out = []
    for i in range(2):
        for name in WORLDS:
            order = getattr(worlds, name)()["orders"][0]["order_id"]
            out.append(submit(h, f"tenant-{i}", f"req-{name}-{i}", str(order)))
    assert {t.pinned["release"] for t in out} == {"eval-honest"}
    return out


def snapshot(store: Any) -> tuple[Any, ...]:
    with store.engine.connect() as conn:
        rows = conn.execute(
            select(tasks.c.id, tasks.c.status, tasks.c.version, tasks.c.event_seq).order_by(
                tasks.c.id
            )
        ).all()
        history = conn.execute(select(func.count()).select_from(release_history)).scalar()
    return tuple(rows), history


def candidate(rid: str, route: str) -> dict[str, Any]:
    return {**release_manifest("honest"), "release_id": rid, "model_route": route}


def test_shadow_separates_a_healthy_candidate_from_broken_ones(
    store: Any, sim: SimServer, harness: Harness, routes_file: str
) -> None:
    live = live_traffic(store, sim, harness)
    before, sent = snapshot(store), business(sim)

    def agreement(m: dict[str, Any]) -> dict[str, Any]:
        return shadow_report(store, m, routes_path=routes_file, workflow=WORKFLOW, pacing=PACING)

    healthy = agreement(candidate("next", NEXT_ROUTE))
    assert healthy["tasks"] == len(live)
    assert healthy["agreement"] >= 0.95, healthy["disagreements"]
    # A model that loops on the deployment's next route: every copy escalates. (A provider
    # that is down separates the same way, but its retries take minutes: the gate's test
    # covers that route.)
    broken = agreement(candidate("loops-next", LOOPS_ROUTE))
    assert broken["tasks"] == len(live)
    assert broken["agreement"] <= 0.5, broken
    assert all(d["candidate"]["escalated"] for d in broken["disagreements"])

    # Production was only read: no task, event or history row written, nothing sent.
    assert snapshot(store) == before
    assert business(sim) == sent
