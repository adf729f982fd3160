"""The two-effect agent under the deterministic simulator (`simulation/two_effects.py`): every
send of either effect is judged by the oracle (intent first, no resend on a guess, authorised
by the policy stated apart, levers) and, after healing, each effect applied once and recorded.
A mutant agent that skips the approval of an expensive replacement is caught."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from agent_jobs.simulation import scenarios
from agent_jobs.simulation import two_effects as te
from agent_jobs.simulation.run import Databases, run_schedule
from agent_jobs.store import approval_groups, transition


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The scenario registered under `two_effects`; counts what the two systems applied."""
    monkeypatch.setitem(scenarios.SCENARIOS, "two_effects", te.TwoEffectsScenario)
    applied: Counter[str] = Counter()
    original = te.TwoEffectsScenario.applied

    def counted(self: te.TwoEffectsScenario) -> Any:
        found = original(self)
        applied.update(k.partition(":")[0] for k in found)
        return found

    monkeypatch.setattr(te.TwoEffectsScenario, "applied", counted)
    return applied


def test_two_effects_hold_every_invariant_under_faults(registered: Counter[str]) -> None:
    databases = Databases()
    try:
        outcomes = [run_schedule(databases, seed, scenario="two_effects") for seed in range(12)]
    finally:
        databases.close()
    failed = [
        (o.seed, o.invariant, str(o.violation or o.error)[:200]) for o in outcomes if o.failed
    ]
    assert failed == []
    # Both effects were reached, the second in several schedules, under drawn faults.
    assert registered["disable"] >= 5 and registered["replace"] >= 3, registered
    assert sum(sum(o.report.faults.values()) for o in outcomes) > 0


def test_a_replacement_ordered_without_its_approval_is_caught(
    registered: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    built = te.laptop_agent

    def no_threshold(fleet: te.Fleet, *args: Any, **kwargs: Any) -> Any:
        agent = built(fleet, *args, **kwargs)
        agent.policy = replace(agent.policy, thresholds=())
        return agent

    monkeypatch.setattr(te, "laptop_agent", no_threshold)
    databases = Databases()
    try:
        caught = next(
            (
                o
                for seed in range(30)
                if (o := run_schedule(databases, seed, scenario="two_effects")).failed
            ),
            None,
        )
    finally:
        databases.close()
    assert caught is not None and caught.invariant == "authorised", caught
    assert "replace:" in str(caught.violation)


def test_one_approval_of_a_plan_holds_every_invariant_under_faults(
    registered: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seeds 2 and 3 of every four run the agent with `approve_plan`: a plan that needs a person
    is one approval of both effects, a grant per action hash used at its own turn. The oracle
    judges every send as above (the order only after the disable applied, its grant live and
    consumed), and the systems applied each effect once."""
    groups: list[str] = []
    original = approval_groups.request_members  # what transition calls, by its own name

    def counted(conn: Any, task: Any, req: Any) -> None:
        groups.append(req.approval_id)
        original(conn, task, req)

    monkeypatch.setattr(transition, "request_members", counted)
    databases = Databases()
    try:
        seeds = [s for s in range(40) if s % 4 >= 2]
        outcomes = [run_schedule(databases, seed, scenario="two_effects") for seed in seeds]
    finally:
        databases.close()
    failed = [
        (o.seed, o.invariant, str(o.violation or o.error)[:200]) for o in outcomes if o.failed
    ]
    assert failed == []
    assert len(groups) >= 3, groups  # plans asked as one, under drawn faults
    assert registered["replace"] >= 3, registered  # and orders sent on their group's grant
