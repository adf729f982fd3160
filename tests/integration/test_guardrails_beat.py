"""Guardrails run by themselves: beat's entry checks the canary every
AGENT_JOBS_GUARDRAILS_INTERVAL_S; a canary whose model degrades mid-run is reverted, audited with
its reason, and the tasks it escalated are listed and can be replayed on the incumbent once.

Before, the guardrails ran only when someone typed `agent-jobs release guardrails`: the canary
stayed live, the bench below was never reverted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.evals import gate
from agent_jobs.evals.runner import release_manifest
from agent_jobs.releases.rollout import Guardrails, ReleaseService, tenant_bucket
from agent_jobs.sim import worlds
from agent_jobs.sim.server import SimServer
from agent_jobs.store.releases import ReleaseConflict
from agent_jobs.testing import Harness
from agent_jobs.workflows.refund import WORKFLOW
from tests.integration.test_rollout import catalog, harness, services, sim, submit

__all__ = ["harness", "services", "sim"]  # the fixtures, imported for their names


@pytest.mark.slow
def test_beat_reverts_a_canary_whose_model_degrades() -> None:
    """The bench's scenario in a process of its own (its Celery app configured there, with a
    2 s interval): nobody calls the guardrails, beat does."""
    out = subprocess.run(
        [sys.executable, "-m", "agent_jobs.cli", "bench", "guardrails", "--interval", "2",
         "--timeout", "40", "--json"],
        env={**gate.child_environ(os.environ), "PYTHONPATH": str(Path.cwd())},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["reverted"] is True and r["revert_actor"] == "guardrails (beat)"
    assert "guardrail breach: escalation rate" in r["revert_reason"]
    # From the database's timestamps (the audit row's): within the 30 s of the breach.
    breach, reverted = (datetime.fromisoformat(r[k]) for k in ("breach_at", "reverted_at"))
    assert 0 <= (reverted - breach).total_seconds() <= 30, r
    assert r["escalated_on_canary"] == len(r["escalated_task_ids"]) >= 1


def test_a_reverted_canary_s_escalations_are_listed_and_replayed_once(
    store: Any, sim: SimServer, harness: Harness, capsys: pytest.CaptureFixture[str]
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
    escalated = [submit(harness, t, f"req-{t}", "9101") for t in inside]
    for t in outside:
        submit(harness, t, f"req-{t}", "9101")
    assert {t.status.value for t in escalated} == {"ESCALATED"}

    # Beat's task checks every workflow with a canary.
    [(workflow, result)] = svc.check_all_guardrails(Guardrails(min_tasks=3)).items()
    assert workflow == WORKFLOW and result["reverted"] is True

    listed = svc.escalated_tasks("eval-loops")
    assert sorted(t.task_id for t in listed) == sorted(t.id for t in escalated)
    assert svc.escalated_tasks("eval-honest") == []

    first, created = svc.replay_on_incumbent(
        harness.orchestrator, escalated[0].id, "alice", "canary reverted"
    )
    assert created is True and first.pinned["release"] == "eval-honest"
    assert harness.settle(first.id).status.value == "COMPLETED"
    again, created_again = svc.replay_on_incumbent(
        harness.orchestrator, escalated[0].id, "bob", "again"
    )
    assert created_again is False and again.id == first.id  # once: the second is refused
    [audit] = [h for h in store.release_history(WORKFLOW) if h.action == "replay"]
    assert audit.actor == "alice" and audit.reason == "canary reverted"
    assert audit.data == {
        "task_id": escalated[0].id,
        "from": "eval-loops",
        "replay_task_id": first.id,
    }
    # A task of the incumbent itself has nothing to be replayed on.
    honest = submit(harness, outside[0], "req-honest-esc", "9101")
    with pytest.raises(ReleaseConflict):
        svc.replay_on_incumbent(harness.orchestrator, honest.id, "alice", "no")


def test_incidents_tasks_by_release_and_release_replay_from_the_cli(
    sqlite_store: Any, sim: SimServer, tmp_path: Path
) -> None:
    """The commands as an operator types them, on the store's database."""
    from agent_jobs.orchestrator.registry import WorkflowRegistry
    from agent_jobs.workflows.refund import RefundWorkflow

    registry = WorkflowRegistry()
    registry.register(RefundWorkflow(services(sim.base_url)))
    h = Harness(sqlite_store, registry)
    sim.admin.load(worlds.auth_hold_lookalike())
    svc = ReleaseService(sqlite_store, catalog())
    svc.create(release_manifest("honest"), "alice")
    svc.create(release_manifest("loops"), "alice")
    svc.promote("eval-honest", "alice", "baseline", force=True)
    svc.start("eval-loops", "canary", 100, "alice", "new model")
    bad = submit(h, "acme", "req-1", "9101")
    assert bad.status.value == "ESCALATED"
    svc.check_guardrails(WORKFLOW, Guardrails(min_tasks=1))

    env = {
        **gate.child_environ(os.environ),
        "PYTHONPATH": str(Path.cwd()),
        "AGENT_JOBS_DATABASE_URL": str(sqlite_store.engine.url),
    }

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "agent_jobs.cli", *args],
            env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    listed = cli("incidents", "tasks", "--release", "eval-loops", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [t["task_id"] for t in json.loads(listed.stdout)] == [bad.id]
    once = cli("release", "replay", bad.id, "--reason", "canary reverted")
    assert once.returncode == 0 and "on eval-honest" in once.stdout, once.stderr
    twice = cli("release", "replay", bad.id, "--reason", "again")
    assert twice.returncode == 1 and "already replayed" in twice.stderr
