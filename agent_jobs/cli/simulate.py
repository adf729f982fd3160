"""`agent-jobs simulate`: the deterministic simulator (`agent_jobs.simulation`) as a command.

    agent-jobs simulate --schedules 2000            # seeds 1..2000 (or --seed S: S..S+N-1)
    agent-jobs simulate --seed 1234 --schedules 1   # one schedule; --trace prints it whole
    agent-jobs simulate --mutant skip_reconcile     # a deliberate bug: how soon is it caught?
    agent-jobs simulate --database postgres --database-url postgresql://u@host/postgres
                                                    # on Postgres: its own aj_sim_* databases

A failing schedule prints its seed, the invariant it broke and the command that replays it,
then shrinks it (unless --no-shrink) to a short trace. Exit 1 on a failure, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import TYPE_CHECKING, Any

from agent_jobs.core.errors import InvalidInput

if TYPE_CHECKING:
    from agent_jobs.simulation.databases import Database


def cmd_simulate(args: argparse.Namespace) -> int:
    from agent_jobs.simulation import mutants  # noqa: PLC0415 - the runtime loads when run
    from agent_jobs.simulation.parallel import explore_parallel  # noqa: PLC0415
    from agent_jobs.simulation.scenarios import SCENARIOS  # noqa: PLC0415

    if args.schedules < 1 or args.schedules > 10_000_000:
        raise InvalidInput("--schedules: from 1 to 10,000,000")
    if not 1 <= args.jobs <= 64:
        raise InvalidInput("--jobs: from 1 to 64")
    if not 1 <= args.actions <= 10_000:
        raise InvalidInput("--actions: from 1 to 10,000")
    if args.scenario not in (*SCENARIOS, "all"):
        raise InvalidInput(f"--scenario: one of {', '.join(SCENARIOS)}, all")
    if args.mutant is not None and args.mutant not in mutants.MUTANTS:
        raise InvalidInput(f"--mutant: one of {', '.join(mutants.MUTANTS)}")
    database = _database(args)
    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    scenarios = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    print(
        f"simulate: seeds {seed}..{seed + args.schedules - 1}, scenario {args.scenario}, "
        f"{args.actions} actions a schedule, {args.jobs} process(es), on {database.kind}"
        + (f", mutant {args.mutant}" if args.mutant else ""),
        file=sys.stderr,
    )
    last = [time.monotonic()]

    def progress(done: int, failures: int, per_s: float) -> None:
        if time.monotonic() - last[0] >= 5 or done == args.schedules:
            last[0] = time.monotonic()
            print(
                f"  {done}/{args.schedules} schedules, {per_s:.1f}/s, {failures} failing",
                file=sys.stderr,
                flush=True,
            )

    # A SIGTERM ends the run as Ctrl-C does, through every `finally`: the databases the run
    # made on a Postgres server are dropped (the pool's processes inherit the handler).
    signal.signal(signal.SIGTERM, _terminated)
    summary = explore_parallel(
        seed,
        args.schedules,
        scenarios=scenarios,
        actions=args.actions,
        jobs=args.jobs,
        mutant=args.mutant,
        stop_at_first=not args.keep_going,
        progress=progress,
        database=database,
    )
    result: dict[str, Any] = {
        "seed": seed,
        "database": database.kind,
        "schedules": summary.schedules,
        "seconds": round(summary.seconds, 2),
        "schedules_per_second": round(summary.per_second, 1),
        "steps": summary.steps,
        "sends_checked": summary.sends,
        "faults_injected": summary.faults,
        "failures": [
            {
                "seed": f.seed,
                "scenario": f.scenario,
                "invariant": f.invariant,
                "replay": _replay(f, args, database),
            }
            for f in summary.failures
        ],
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{summary.schedules} schedules in {summary.seconds:.1f} s "
            f"({summary.per_second:.1f}/s): {summary.steps} steps, {summary.sends} sends "
            f"checked, {summary.faults} faults injected, {len(summary.failures)} failing"
        )
    if args.trace and not summary.failures and args.schedules == 1:
        print("\n".join(_run_one(seed, scenarios[0], args).report.trace))
    if not summary.failures:
        return 0
    return _failed(summary.failures[0], args, database)


def _replay(failure: Any, args: argparse.Namespace, database: Database) -> str:
    """The command that replays one failing schedule, with its trace."""
    mutant_flag = f" --mutant {args.mutant}" if args.mutant else ""
    database_flag = ""
    if database.url is not None:
        from agent_jobs.store.engine import shown_url  # noqa: PLC0415

        database_flag = f" --database postgres --database-url {shown_url(database.url)}"
    return (
        f"agent-jobs simulate --seed {failure.seed} --schedules 1 "
        f"--scenario {failure.scenario}{mutant_flag}{database_flag} --trace"
    )


def _failed(first: Any, args: argparse.Namespace, database: Database) -> int:
    """The first failure: the command that replays it, and its shrunk trace (on stderr under
    --json, whose stdout is the JSON alone)."""
    out = sys.stderr if args.json else sys.stdout
    print(
        f"FAILED: seed {first.seed} ({first.scenario}) broke {first.invariant}\n"
        f"replay: {_replay(first, args, database)}",
        file=out,
    )
    if not args.no_shrink:
        print("shrinking ...", file=sys.stderr)
        outcome = _run_one(first.seed, first.scenario, args)
        small = _run_one(first.seed, first.scenario, args, shrink_from=outcome)
        print(
            f"shrunk from {len(outcome.drawn)} choices to {len(small.drawn)}; its trace:", file=out
        )
        print("\n".join(small.report.trace), file=out)
    return 1


def _database(args: argparse.Namespace) -> Database:
    """Where the schedules run: SQLite, or a Postgres server (`--database-url`, else the
    configured database's server when that is Postgres)."""
    from agent_jobs.config import settings  # noqa: PLC0415
    from agent_jobs.simulation.databases import KINDS, SERVER_KINDS, Database  # noqa: PLC0415

    if args.database not in KINDS:
        raise InvalidInput(f"--database: one of {', '.join(KINDS)}")
    url = args.database_url
    if url is None and args.database in SERVER_KINDS:
        url = settings().database_url
    try:
        return Database(args.database, url)
    except ValueError as exc:
        raise InvalidInput(f"--database-url: {exc}") from None


def _terminated(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def _run_one(seed: int, scenario: str, args: argparse.Namespace, shrink_from: Any = None) -> Any:
    """One schedule (or the shrinking of `shrink_from`), with the run's mutant in place."""
    from agent_jobs.simulation import mutants  # noqa: PLC0415
    from agent_jobs.simulation.databases import open_databases  # noqa: PLC0415
    from agent_jobs.simulation.run import run_schedule, shrink  # noqa: PLC0415

    database = _database(args)
    with mutants.active(args.mutant):
        if shrink_from is not None:
            return shrink(shrink_from, scenario=scenario, actions=args.actions, database=database)
        databases = open_databases(database)
        try:
            return run_schedule(databases, seed, scenario=scenario, actions=args.actions)
        finally:
            databases.close()


def register(sub: Any) -> None:
    p = sub.add_parser(
        "simulate",
        help="run the deterministic simulator: schedules of faults, checked by the oracle",
        description="Run the real orchestrator, store, sweepers and levers under drawn faults "
        "(crashes, database errors, lost and repeated messages, throttling and lagging "
        "business systems, levers, approvals, cancels), one schedule a seed, and check the "
        "effect protocol's invariants on every send and at the end.",
    )
    p.add_argument("--seed", type=int, help="the first seed (default: from the clock, printed)")
    p.add_argument("--schedules", type=int, default=1000, help="how many (default 1000)")
    p.add_argument("--scenario", default="all", help="which workflows (default all)")
    p.add_argument("--actions", type=int, default=60, help="actions a schedule (default 60)")
    p.add_argument("--jobs", type=int, default=1, help="processes in parallel (default 1)")
    p.add_argument("--mutant", help="run with this deliberate bug in the effect path")
    p.add_argument(
        "--database",
        default="sqlite",
        help="sqlite (default) or postgres: the Postgres-only paths (one-statement "
        "compare-and-set, autocommit steps, prepared statements)",
    )
    p.add_argument(
        "--database-url",
        help="with --database postgres: a server the simulator creates its own databases on "
        "(aj_sim_*, dropped at the end); default the configured database's",
    )
    p.add_argument("--keep-going", action="store_true", help="do not stop at the first failure")
    p.add_argument("--no-shrink", action="store_true", help="do not shrink a failure")
    p.add_argument("--trace", action="store_true", help="with --schedules 1: print its trace")
    p.add_argument("--json", action="store_true", help="the summary as JSON")
    p.set_defaults(func=cmd_simulate)
