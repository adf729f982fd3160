"""The simulator's refund scenario (the refund workflow, its tools over HTTP) and tools scenario
(a declared agent with OpenAPI and MCP tools): each replays exactly from its seed, runs a batch
of schedules with every invariant holding while the business systems received sends, and
catches a mutant of the effect path."""

from __future__ import annotations

import asyncio

import pytest

from agent_jobs.simulation import mutants
from agent_jobs.simulation.run import Databases, Summary, explore, run_schedule
from agent_jobs.simulation.scenarios import SCENARIOS

# Sized for about 30 s on two idle cores (refund ~2 schedules/s, tools ~4/s).
SCHEDULES = {"refund": 24, "tools": 40}


@pytest.fixture(scope="module")
def databases() -> object:
    d = Databases()
    yield d
    d.close()


def test_both_run_with_every_scenario() -> None:
    assert {"refund", "tools"} <= set(SCENARIOS)


@pytest.mark.parametrize("scenario", ["refund", "tools"])
def test_a_seed_replays_its_schedule_exactly(databases: Databases, scenario: str) -> None:
    first = run_schedule(databases, 11, scenario=scenario)
    again = run_schedule(databases, 11, scenario=scenario)
    replayed = run_schedule(databases, 11, scenario=scenario, replay=first.drawn)
    assert not first.failed, first.report.trace
    assert first.report.steps > 3, first.report.trace
    assert again.report.trace == first.report.trace
    assert again.drawn == first.drawn
    assert replayed.report.trace == first.report.trace
    other = run_schedule(databases, 12, scenario=scenario)
    assert other.report.trace != first.report.trace, "the seed must matter"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("scenario", ["refund", "tools"])
def test_schedules_send_under_faults_and_every_invariant_holds(scenario: str) -> None:
    n = SCHEDULES[scenario]
    summary = explore(range(1, n + 1), scenarios=(scenario,))
    rate = f"{summary.seconds:.1f} s ({summary.per_second:.2f}/s)"
    print(f"\n{scenario}: {summary.schedules} schedules in {rate}, {summary.sends} sends")
    sends, faults = summary.sends, summary.faults
    failures = [f"seed {f.seed}: {f.detail}" for f in summary.failures[:3]]
    assert failures == [], [failures, f"replay: agent-jobs simulate --seed S --scenario {scenario}"]
    assert sends >= n // 4, "schedules that never send check nothing"
    assert faults > n, "schedules without faults prove little"


@pytest.mark.parametrize("scenario", ["refund", "tools"])
def test_a_send_before_its_intent_is_caught(databases: Databases, scenario: str) -> None:
    with mutants.active("send_before_intent"):
        caught = next(
            (
                o
                for seed in range(1, 40)
                if (o := run_schedule(databases, seed, scenario=scenario)).failed
            ),
            None,
        )
    assert caught is not None, f"send_before_intent not caught in {scenario} in 39 schedules"
    assert caught.invariant == "intent_first", caught.report.trace[-20:]


async def _explored_inside_a_running_loop(seeds: range) -> Summary:
    # Synchronously, from a coroutine: this thread has an event loop running meanwhile.
    return explore(seeds, scenarios=("tools",))


def test_tools_send_alike_from_a_thread_running_an_event_loop() -> None:
    # Its MCP exchanges start an event loop of their own; on a thread that already runs one
    # (Playwright's sync API leaves the main thread so), every call used to fail as an
    # unreachable procurement: schedules passed, sending nothing.
    seeds = range(1, 9)
    alone = explore(seeds, scenarios=("tools",))
    inside = asyncio.run(_explored_inside_a_running_loop(seeds))
    assert alone.sends > 0
    assert (inside.sends, inside.steps, inside.faults) == (alone.sends, alone.steps, alone.faults)
    assert inside.failures == alone.failures == []
