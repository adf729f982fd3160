"""Schedules spread over processes: each takes chunks of seeds and runs them with its own
database (`run.explore`); a schedule depends on its seed alone, so the split changes nothing
but the time. On Postgres the run migrates one template first, which every chunk copies, and
drops it at the end (`databases.for_run`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from agent_jobs.simulation import mutants
from agent_jobs.simulation.databases import SQLITE, Database, for_run
from agent_jobs.simulation.run import DEFAULT_ACTIONS, Summary, explore

CHUNK = 25


def _chunk(
    seeds: Sequence[int],
    *,
    scenarios: Sequence[str],
    actions: int,
    mutant: str | None,
    stop: bool,
    database: Database,
) -> Summary:
    with mutants.active(mutant):
        return explore(
            seeds, scenarios=scenarios, actions=actions, stop_at_first=stop, database=database
        )


def explore_parallel(
    first_seed: int,
    schedules: int,
    *,
    scenarios: Sequence[str] = ("example",),
    actions: int = DEFAULT_ACTIONS,
    jobs: int = 1,
    mutant: str | None = None,
    stop_at_first: bool = True,
    progress: Callable[[int, int, float], None] | None = None,
    database: Database = SQLITE,
) -> Summary:
    """Seeds `first_seed` .. `first_seed + schedules - 1`; with `stop_at_first`, the failure
    reported is the one of the lowest seed among those run."""
    with for_run(database) as prepared:
        return _explore(
            first_seed,
            schedules,
            scenarios=scenarios,
            actions=actions,
            jobs=jobs,
            mutant=mutant,
            stop_at_first=stop_at_first,
            progress=progress,
            database=prepared,
        )


def _explore(
    first_seed: int,
    schedules: int,
    *,
    scenarios: Sequence[str],
    actions: int,
    jobs: int,
    mutant: str | None,
    stop_at_first: bool,
    progress: Callable[[int, int, float], None] | None,
    database: Database,
) -> Summary:
    started = time.perf_counter()
    seeds = list(range(first_seed, first_seed + schedules))
    chunks = [seeds[i : i + CHUNK] for i in range(0, len(seeds), CHUNK)]
    total = Summary()
    job: dict[str, Any] = {
        "scenarios": scenarios,
        "actions": actions,
        "mutant": mutant,
        "stop": stop_at_first,
        "database": database,
    }

    def report() -> None:
        total.seconds = time.perf_counter() - started
        if progress is not None:
            progress(total.schedules, len(total.failures), total.per_second)

    if jobs == 1:
        for chunk in chunks:
            total.add(_chunk(chunk, **job))
            report()
            if total.failures and stop_at_first:
                break
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            pending: set[Future[Summary]] = set()
            queue = list(chunks)
            while queue or pending:
                while queue and len(pending) < jobs * 2 and not (total.failures and stop_at_first):
                    chunk = queue.pop(0)
                    pending.add(pool.submit(_chunk, chunk, **job))
                if not pending:
                    break
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    total.add(future.result())
                report()
    total.failures.sort(key=lambda f: f.seed)
    total.seconds = time.perf_counter() - started
    return total
