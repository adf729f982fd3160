"""The release gate evaluates the candidate it names: five kinds of broken candidate, each run
through `evals.gate.evaluate` (its own process, a real embedded worker, the simulator) on a few
cases chosen to hit its break, and stopped; the same cases pass for a sound candidate.

Before the gate read the candidate (it ran the suite under releases of its own making from the
shipped route, prompt and policy), every one of these passed. The full suites are commands
(`agent-jobs release eval ID`, `make eval`); the promote rule is tested in
tests/contract/test_releases.py."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from agent_jobs.evals import gate, models
from agent_jobs.evals.runner import release_manifest
from agent_jobs.gateway.routes import DEFAULT_ROUTE_CONFIG
from agent_jobs.releases import Manifest

pytestmark = [pytest.mark.slow]

# Retries after a provider error are paced by the backoff; the gate judges the outcome, not
# the wait, so its worker retries quickly here.
PACING = {"AGENT_JOBS_RETRY_BASE_S": "0.05", "AGENT_JOBS_RETRY_MAX_S": "0.2"}
DOWN_ROUTE = "support-tier2-down@2026-03"
REGRESSED_ROUTE = "support-tier2@2026-04"


@pytest.fixture(scope="module")
def routes_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The deployment's routes file: the eval models' routes, a route whose provider is down
    (nothing listens on its port) and a new version of the default route with a call budget
    too small for a refund (a configuration regression)."""
    data = models.routes_file_data()
    down = copy.deepcopy(DEFAULT_ROUTE_CONFIG)
    down["name"] = "support-tier2-down"
    down["primary"]["provider"] = down["fallback"]["provider"] = "down"
    data["providers"]["down"] = {
        "type": "openai_compat",
        "base_url": "http://127.0.0.1:9/v1",  # discard port: connection refused
        "api_key_env": None,
        "response_format": "json_object",
    }
    regressed = copy.deepcopy(DEFAULT_ROUTE_CONFIG)
    regressed["version"] = "2026-04"
    regressed["budgets"]["max_calls_per_task"] = 2
    data["routes"] += [down, regressed]
    path = tmp_path_factory.mktemp("deployment") / "routes.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def candidate(rid: str, **changes: Any) -> Manifest:
    return Manifest.parse({**release_manifest("honest"), "release_id": rid, **changes})


def run(routes_file: str, m: Manifest, *cases: str) -> dict[str, Any]:
    return gate.evaluate(m, routes_path=routes_file, runs=1, cases=cases, pacing=PACING)


def failures(report: dict[str, Any]) -> dict[str, list[str]]:
    return {
        c["case"]: c["failures"]
        for r in report["suites"].values()
        for c in r["cases"]
        if not c["passed"]
    }


BREAKS: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    # Keeps proposing the refund the policy denies; the call budget stops it, escalated.
    "looping-model": ({"model_route": models.route_key("loops")}, ("auth_hold_not_refunded",)),
    # Does what text in an order note or a retrieved passage asks.
    "follows-injection": (
        {"model_route": models.route_key("follows_injection")},
        ("malicious_note", "double_capture-order_note-more-p0-honest"),
    ),
    "provider-down": ({"model_route": DOWN_ROUTE}, ("both_captured_refund_one",)),
    # The superseded bundle (approval from INR 1,500) with autonomy up to its threshold: an
    # INR 1,200 refund executes with no person asked.
    "policy-above-threshold": (
        {
            "policy_bundle": "POL-REF-004@3",
            "rollout": {"flags": {"auto_execute_under_minor": 150_000}},
        },
        ("approval_1200_rejected_by_lead",),
    ),
    "config-regression": ({"model_route": REGRESSED_ROUTE}, ("both_captured_refund_one",)),
}


def test_a_sound_candidate_passes_the_cases_the_broken_ones_fail(routes_file: str) -> None:
    cases = sorted({c for _, cs in BREAKS.values() for c in cs})
    report = run(routes_file, candidate("sound"), *cases)
    assert report["overall"]["gate"] == "pass", failures(report)
    assert report["overall"]["cases"] == len(cases)
    assert report["manifest_hash"] == candidate("sound").content_hash()
    assert report["complete"] is False  # a subset: recorded, never unlocks promote


@pytest.mark.parametrize("kind", sorted(BREAKS))
def test_a_broken_candidate_is_stopped(routes_file: str, kind: str) -> None:
    changes, cases = BREAKS[kind]
    m = candidate(kind, **changes)
    report = run(routes_file, m, *cases)
    assert report["overall"]["gate"] == "fail", report["overall"]
    assert report["manifest_hash"] == m.content_hash()
    failed = failures(report)
    assert failed, report
    if kind == "policy-above-threshold":
        [problems] = failed.values()
        assert any("without approval" in p for p in problems), problems
    if kind in ("looping-model", "provider-down", "config-regression"):
        assert all(any("ended" in p for p in ps) for ps in failed.values()), failed


def test_a_route_the_deployment_does_not_define_is_refused(routes_file: str) -> None:
    with pytest.raises(gate.GateError, match="not in this deployment's routes"):
        run(routes_file, candidate("nowhere", model_route="support-tier9@2030-01"))


def test_the_eval_process_gets_no_production_variable() -> None:
    env = {"AGENT_JOBS_DATABASE_URL": "postgresql://prod", "AGENT_JOBS_BROKER_URL": "redis://p"}
    assert gate.child_environ({**env, "LANG": "C.UTF-8"}) == {"LANG": "C.UTF-8"}
