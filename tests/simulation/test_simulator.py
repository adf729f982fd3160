"""The simulator itself: a seed names its schedule whole (it replays exactly, from the seed or
from its recorded choices), a failure shrinks to a short trace that still fails, the oracle's
resend rule, the command line, and the CI run (issue 29: at least 2,000 schedules)."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_jobs.cli import main
from agent_jobs.simulation import mutants
from agent_jobs.simulation.oracle import resend_allowed
from agent_jobs.simulation.parallel import explore_parallel
from agent_jobs.simulation.run import Databases, run_schedule, shrink
from agent_jobs.simulation.systems import Call

# CI's run: this many schedules, seeds from AGENT_JOBS_TEST_SIM_SEED (default 1), the
# scenarios taking turns, in two processes.
SCHEDULES = int(os.environ.get("AGENT_JOBS_TEST_SIM_SCHEDULES", "2000"))
FIRST_SEED = int(os.environ.get("AGENT_JOBS_TEST_SIM_SEED", "1"))


@pytest.fixture(scope="module")
def databases() -> object:
    d = Databases()
    yield d
    d.close()


@pytest.mark.parametrize("scenario", ["example", "agent"])
def test_a_seed_replays_its_schedule_exactly(databases: Databases, scenario: str) -> None:
    first = run_schedule(databases, 11, scenario=scenario)
    again = run_schedule(databases, 11, scenario=scenario)
    replayed = run_schedule(databases, 11, scenario=scenario, replay=first.drawn)
    assert first.report.steps > 3, first.report.trace
    assert again.report.trace == first.report.trace
    assert again.drawn == first.drawn
    assert replayed.report.trace == first.report.trace
    other = run_schedule(databases, 12, scenario=scenario)
    assert other.report.trace != first.report.trace, "the seed must matter"


def test_a_failure_shrinks_to_a_short_trace_that_still_fails(databases: Databases) -> None:
    with mutants.active("send_before_intent"):
        failing = next(
            o
            for seed in range(1, 60)
            if (o := run_schedule(databases, seed, scenario="example")).failed
        )
        small = shrink(failing, scenario="example", budget=150)
    assert failing.invariant == "intent_first"
    assert small.invariant == "intent_first"
    assert len(small.drawn) < len(failing.drawn)
    assert len(small.report.trace) <= len(failing.report.trace)
    assert any("VIOLATION intent_first" in line for line in small.report.trace)


def _call(seq: int, kind: str, answer: str) -> Call:
    return Call(seq, None, "ledger", kind, "k", "w", answer=answer)  # type: ignore[arg-type]


ANSWERS = {
    "send": ["applied", "replayed", "throttled", "rejected", "unavailable", "timeout_lost",
             "applied+timeout"],
    "lookup": ["found", "not_found", "failed"],
}  # fmt: skip


@given(
    st.lists(
        st.sampled_from([(k, a) for k, answers in ANSWERS.items() for a in answers]), max_size=8
    )
)
def test_a_key_may_be_sent_again_only_after_a_refusal_or_a_lookup_that_found_nothing(
    history: list[tuple[str, str]],
) -> None:
    calls = [_call(i, kind, answer) for i, (kind, answer) in enumerate(history)]
    sends = [c for c in calls if c.kind == "send"]
    if not sends:
        assert resend_allowed(calls)
        return
    last = sends[-1]
    later_not_found = any(
        c.kind == "lookup" and c.answer == "not_found" and c.seq > last.seq for c in calls
    )
    expected = last.answer in ("throttled", "rejected", "unavailable") or later_not_found
    assert resend_allowed(calls) is expected


def test_the_command_runs_schedules_and_says_what_it_checked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", "--seed", "5", "--schedules", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schedules"] == 4 and out["failures"] == []
    assert out["steps"] > 0 and out["faults_injected"] >= 0


def test_the_command_names_the_seed_and_the_replay_of_a_failure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["simulate", "--seed", "1", "--schedules", "60", "--scenario", "example",
                 "--mutant", "send_before_intent", "--no-shrink"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1
    assert "broke intent_first" in out
    assert "replay: agent-jobs simulate --seed" in out and "--mutant send_before_intent" in out


def test_json_output_is_json_alone_with_the_replay_of_each_failure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["simulate", "--seed", "4", "--schedules", "1", "--scenario", "example",
                 "--mutant", "send_before_intent", "--json"])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 1
    out = json.loads(captured.out)  # the failure's lines and its trace went to stderr
    (failure,) = out["failures"]
    assert failure["invariant"] == "intent_first"
    assert failure["replay"].startswith("agent-jobs simulate --seed 4 --schedules 1 ")
    assert "broke intent_first" in captured.err and "its trace:" in captured.err


# About 3 minutes on two idle cores; far more on a machine shared with other work, and the
# suite's 300 s per test is not a benchmark.
@pytest.mark.timeout(1500)
def test_ci_runs_thousands_of_schedules_and_every_invariant_holds() -> None:
    summary = explore_parallel(
        FIRST_SEED, SCHEDULES, scenarios=("example", "agent"), jobs=2, stop_at_first=False
    )
    print(
        f"\nsimulate: {summary.schedules} schedules in {summary.seconds:.1f} s "
        f"({summary.per_second:.1f}/s), {summary.steps} steps, {summary.sends} sends checked, "
        f"{summary.faults} faults injected"
    )
    assert summary.schedules == SCHEDULES
    assert summary.sends > SCHEDULES // 10, "schedules that never send check nothing"
    assert summary.faults > SCHEDULES, "schedules without faults prove little"
    assert summary.failures == [], [
        f"seed {f.seed} ({f.scenario}): {f.detail} — replay: agent-jobs simulate --seed "
        f"{f.seed} --schedules 1 --scenario {f.scenario} --trace"
        for f in summary.failures[:5]
    ]
