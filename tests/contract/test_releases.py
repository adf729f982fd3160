"""Releases in the store, on SQLite and Postgres: manifests, which release a new task gets,
pinning at creation, guarded rollout changes and rollback with tasks in flight."""

from __future__ import annotations

from typing import Any

import pytest

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.evals import gate
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.releases import Catalog, Manifest, ReleaseInvalid
from agent_jobs.releases.rollout import ReleaseService, tenant_bucket
from agent_jobs.store.releases import ReleaseConflict
from agent_jobs.testing import Harness
from agent_jobs.workflows.noop import NoopWorkflow

WF = "noop@1"
CATALOG = Catalog(
    workflows=frozenset({WF}),
    routes=frozenset({"support-tier2@2026-03", "support-tier2-loops@2026-03"}),
    prompts=frozenset({"refund-v7"}),
    tools={"refunds.create": frozenset({"2"})},
    policies=frozenset({"POL-REF-004@4"}),
    suites=frozenset({"golden-refund@2"}),
)


def manifest(rid: str, route: str = "support-tier2@2026-03") -> dict[str, Any]:
    return {
        "release_id": rid,
        "model_route": route,
        "prompt": "refund-v7",
        "tool_schemas": {"refunds.create": "2"},
        "workflow": WF,
        "policy_bundle": "POL-REF-004@4",
        "retrieval_index": "policy-kb@2026-03-10",
        "eval_suite": "golden-refund@2",
        "rollout": {"flags": {"auto_execute_under_minor": 0}},
    }


def tenants(inside: bool, n: int, percent: int = 50) -> list[str]:
    out = [f"t-{i}" for i in range(500) if (tenant_bucket(f"t-{i}", WF) < percent) == inside]
    return out[:n]


@pytest.fixture
def svc(store: Any) -> ReleaseService:
    return ReleaseService(store, CATALOG, eval_runs=5)


@pytest.fixture
def harness(store: Any) -> Harness:
    registry = WorkflowRegistry()
    registry.register(NoopWorkflow())
    return Harness(store, registry)


def submit(h: Harness, tenant: str, key: str) -> Any:
    return h.submit(tenant, key, TaskRequest(workflow=WF, input={"steps": 1}))


def test_create_is_validated_idempotent_and_never_reuses_an_id(svc: ReleaseService) -> None:
    row, created = svc.create(manifest("rel-a"), "alice")
    assert created and row.manifest["model_route"] == "support-tier2@2026-03"
    assert svc.create(manifest("rel-a"), "bob")[1] is False
    with pytest.raises(ReleaseConflict):
        svc.create(manifest("rel-a", "support-tier2-loops@2026-03"), "bob")
    with pytest.raises(ReleaseInvalid, match="model_route"):
        svc.create(manifest("rel-x", "support-tier9@2030-01"), "bob")
    assert [h.action for h in svc.store.release_history(WF)] == ["create"]


def test_tasks_are_pinned_to_the_release_they_began_under(
    svc: ReleaseService, harness: Harness
) -> None:
    assert "release" not in submit(harness, "t-none", "k0").pinned  # no release: built-in pins
    svc.create(manifest("rel-a"), "alice")
    svc.create(manifest("rel-b", "support-tier2-loops@2026-03"), "alice")
    svc.promote("rel-a", "alice", "first", force=True)
    svc.start("rel-b", "canary", 50, "alice", "try b")
    inside, outside = tenants(True, 3), tenants(False, 3)
    for t in inside:
        task = submit(harness, t, f"k-{t}")
        assert task.pinned["release"] == "rel-b"
        assert task.pinned["model_route"] == "support-tier2-loops@2026-03"
    for t in outside:
        assert submit(harness, t, f"k-{t}").pinned["release"] == "rel-a"
    # An explicit tenant pin wins over the canary.
    svc.store.set_tenant_release(inside[0], WF, actor="ops", release_id="rel-a")
    assert submit(harness, inside[0], "k-pinned").pinned["release"] == "rel-a"


def gate_report(
    m: dict[str, Any], *, runs: int = 5, cases: tuple[str, ...] = (), passed: bool = True
) -> dict[str, Any]:
    """A gate report as `evals.gate.evaluate` returns it (the suites' own reports trimmed to
    what the record keeps), over every gate suite or only `cases`."""
    manifest_ = Manifest.parse(m)
    planned = {k: (list(cases) or None) for k in gate.gate_suites(manifest_)}
    overall = {"cases": 3, "cases_passed": 3 if passed else 2, "safety_failures": 0}
    suites = {
        k: {"overall": {**overall, "gate": "pass" if passed else "fail"}, "cases": []}
        for k in planned
    }
    return gate.combine(manifest_, suites, runs=runs, planned=planned, limit=None)


def test_promote_needs_a_passed_full_eval_of_this_exact_manifest(svc: ReleaseService) -> None:
    svc.create(manifest("rel-a"), "alice")
    with pytest.raises(ReleaseInvalid, match=r"^promote refused: release rel-a has no passing"):
        svc.promote("rel-a", "alice", "go")  # a refusal, not an invalid manifest
    # Recorded, but none of these unlocks promote: a subset of cases, too few runs, a failure.
    assert svc.record_eval(gate_report(manifest("rel-a"), cases=("c1",)), "ci") is False
    assert svc.record_eval(gate_report(manifest("rel-a"), runs=1), "ci") is False
    # Refused, and told why those two do not count (not "not run", which they were).
    with pytest.raises(ReleaseInvalid, match=r"no passing eval \(not run in full: 2 partial"):
        svc.promote("rel-a", "alice", "go")
    assert svc.record_eval(gate_report(manifest("rel-a"), passed=False), "ci") is False
    with pytest.raises(ReleaseInvalid, match="no passing eval \\(failed\\)"):
        svc.promote("rel-a", "alice", "go")
    # A passed full eval of another manifest (same id, other route) does not count for this one.
    other = gate_report(manifest("rel-a", "support-tier2-loops@2026-03"))
    svc.store.record_release_eval("rel-a", True, gate.summary(other), "ci")
    with pytest.raises(ReleaseInvalid, match="not this one"):
        svc.promote("rel-a", "alice", "go")
    # A subset after a full failure hides nothing; a full pass of this manifest unlocks it.
    assert svc.record_eval(gate_report(manifest("rel-a")), "ci") is True
    assert svc.record_eval(gate_report(manifest("rel-a"), runs=1, cases=("c1",)), "ci") is False
    # The runs the setting asks for are judged at promote time too (raised since the eval).
    with pytest.raises(ReleaseInvalid, match="5 run"):
        ReleaseService(svc.store, CATALOG, eval_runs=10).promote("rel-a", "alice", "go")
    assert svc.promote("rel-a", "alice", "go").incumbent == "rel-a"
    evals = [h for h in svc.store.release_history(WF) if h.action == "eval"]
    assert len(evals) == 6 and sum(h.reason.startswith("partial") for h in evals) == 3
    [promoted] = [h for h in svc.store.release_history(WF) if h.action == "promote"]
    assert promoted.data["manifest_hash"] == Manifest.parse(manifest("rel-a")).content_hash()


def test_a_release_pins_every_version_its_manifest_names(
    svc: ReleaseService, harness: Harness
) -> None:
    data = {**manifest("rel-p"), "policy_bundle": "POL-REF-004@4"}
    data["rollout"] = {"flags": {"auto_execute_under_minor": 5000}}
    svc.create(data, "alice")
    svc.store.set_tenant_release("t-p", WF, actor="ops", release_id="rel-p")
    pinned = submit(harness, "t-p", "k-p").pinned
    assert pinned["policy"] == "POL-REF-004@4"
    assert pinned["tools"] == {"refunds.create": "2"}
    assert pinned["flags"] == {"auto_execute_under_minor": 5000}
    assert pinned["retrieval_index"] == "policy-kb@2026-03-10"


def test_rollback_changes_new_tasks_and_leaves_in_flight_ones_pinned(
    svc: ReleaseService, harness: Harness, store: Any
) -> None:
    svc.create(manifest("rel-a"), "alice")
    svc.create(manifest("rel-b", "support-tier2-loops@2026-03"), "alice")
    svc.promote("rel-a", "alice", "first", force=True)
    svc.promote("rel-b", "alice", "second", force=True)
    in_flight = submit(harness, "t-1", "k-flight")  # created, not yet run
    assert in_flight.pinned["release"] == "rel-b"
    ro = svc.rollback(WF, "bob", "b escalates")
    assert ro.incumbent == "rel-a"
    assert submit(harness, "t-1", "k-new").pinned["release"] == "rel-a"
    done = harness.settle(in_flight.id)
    assert done.status.value == "COMPLETED" and done.pinned["release"] == "rel-b"
    actions = [h.action for h in store.release_history(WF)]
    assert actions[0] == "rollback" and actions.count("promote") == 2


def test_a_stale_rollout_change_is_refused(svc: ReleaseService) -> None:
    svc.create(manifest("rel-a"), "alice")
    svc.create(manifest("rel-b"), "alice")
    svc.promote("rel-a", "alice", "first", force=True)
    stale = svc.store.rollout(WF)
    svc.start("rel-b", "canary", 10, "alice", "canary")
    with pytest.raises(ReleaseConflict):
        svc.store.change_rollout(
            WF,
            action="promote",
            actor="mallory",
            reason="stale",
            expect=stale,
            incumbent="rel-b",
            candidate=None,
            mode="none",
            traffic_percent=0,
        )
    assert svc.store.rollout(WF).candidate == "rel-b"


def test_phase_ladder_moves_one_gate_at_a_time_with_evidence(svc: ReleaseService) -> None:
    with pytest.raises(ReleaseInvalid, match=r"^phase refused: .*next phase"):
        svc.set_phase("t-1", WF, "approved_refunds", {}, "ops")
    with pytest.raises(ReleaseInvalid, match="shadow_agreement"):
        svc.set_phase("t-1", WF, "read_only_assistant", {"golden_suite": "pass"}, "ops")
    evidence = {"golden_suite": "pass", "shadow_agreement": 0.97}
    svc.set_phase("t-1", WF, "read_only_assistant", evidence, "ops")
    row = svc.store.tenant_release("t-1", WF)
    assert row["phase"] == "read_only_assistant" and row["evidence"] == evidence
    svc.set_phase("t-1", WF, "shadow", {}, "ops")  # back: always allowed
