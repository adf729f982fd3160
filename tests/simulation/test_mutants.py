"""The mutants of the effect path are caught (issue 29): with the deliberate bug in place, the
simulator breaks an invariant within the mutant's budget of schedules, the scenarios taking
turns. Most start at seed 1, with a budget about three times what they took when measured;
those that take over a hundred schedules from seed 1 (README, Figures: "the simulator",
measured with `agent-jobs simulate --mutant NAME`, `example` and `agent` taking turns) are held
to a window before the seed that caught them, to keep CI's time. A runtime or simulator change
that reshuffles schedules may move those seeds: measure again and move the window. Mutants the
simulator does not catch yet are listed with why, so none is forgotten."""

from __future__ import annotations

import pytest

from agent_jobs.simulation.databases import Database
from agent_jobs.simulation.mutants import DEFECTS, MUTANTS
from agent_jobs.simulation.parallel import explore_parallel

# mutant -> (first seed, schedules)
BUDGET = {
    "terminal_keeps_lease": (1, 60),  # from seed 1: caught at 1
    "send_before_intent": (1, 60),  # at 4
    "approval_skipped": (1, 60),  # at 5
    "found_in_other_shape": (1, 60),  # at 8
    "resend_unauthorised": (1, 120),  # at 39
    "found_ignored": (1, 150),  # at 12
    "skip_reconcile": (1, 150),  # at 19
    "unknown_as_rejected": (1, 150),  # at 18
    "failed_lookup_as_not_found": (101, 120),  # from seed 1: caught at 137
    "no_epoch_fence": (301, 120),  # at 356 (a worker stalled past its lease commits late)
    "decision_dropped_while_leased": (341, 120),  # at 392 (D5: decision_wakes)
    "failed_effect_step_parks": (501, 120),  # at 564 (D1: a cancel while parked)
    "new_key_on_retry": (901, 120),  # at 954
}
# Mutants of the Postgres-only paths, run on Postgres (`--database postgres`), `example` alone:
# mutant -> (first seed, schedules).
POSTGRES_BUDGET = {
    # D3, half a transition: caught at 42 (then 83, 175), `records_with_rows`: the quick step
    # that asks for the payout's approval runs on a carried row, and a worker dies right after
    # its row committed alone, before its approval's insert.
    "carried_cas_split": (1, 126),
}
# Mutants the simulator does not catch yet, with why (none today: a mutant moves here only with
# the reason, so none is forgotten).
NOT_CAUGHT_YET: dict[str, str] = {}


def test_every_mutant_is_either_held_to_a_budget_or_listed_as_not_caught() -> None:
    assert set(BUDGET) | set(POSTGRES_BUDGET) | set(NOT_CAUGHT_YET) == set(MUTANTS)
    assert not set(BUDGET) & set(NOT_CAUGHT_YET)
    assert not set(POSTGRES_BUDGET) & (set(BUDGET) | set(NOT_CAUGHT_YET))
    assert set(DEFECTS.values()) <= set(MUTANTS)
    assert len(BUDGET) >= 10


@pytest.mark.timeout(900)
@pytest.mark.parametrize("mutant", sorted(BUDGET))
def test_the_simulator_catches_the_mutant(mutant: str) -> None:
    first, schedules = BUDGET[mutant]
    summary = explore_parallel(
        first, schedules, scenarios=("example", "agent"), jobs=2, mutant=mutant
    )
    assert summary.failures, (
        f"{mutant} survived seeds {first}..{first + schedules - 1}: run agent-jobs simulate "
        f"--mutant {mutant} --scenario all to see how soon it is caught now"
    )
    caught = summary.failures[0]
    print(f"\n{mutant}: caught at seed {caught.seed} ({caught.scenario}): {caught.invariant}")


@pytest.mark.postgres
@pytest.mark.timeout(900)
@pytest.mark.parametrize("mutant", sorted(POSTGRES_BUDGET))
def test_the_simulator_catches_the_postgres_mutant(mutant: str, pg_database: str) -> None:
    first, schedules = POSTGRES_BUDGET[mutant]
    summary = explore_parallel(
        first,
        schedules,
        scenarios=("example",),
        jobs=2,
        mutant=mutant,
        database=Database("postgres", pg_database),
    )
    assert summary.failures, (
        f"{mutant} survived seeds {first}..{first + schedules - 1} on Postgres: run "
        f"agent-jobs simulate --mutant {mutant} --scenario example --database postgres"
    )
    caught = summary.failures[0]
    print(f"\n{mutant}: caught at seed {caught.seed} ({caught.scenario}): {caught.invariant}")
