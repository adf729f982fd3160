"""`agent-jobs bench ...`: commands that print figures (never timed assertions in tests); their
options are declared in `cli/bench_parser.py`."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

from agent_jobs.cli import bench_beside


def _print(result: dict[str, Any], as_json: bool, render: Any) -> int:
    """Print one result: the rendered figures, or one JSON object."""
    if as_json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(render(result))
    return 0


def cmd_transitions(args: argparse.Namespace) -> int:
    from agent_jobs.bench import transitions  # noqa: PLC0415

    result = transitions.run(
        tasks=args.tasks,
        steps=args.steps,
        workers=args.workers,
        rounds=args.rounds,
        progress=not args.json,
    )
    return _print(result, args.json, transitions.render)


def cmd_peers(args: argparse.Namespace) -> int:
    from agent_jobs.bench import peers  # noqa: PLC0415

    if args.baseline is not None:
        return _peers_side_by_side(args)
    result = peers.run(
        tasks=args.tasks,
        steps=args.steps,
        workers=args.workers,
        rounds=args.rounds,
        handoff_steps=args.handoff_steps,
        dbos=not args.no_dbos,
        progress=not args.json,
    )
    return _print(result, args.json, peers.render)


def peers_figures(r: dict[str, Any]) -> dict[str, float]:
    """What a side-by-side `bench peers` compares: our steps/s (the headline), our CPU per
    step and the ratios to the peers measured in the same run (they cancel the machine's drift
    between runs, which the raw rate does not). DBOS's ratio only where DBOS ran."""
    out = {
        "steps_per_s": float(r["steps_per_s"]),
        "cpu_ms_per_step": float(r["cpu_ms_per_step"]),
        "ratio_celery": float(r["ratio_celery"]),
    }
    if r.get("ratio_dbos") is not None:
        out["ratio_dbos"] = float(r["ratio_dbos"])
    return out


def _peers_side_by_side(args: argparse.Namespace, run: Any = None) -> int:
    argv = ["bench", "peers", "--json", "--tasks", str(args.tasks), "--steps", str(args.steps)]
    argv += ["--workers", str(args.workers), "--rounds", str(args.rounds)]
    argv += ["--handoff-steps", str(args.handoff_steps)]
    argv += ["--no-dbos"] if args.no_dbos else []
    return _side_by_side(args, argv, peers_figures, run)


def _side_by_side(
    args: argparse.Namespace,
    argv: list[str],
    figures: Any,
    run: Any = None,
) -> int:
    """`argv` (a benchmark with `--json`) in alternating pairs on `--baseline` and this checkout;
    `figures` picks what each run is compared by. `--wipe` is passed on to every child."""
    from agent_jobs.bench import baseline  # noqa: PLC0415
    from agent_jobs.bench.common import progress  # noqa: PLC0415

    for name in getattr(args, "wipe", None) or ():
        argv = [*argv, "--wipe", name]
    result = baseline.run_pairs(
        argv,
        baseline.code_root(args.baseline),
        args.pairs,
        figures,
        progress=lambda text: progress(not args.json, text),
        run=run or baseline.run_child,
    )
    return _print(result, args.json, baseline.render)


def cmd_fairness(args: argparse.Namespace) -> int:
    from agent_jobs.bench import fairness  # noqa: PLC0415

    if args.active is not None and args.baseline:
        return bench_beside.fairness_beside(args)
    if args.active is not None:
        from agent_jobs.bench import scale  # noqa: PLC0415

        result = scale.run(
            tenants=args.tenants,
            active=args.active,
            workers=args.workers,
            rounds=args.rounds or 4,  # ABBA: an even number
            compare_all=args.compare_all,
            progress=not args.json,
        )
        return _print(result, args.json, scale.render)

    result = fairness.run(
        tenants=args.tenants,
        backlog=args.backlog,
        step_ms=args.step_ms,
        workers=args.workers,
        rounds=args.rounds or 5,
        shared=not args.no_shared,
        progress=not args.json,
    )
    return _print(result, args.json, fairness.render)


def cmd_sweep(args: argparse.Namespace) -> int:
    from agent_jobs.bench import sweep  # noqa: PLC0415

    result = sweep.run(
        rows=args.rows, small=args.small, due=args.due, repeats=args.repeats, progress=not args.json
    )
    return _print(result, args.json, sweep.render)


def cmd_history(args: argparse.Namespace) -> int:
    from agent_jobs.bench import history  # noqa: PLC0415

    result = history.run(
        rows=args.rows,
        events_per_task=args.events_per_task,
        tasks=args.tasks,
        steps=args.steps,
        workers=args.workers,
        rounds=args.rounds,
        reseed=args.reseed,
        progress=not args.json,
    )
    return _print(result, args.json, history.render)


def cmd_chaos(args: argparse.Namespace) -> int:
    from agent_jobs.bench import chaos  # noqa: PLC0415

    result = chaos.run(
        tasks=args.tasks,
        workers=args.workers,
        kill_every_s=args.kill_every,
        flushes=args.flushes,
        timeout_s=args.timeout,
        seed=args.seed,
        progress=not args.json,
    )
    _print(result, args.json, chaos.render)
    return 0 if result["lost"] == 0 and result["duplicate_effects"] == 0 else 1


def cmd_noisy(args: argparse.Namespace) -> int:
    from agent_jobs.bench import noisy  # noqa: PLC0415

    result = noisy.run(
        steps=args.steps,
        burst=args.burst,
        workers=args.workers,
        rounds=args.rounds,
        steady=args.steady,
        progress=not args.json,
    )
    return _print(result, args.json, noisy.render)


def cmd_cost_fairness(args: argparse.Namespace) -> int:
    from agent_jobs.bench import cost_fairness  # noqa: PLC0415

    result = cost_fairness.run(
        tenants=args.tenants,
        cheap_ms=args.cheap_ms,
        ratio=args.ratio,
        window_s=args.window,
        workers=args.workers,
        compare=not args.no_compare,
        progress=not args.json,
    )
    return _print(result, args.json, cost_fairness.render)


def cmd_platform(args: argparse.Namespace) -> int:
    from agent_jobs.bench import platform  # noqa: PLC0415

    if args.baseline is not None:
        return _platform_side_by_side(args)
    result = platform.run(
        tasks=args.tasks,
        workers=args.workers,
        concurrent=args.concurrent,
        warmup=args.warmup,
        progress=not args.json,
    )
    _print(result, args.json, platform.render)
    return 0 if not result["not_completed"] else 1  # a refund task that did not complete


def _platform_side_by_side(args: argparse.Namespace) -> int:
    argv = ["bench", "platform", "--json", "--tasks", str(args.tasks)]
    argv += ["--workers", str(args.workers), "--warmup", str(args.warmup)]
    argv += ["--concurrent"] if args.concurrent else []

    def figures(r: dict[str, Any]) -> dict[str, float]:
        return {
            "platform_ms": float(r["median"]["platform_ms"]),
            "worker_cpu_ms_per_task": float(r["worker_cpu_ms_per_task"]),
        }

    return _side_by_side(args, argv, figures)


def cmd_recovery(args: argparse.Namespace) -> int:
    from agent_jobs.bench import recovery  # noqa: PLC0415

    result = recovery.run(
        tasks=args.tasks,
        kills=args.kills,
        rounds=args.rounds,
        progress=not args.json,
    )
    _print(result, args.json, recovery.render)
    return 0 if not result["lost_memory"] and not result["lost_broker"] else 1  # a task lost


def cmd_outage(args: argparse.Namespace) -> int:
    from agent_jobs.bench import outage  # noqa: PLC0415

    scenarios = tuple(s.strip() for s in args.scenarios.split(",") if s.strip())
    result = outage.run(
        tasks=args.tasks, down_s=args.down, scenarios=scenarios, progress=not args.json
    )
    _print(result, args.json, outage.render)
    bad = any(result[f"{s}_lost"] or result[f"{s}_duplicate_effects"] for s in scenarios)
    return 1 if bad else 0  # a task lost or an effect applied twice


def cmd_guardrails(args: argparse.Namespace) -> int:
    from agent_jobs.bench import guardrails  # noqa: PLC0415

    say = None if args.json else (lambda m: print(m, file=sys.stderr, flush=True))
    result = guardrails.run(interval_s=args.interval, timeout_s=args.timeout, progress=say)
    _print(result, args.json, guardrails.render)
    return 0 if result["reverted"] else 1  # the degraded canary stayed live


def guarded(command: Any) -> Any:
    """A benchmark starts worker processes in sessions of their own: on SIGTERM, unwind through
    the `finally` blocks that stop them instead of leaving them running."""

    def run(args: argparse.Namespace) -> int:
        from agent_jobs.store.admin import allow_wipe  # noqa: PLC0415

        allow_wipe(getattr(args, "wipe", None) or ())
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        return int(command(args))

    return run
