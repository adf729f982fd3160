"""`agent-jobs simulate`: the deterministic simulator (`agent_jobs.simulation`) as a command.

    agent-jobs simulate --schedules 2000            # seeds 1..2000 (or --seed S: S..S+N-1)
    agent-jobs simulate --seed 1234 --schedules 1   # one schedule; --trace prints it whole
    agent-jobs simulate --mutant skip_reconcile     # a deliberate bug: how soon is it caught?

A failing schedule prints its seed, the invariant it broke and the command that replays it,
then shrinks it (unless --no-shrink) to a short trace. Exit 1 on a failure, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from agent_jobs.core.errors import InvalidInput


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
    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    scenarios = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    print(
        f"simulate: seeds {seed}..{seed + args.schedules - 1}, scenario {args.scenario}, "
        f"{args.actions} actions a schedule, {args.jobs} process(es)"
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

    summary = explore_parallel(
        seed,
        args.schedules,
        scenarios=scenarios,
        actions=args.actions,
        jobs=args.jobs,
        mutant=args.mutant,
        stop_at_first=not args.keep_going,
        progress=progress,
    )
    result: dict[str, Any] = {
        "seed": seed,
        "schedules": summary.schedules,
        "seconds": round(summary.seconds, 2),
        "schedules_per_second": round(summary.per_second, 1),
        "steps": summary.steps,
        "sends_checked": summary.sends,
        "faults_injected": summary.faults,
        "failures": [
            {"seed": f.seed, "scenario": f.scenario, "invariant": f.invariant}
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
    first = summary.failures[0]
    mutant_flag = f" --mutant {args.mutant}" if args.mutant else ""
    print(
        f"FAILED: seed {first.seed} ({first.scenario}) broke {first.invariant}\n"
        f"replay: agent-jobs simulate --seed {first.seed} --schedules 1 "
        f"--scenario {first.scenario}{mutant_flag} --trace"
    )
    if not args.no_shrink:
        print("shrinking ...", file=sys.stderr)
        outcome = _run_one(first.seed, first.scenario, args)
        small = _run_one(first.seed, first.scenario, args, shrink_from=outcome)
        print(f"shrunk from {len(outcome.drawn)} choices to {len(small.drawn)}; its trace:")
        print("\n".join(small.report.trace))
    return 1


def _run_one(seed: int, scenario: str, args: argparse.Namespace, shrink_from: Any = None) -> Any:
    """One schedule (or the shrinking of `shrink_from`), with the run's mutant in place."""
    from agent_jobs.simulation import mutants  # noqa: PLC0415
    from agent_jobs.simulation.run import Databases, run_schedule, shrink  # noqa: PLC0415

    with mutants.active(args.mutant):
        if shrink_from is not None:
            return shrink(shrink_from, scenario=scenario, actions=args.actions)
        databases = Databases()
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
    p.add_argument("--keep-going", action="store_true", help="do not stop at the first failure")
    p.add_argument("--no-shrink", action="store_true", help="do not shrink a failure")
    p.add_argument("--trace", action="store_true", help="with --schedules 1: print its trace")
    p.add_argument("--json", action="store_true", help="the summary as JSON")
    p.set_defaults(func=cmd_simulate)
