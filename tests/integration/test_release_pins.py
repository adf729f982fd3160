"""A release's policy bundle and autonomy flag decide for the tasks pinned to it (they were
recorded and ignored: every task was decided under the current bundle with the operator's
autonomy only). On the real refund workflow, SQLite and Postgres."""

from __future__ import annotations

from typing import Any

import pytest

from agent_jobs.evals.runner import release_manifest
from agent_jobs.gateway import load_routes
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.releases import Catalog, Manifest, ReleaseInvalid
from agent_jobs.releases.rollout import ReleaseService
from agent_jobs.sim import worlds
from agent_jobs.sim.server import SimServer
from agent_jobs.testing import Harness
from agent_jobs.workflows.refund import WORKFLOW, RefundWorkflow
from tests.integration.test_rollout import business, services, sim, submit

__all__ = ["sim"]  # the simulator fixture, shared with test_rollout

CUSTOMER = ("cus_7001", "Dev Anand", "dev.anand@example.com")


def catalog() -> Catalog:
    from agent_jobs.evals import models

    return Catalog(
        workflows=frozenset({WORKFLOW}),
        routes=frozenset(load_routes(models.routes_file_data())),
        prompts=frozenset({"refund-v7"}),
        tools={k: frozenset({v}) for k, v in RefundWorkflow().pinned()["tools"].items()},
        policies=frozenset({"POL-REF-004@4", "POL-REF-004@3"}),
        suites=frozenset({"golden-refund@2"}),
    )


@pytest.fixture
def harness(store: Any, sim: SimServer) -> Harness:
    registry = WorkflowRegistry()
    registry.register(RefundWorkflow(services(sim.base_url)))
    return Harness(store, registry)


def release(store: Any, rid: str, tenant: str, **changes: Any) -> None:
    svc = ReleaseService(store, catalog())
    svc.create({**release_manifest("honest"), "release_id": rid, **changes}, "alice")
    store.set_tenant_release(tenant, WORKFLOW, actor="alice", release_id=rid)


def test_the_release_flag_makes_a_small_refund_ask_a_person(
    store: Any, sim: SimServer, harness: Harness
) -> None:
    # INR 500: under POL-REF-004@4's INR 1,000, so it runs alone without a release.
    small = worlds.double_capture("7001", CUSTOMER, amount=50_000)
    other = worlds.double_capture("7002", CUSTOMER, amount=50_000)
    sim.admin.load({**small, "orders": small["orders"] + other["orders"],
                    "payments": small["payments"] + other["payments"]})  # fmt: skip
    assert submit(harness, "no-release", "k1", "7001").status.value == "COMPLETED"
    release(store, "rel-ask", "asks", rollout={"flags": {"auto_execute_under_minor": 0}})

    task = submit(harness, "asks", "k2", "7002")

    assert task.pinned["flags"] == {"auto_execute_under_minor": 0}
    assert task.status.value == "APPROVAL_WAIT"
    [ap] = store.list_approvals("asks", task_id=task.id)
    assert "autonomy" in ap.reason and ap.policy_version == "POL-REF-004@4"


def test_the_release_policy_bundle_decides(store: Any, sim: SimServer, harness: Harness) -> None:
    # INR 1,200: needs a person under @4 (from INR 1,000), not under @3 (from INR 1,500).
    world = worlds.double_capture("7003", CUSTOMER, amount=120_000)
    sim.admin.load(world)
    release(
        store,
        "rel-v3",
        "old-policy",
        policy_bundle="POL-REF-004@3",
        rollout={"flags": {"auto_execute_under_minor": 150_000}},
    )

    task = submit(harness, "old-policy", "k3", "7003")

    assert task.pinned["policy"] == "POL-REF-004@3"
    assert task.status.value == "COMPLETED", task.last_error
    assert store.list_approvals("old-policy", task_id=task.id) == []
    assert [r["amount_minor"] for r in sim.admin.refunds()] == [120_000]
    assert any(r["path"] == "/refunds" for r in business(sim))


def test_a_manifest_cannot_raise_autonomy_above_its_bundle() -> None:
    data = {**release_manifest("honest"), "release_id": "rel-high"}
    data["rollout"] = {"flags": {"auto_execute_under_minor": 100_001}}
    with pytest.raises(ReleaseInvalid, match="above POL-REF-004@4's approval threshold"):
        catalog().check(Manifest.parse(data))
