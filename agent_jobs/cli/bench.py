"""`agent-jobs bench ...`: commands that print figures (never timed assertions in tests)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any

from agent_jobs.cli import bench_beside, bench_failover, bench_pgbouncer, bench_webhooks


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


def _register_guardrails(bsub: Any) -> None:
    g = bsub.add_parser(
        "guardrails",
        help="a canary whose model degrades: how soon beat's guardrails revert it, its exposure",
    )
    g.add_argument(
        "--interval", type=float, default=10.0, help="AGENT_JOBS_GUARDRAILS_INTERVAL_S for the run"
    )
    g.add_argument("--timeout", type=float, default=120.0, help="give up after this long")
    g.add_argument("--json", action="store_true")
    g.set_defaults(func=cmd_guardrails)


def _side_by_side_options(p: Any, *, pairs: int) -> None:
    """`--baseline DIR --pairs N`, the same on every benchmark that compares two checkouts."""
    p.add_argument(
        "--baseline",
        metavar="DIR",
        help="side by side with the checkout in DIR (e.g. a git worktree of the commit before "
        "a change): alternating runs of both, medians and each pair's ratio",
    )
    p.add_argument("--pairs", type=int, default=pairs, help="with --baseline: pairs of runs")


def _guarded(command: Any) -> Any:
    """A benchmark starts worker processes in sessions of their own: on SIGTERM, unwind through
    the `finally` blocks that stop them instead of leaving them running."""

    def run(args: argparse.Namespace) -> int:
        from agent_jobs.store.admin import allow_wipe  # noqa: PLC0415

        allow_wipe(getattr(args, "wipe", None) or ())
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        return int(command(args))

    return run


def register(sub: Any) -> None:
    p = sub.add_parser(
        "bench", help="benchmarks on Postgres + Redis (print figures; --json for one object)"
    )
    bsub = p.add_subparsers(dest="bench_command", metavar="BENCH")
    bsub.required = True

    t = bsub.add_parser(
        "transitions", help="transitions/s of a no-op workflow vs a hand-built Celery floor"
    )
    t.add_argument("--tasks", type=int, default=20)
    t.add_argument("--steps", type=int, default=200)
    t.add_argument("--workers", type=int, default=2, help="worker processes")
    t.add_argument(
        "--rounds",
        type=int,
        default=6,
        help="rounds, alternating which side runs first (ABBA); medians are reported",
    )
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=_guarded(cmd_transitions))

    pe = bsub.add_parser(
        "peers", help="steps/s and CPU/step beside a plain Celery chain and DBOS; hand-off p50/p99"
    )
    pe.add_argument("--tasks", type=int, default=20)
    pe.add_argument("--steps", type=int, default=200)
    pe.add_argument("--workers", type=int, default=2, help="worker processes (and DBOS processes)")
    pe.add_argument("--rounds", type=int, default=4, help="rounds, rotating which side runs first")
    pe.add_argument("--handoff-steps", type=int, default=200, help="steps of the lone task")
    pe.add_argument("--no-dbos", action="store_true", help="skip DBOS (the `peers` extra)")
    _side_by_side_options(pe, pairs=3)
    pe.add_argument("--json", action="store_true")
    pe.set_defaults(func=_guarded(cmd_peers))
    bench_webhooks.register(bsub, _guarded)

    f = bsub.add_parser("fairness", help="a lone tenant's wait behind another tenant's backlog")
    f.add_argument("--tenants", type=int, default=20, help="tenants with queues")
    f.add_argument("--backlog", type=int, default=2000)
    f.add_argument("--step-ms", type=float, default=5.0)
    f.add_argument("--workers", type=int, default=2)
    f.add_argument(
        "--rounds", type=int, default=None, help="rounds (default 5; with --active 4, ABBA)"
    )
    f.add_argument(
        "--active",
        type=int,
        default=None,
        help="scale mode: of --tenants known tenants, this many have work",
    )
    f.add_argument(
        "--compare-all",
        action="store_true",
        help="scale mode: also run with every known tenant consumed (idle dropping off)",
    )
    f.add_argument("--no-shared", action="store_true", help="skip the one-shared-queue baseline")
    bench_beside.add_options(f, pairs=1)  # scale mode: beside the code before a change
    f.add_argument("--json", action="store_true")
    f.set_defaults(func=_guarded(cmd_fairness))

    c = bsub.add_parser(
        "chaos", help="SIGKILL workers and flush the broker under load; count losses"
    )
    c.add_argument("--tasks", type=int, default=300)
    c.add_argument("--workers", type=int, default=3)
    c.add_argument("--kill-every", type=float, default=4.0, help="seconds between SIGKILLs")
    c.add_argument("--flushes", type=int, default=2)
    c.add_argument("--timeout", type=float, default=600.0)
    c.add_argument("--seed", type=int, default=8472)
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=_guarded(cmd_chaos))

    _register_issue5(bsub)
    _register_platform(bsub)

    _register_sweep(bsub)
    _register_history(bsub)
    _register_recovery(bsub)
    _register_outage(bsub)
    _register_guardrails(bsub)
    _add_wipe(bsub)  # last: every benchmark registered above gets `--wipe`


def _register_sweep(bsub: Any) -> None:
    s = bsub.add_parser("sweep", help="sweep cost with many finished tasks vs few")
    s.add_argument("--rows", type=int, default=1_000_000)
    s.add_argument("--small", type=int, default=1_000)
    s.add_argument("--due", type=int, default=100)
    s.add_argument("--repeats", type=int, default=7)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=_guarded(cmd_sweep))


def _add_wipe(bsub: Any) -> None:
    """`--wipe DATABASE` on every benchmark: the only way it empties a database it did not
    create and mark (see `store.admin`)."""
    for parser in bsub.choices.values():
        parser.add_argument(
            "--wipe",
            action="append",
            default=[],
            metavar="DATABASE",
            help="empty DATABASE although this benchmark did not create it (it must be the "
            "database AGENT_JOBS_DATABASE_URL names, or one derived from it); repeatable. "
            "Without it a benchmark runs only on a database it created and marked",
        )


def _register_issue5(bsub: Any) -> None:
    n = bsub.add_parser("noisy", help="others' p99 step wait while one tenant bursts 10x its share")
    n.add_argument("--steps", type=int, default=150, help="steps per task")
    n.add_argument(
        "--burst", type=int, default=10, help="the noisy tenant's tasks during the burst"
    )
    n.add_argument("--steady", type=int, default=19, help="tenants running steadily beside it")
    n.add_argument("--workers", type=int, default=2)
    n.add_argument(
        "--rounds", type=int, default=4, help="rounds, alternating which side runs first (ABBA)"
    )
    n.add_argument("--json", action="store_true")
    n.set_defaults(func=_guarded(cmd_noisy))

    cf = bsub.add_parser(
        "cost-fairness", help="shares of cost between 1x and 10x tenants; Jain's index"
    )
    cf.add_argument("--tenants", type=int, default=6)
    cf.add_argument("--cheap-ms", type=float, default=10.0, help="the cheap tenants' step cost")
    cf.add_argument(
        "--ratio", type=float, default=10.0, help="the costly tenants' cost, in cheap steps"
    )
    cf.add_argument("--window", type=float, default=20.0, help="seconds measured")
    cf.add_argument("--workers", type=int, default=2)
    cf.add_argument("--no-compare", action="store_true", help="skip the fair-share-off run")
    cf.add_argument("--json", action="store_true")
    cf.set_defaults(func=_guarded(cmd_cost_fairness))


def _register_platform(bsub: Any) -> None:
    pl = bsub.add_parser(
        "platform", help="the platform's own time in one refund task (seed budget: 80 ms)"
    )
    pl.add_argument("--tasks", type=int, default=10, help="refund tasks measured")
    pl.add_argument("--workers", type=int, default=2, help="worker processes")
    pl.add_argument("--concurrent", action="store_true", help="submit all at once")
    pl.add_argument("--warmup", type=int, default=1, help="unmeasured tasks run first")
    _side_by_side_options(pl, pairs=6)
    pl.add_argument("--json", action="store_true")
    pl.set_defaults(func=_guarded(cmd_platform))


def _register_history(bsub: Any) -> None:
    h = bsub.add_parser(
        "history", help="transitions/s with 10M rows of finished history vs an empty database"
    )
    h.add_argument("--rows", type=int, default=10_000_000, help="history rows: tasks + events")
    h.add_argument("--events-per-task", type=int, default=9, help="events per finished task")
    h.add_argument("--tasks", type=int, default=20)
    h.add_argument("--steps", type=int, default=200)
    h.add_argument("--workers", type=int, default=2, help="worker processes per database")
    h.add_argument(
        "--rounds", type=int, default=4, help="rounds, alternating which side runs first (ABBA)"
    )
    h.add_argument("--reseed", action="store_true", help="seed the history database again")
    h.add_argument("--json", action="store_true")
    h.set_defaults(func=_guarded(cmd_history))


def _register_recovery(bsub: Any) -> None:
    rc = bsub.add_parser(
        "recovery", help="recovery after a SIGKILL mid-step: step acks in memory vs in the broker"
    )
    rc.add_argument("--tasks", type=int, default=20, help="no-op tasks kept running")
    rc.add_argument("--kills", type=int, default=5, help="SIGKILLs per mode per round")
    rc.add_argument(
        "--rounds", type=int, default=2, help="rounds, alternating which mode runs first (ABBA)"
    )
    rc.add_argument("--json", action="store_true")
    rc.set_defaults(func=_guarded(cmd_recovery))


def _register_outage(bsub: Any) -> None:
    o = bsub.add_parser(
        "outage",
        help="Postgres stopped and back, Redis killed and restarted empty: how soon work moves",
        description="Stops a Postgres the bench owns (a TCP proxy it cuts in front of the "
        "server) and its own redis-server (SIGKILL, restarted empty) under load, with the "
        "default timings; prints how soon every runnable task moves again after the service "
        "answers (median, max), tasks lost and effects applied twice.",
    )
    o.add_argument(
        "--tasks", type=int, default=20, help="no-op tasks running (plus half as many payouts)"
    )
    o.add_argument("--down", type=float, default=10.0, help="seconds each service is away")
    o.add_argument("--scenarios", default="postgres,redis", help="comma-separated: postgres, redis")
    o.add_argument("--json", action="store_true")
    o.set_defaults(func=_guarded(cmd_outage))
    bench_failover.register(bsub, _guarded)
    bench_pgbouncer.register(bsub, _guarded)
