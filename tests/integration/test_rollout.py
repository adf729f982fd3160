"""Rollout against the real refund workflow: a candidate with a different scripted model shows
up in shadow as disagreement, and a canary whose candidate escalates more is reverted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.evals import models
from agent_jobs.evals.runner import release_manifest
from agent_jobs.gateway import ModelGateway, load_routes
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.releases import Catalog
from agent_jobs.releases.rollout import Guardrails, ReleaseService, tenant_bucket
from agent_jobs.releases.shadow import shadow_report
from agent_jobs.sim import worlds
from agent_jobs.sim.server import SimServer
from agent_jobs.testing import Harness
from agent_jobs.tools import HmacCredentialProvider
from agent_jobs.tools.refund_tools import refund_registry
from agent_jobs.workflows.refund import WORKFLOW, RefundServices, RefundWorkflow
from agent_jobs.workflows.refund.wiring import systems_config


def services(base_url: str) -> RefundServices:
    """The refund services with every eval model variant's route, as a routes file gives."""
    data = models.routes_file_data()
    providers: dict[str, Any] = {"scripted": models.honest()}
    for variant in models.VARIANTS:
        providers[f"eval-{variant.replace('_', '-')}"] = models.variant_provider(variant)
    return RefundServices(
        gateway=ModelGateway(load_routes(data), providers),
        tools=refund_registry(systems_config(base_url, environ={})),
        credentials=HmacCredentialProvider("agent-jobs-test-secret"),
        confirm_lag_s=0,
    )


@pytest.fixture
def sim() -> Iterator[SimServer]:
    with SimServer(worlds.empty()) as server:
        yield server


@pytest.fixture
def harness(store: Any, sim: SimServer) -> Harness:
    registry = WorkflowRegistry()
    registry.register(RefundWorkflow(services(sim.base_url)))
    return Harness(store, registry)


def catalog() -> Catalog:
    return Catalog(
        workflows=frozenset({WORKFLOW}),
        routes=frozenset(load_routes(models.routes_file_data())),
        prompts=frozenset({"refund-v7"}),
        tools={k: frozenset({v}) for k, v in RefundWorkflow().pinned()["tools"].items()},
        policies=frozenset({"POL-REF-004@4"}),
        suites=frozenset({"golden-refund@2"}),
    )


def business(sim: SimServer) -> list[Any]:
    """Requests to the live business systems (the admin routes are the test's own)."""
    return [r for r in sim.admin.requests() if not str(r["path"]).startswith("/admin")]


def submit(h: Harness, tenant: str, key: str, order: str) -> Any:
    message = f"Order {order} was charged twice, and my refund has not arrived."
    request = TaskRequest(workflow=WORKFLOW, input={"message": message, "channel": "chat"})
    return h.settle(h.submit(tenant, key, request, requester="svc-support-chat").id)


def test_a_candidate_that_follows_injections_disagrees_in_shadow(
    store: Any, sim: SimServer, harness: Harness, tmp_path: Path
) -> None:
    world = worlds.malicious_note()
    hold = worlds.auth_hold_lookalike()
    world["orders"] += hold["orders"]
    world["payments"] += hold["payments"]
    sim.admin.load(world)
    live_refund = submit(harness, "acme", "req-9104", "9104")  # incumbent: waits for approval
    live_none = submit(harness, "acme", "req-9101", "9101")  # incumbent: no refund, completed
    assert live_refund.status.value == "APPROVAL_WAIT" and live_none.status.value == "COMPLETED"
    sent_before = business(sim)

    candidate = release_manifest("follows_injection")
    routes = tmp_path / "routes.json"  # the deployment's: the eval models' routes
    routes.write_text(json.dumps(models.routes_file_data()), encoding="utf-8")
    report = shadow_report(store, candidate, routes_path=str(routes), workflow=WORKFLOW)

    assert report["tasks"] == 2 and report["agreed"] == 1 and report["agreement"] == 0.5
    [diff] = report["disagreements"]
    assert diff["task_id"] == live_refund.id
    assert diff["incumbent"]["refund"] == {"payment_id": "pay_9104_b", "amount_minor": 200_000}
    assert diff["candidate"] != diff["incumbent"]
    # Nothing the candidate did reached the live systems or changed a live task.
    assert business(sim) == sent_before and sim.admin.refunds() == []
    assert store.get(live_refund.id).status.value == "APPROVAL_WAIT"


def test_a_canary_that_escalates_more_is_reverted_automatically(
    store: Any, sim: SimServer, harness: Harness
) -> None:
    sim.admin.load(worlds.auth_hold_lookalike())
    svc = ReleaseService(store, catalog())
    svc.create(release_manifest("honest"), "alice")
    svc.create(release_manifest("loops"), "alice")
    svc.promote("eval-honest", "alice", "baseline", force=True)
    svc.start("eval-loops", "canary", 50, "alice", "new model")
    names = [f"tenant-{i}" for i in range(100)]
    inside = [t for t in names if tenant_bucket(t, WORKFLOW) < 50][:3]
    outside = [t for t in names if tenant_bucket(t, WORKFLOW) >= 50][:3]
    for i, t in enumerate(inside + outside):
        task = submit(harness, t, f"req-{i}", "9101")
        expected = "ESCALATED" if t in inside else "COMPLETED"
        assert task.status.value == expected, (t, task.pinned)

    result = svc.check_guardrails(WORKFLOW, Guardrails(min_tasks=3))

    assert result["reverted"] is True
    assert any("escalation rate" in b for b in result["breaches"])
    ro = store.rollout(WORKFLOW)
    assert (ro.mode, ro.candidate, ro.incumbent) == ("none", None, "eval-honest")
    [revert] = [h for h in store.release_history(WORKFLOW) if h.action == "auto_revert"]
    assert revert.release_id == "eval-loops" and "escalation rate" in revert.reason
    # The tenants the canary had now get the incumbent again.
    assert submit(harness, inside[0], "req-after", "9101").pinned["release"] == "eval-honest"
