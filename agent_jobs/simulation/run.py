"""Running schedules: one from a seed (or a recorded choice sequence), many in a row, and the
shrinking of a failing one to a short trace.

Each schedule gets a database of its own, fresh from a migrated template (`databases`: SQLite
by default, or Postgres), and the same three workers, broker and systems built afresh, so
nothing carries over between schedules but the template.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from agent_jobs.simulation.choices import Choices
from agent_jobs.simulation.databases import (
    SQLITE,
    Database,
    Databases,
    ScheduleDatabases,
    open_databases,
)
from agent_jobs.simulation.oracle import Violation
from agent_jobs.simulation.scenarios import SCENARIOS, ExampleScenario
from agent_jobs.simulation.world import Report, World

__all__ = ["Databases", "Outcome", "Summary", "explore", "run_schedule", "shrink"]

DEFAULT_ACTIONS = 60


@dataclass
class Outcome:
    seed: int
    report: Report
    violation: Violation | None
    drawn: list[int]
    error: BaseException | None = None  # the simulator itself failed (not an invariant)

    @property
    def failed(self) -> bool:
        return self.violation is not None or self.error is not None

    @property
    def invariant(self) -> str:
        if self.violation is not None:
            return self.violation.invariant
        return f"crash:{type(self.error).__name__}" if self.error is not None else ""


def run_schedule(
    databases: ScheduleDatabases,
    seed: int,
    *,
    scenario: str = "example",
    actions: int = DEFAULT_ACTIONS,
    replay: Sequence[int] | None = None,
) -> Outcome:
    choices = Choices(seed, replay)
    with databases.fresh() as store, _quiet_logs():
        made = SCENARIOS[scenario]()
        if databases.autocommit_steps and isinstance(made, ExampleScenario):
            made.quick_payout = True
        world = World(
            seed,
            store,
            made,
            choices,
            databases.transactions,
            crash_after_commit=databases.autocommit_steps,
        )
        databases.clock = world.clock
        try:
            report = world.run(actions)
            outcome = Outcome(seed, report, None, choices.drawn)
        except Violation as v:
            world.trace(f"VIOLATION {v}")
            outcome = Outcome(seed, world.report, v, choices.drawn)
        except Exception as exc:  # the simulator or the runtime broke in a way it should not
            world.trace(f"ERROR {type(exc).__name__}: {exc}")
            outcome = Outcome(seed, world.report, None, choices.drawn, error=exc)
        failure = databases.machine_failure()
        if failure is not None:  # neither a pass nor the runtime's failure: say so
            world.trace(f"ERROR {failure}")
            return Outcome(seed, world.report, None, choices.drawn, error=MachineFailure(failure))
        return outcome


class MachineFailure(RuntimeError):
    """The machine, not the schedule, failed a run (the database server refused a connection):
    its outcome is not the seed's."""


@dataclass(frozen=True)
class Failure:
    seed: int
    scenario: str
    invariant: str
    detail: str


@dataclass
class Summary:
    schedules: int = 0
    seconds: float = 0.0
    steps: int = 0
    sends: int = 0
    faults: int = 0
    failures: list[Failure] = field(default_factory=list)

    @property
    def per_second(self) -> float:
        return self.schedules / self.seconds if self.seconds else 0.0

    def add(self, other: Summary) -> None:
        self.schedules += other.schedules
        self.steps += other.steps
        self.sends += other.sends
        self.faults += other.faults
        self.failures.extend(other.failures)


def scenario_for(seed: int, scenarios: Sequence[str]) -> str:
    """The scenarios take turns by seed, so a seed names its schedule whole."""
    return scenarios[seed % len(scenarios)]


def explore(
    seeds: Sequence[int],
    *,
    scenarios: Sequence[str] = ("example",),
    actions: int = DEFAULT_ACTIONS,
    stop_at_first: bool = False,
    progress: Callable[[Summary], None] | None = None,
    database: Database = SQLITE,
) -> Summary:
    """Run one schedule a seed, in this process."""
    summary = Summary()
    databases = open_databases(database)
    started = time.perf_counter()
    try:
        for seed in seeds:
            scenario = scenario_for(seed, scenarios)
            outcome = run_schedule(databases, seed, scenario=scenario, actions=actions)
            summary.schedules += 1
            summary.steps += outcome.report.steps
            summary.sends += outcome.report.sends
            summary.faults += sum(outcome.report.faults.values())
            if outcome.failed:
                detail = str(outcome.violation or outcome.error)[:300]
                summary.failures.append(Failure(seed, scenario, outcome.invariant, detail))
                if stop_at_first:
                    break
            summary.seconds = time.perf_counter() - started
            if progress is not None:
                progress(summary)
    finally:
        databases.close()
    summary.seconds = time.perf_counter() - started
    return summary


def shrink(
    outcome: Outcome,
    *,
    scenario: str = "example",
    actions: int = DEFAULT_ACTIONS,
    budget: int = 300,
    database: Database = SQLITE,
) -> Outcome:
    """The shortest, simplest choice sequence found (within `budget` runs) that still breaks
    the same invariant: chunks deleted, then values lowered toward 0 (the plain choice)."""
    databases = open_databases(database)
    best = outcome
    runs = 0

    def attempt(candidate: list[int]) -> bool:
        nonlocal best, runs
        runs += 1
        tried = run_schedule(
            databases, outcome.seed, scenario=scenario, actions=actions, replay=candidate
        )
        if tried.failed and tried.invariant == outcome.invariant:
            # What the run actually drew is the sequence to keep (past the end it drew 0s).
            best = tried
            return True
        return False

    try:
        size = max(1, len(best.drawn) // 2)
        while size >= 1 and runs < budget:
            i = 0
            changed = False
            while i < len(best.drawn) and runs < budget:
                candidate = best.drawn[:i] + best.drawn[i + size :]
                if not attempt(candidate):
                    i += size
                else:
                    changed = True
            if not changed:
                size //= 2
        i = 0
        while i < len(best.drawn) and runs < budget:
            value = best.drawn[i]
            if value > 0:
                for smaller in (0, value // 2, value - 1):
                    if smaller < value and attempt(
                        [*best.drawn[:i], smaller, *best.drawn[i + 1 :]]
                    ):
                        break
            i += 1
    finally:
        databases.close()
    return best


@contextmanager
def _quiet_logs() -> Iterator[None]:
    """The runtime logs every failure it handles; a schedule injects hundreds on purpose."""
    root = logging.getLogger("agent_jobs")
    level = root.level
    root.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        root.setLevel(level)
