"""`agent-jobs bench webhooks delivery|hot-path`: the webhook figures (`bench/webhooks.py`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from agent_jobs.cli.args import BENCH_JSON, add_json, add_workers


def _print(result: dict[str, Any], as_json: bool, render: Callable[[dict[str, Any]], str]) -> int:
    print(json.dumps(result, indent=2, sort_keys=True) if as_json else render(result))
    return 0


def cmd_delivery(args: argparse.Namespace) -> int:
    from agent_jobs.bench import webhooks  # noqa: PLC0415 - keep `--help` fast

    result = webhooks.delivery(
        workers=args.workers,
        tenants=args.tenants,
        events=args.events,
        samples=args.samples,
        show=not args.json,
    )
    return _print(result, args.json, webhooks.render_delivery)


def cmd_hot_path(args: argparse.Namespace) -> int:
    from agent_jobs.bench import webhooks  # noqa: PLC0415

    if args.baseline:
        return _beside_before(args)
    result = webhooks.hot_path(
        workers=args.workers,
        tasks=args.tasks,
        steps=args.steps,
        rounds=args.rounds,
        show=not args.json,
    )
    return _print(result, args.json, webhooks.render_hot_path)


def _beside_before(args: argparse.Namespace) -> int:
    """`bench peers` (no webhook registered) on the code in `--baseline` and on this checkout,
    in ABBA pairs. The baseline runs on a database of its own (`--baseline-database`): its
    schema check refuses this checkout's migration, so the two cannot share one. That database
    is migrated by the baseline's own code first."""
    from agent_jobs.bench import baseline  # noqa: PLC0415
    from agent_jobs.cli.bench import peers_figures  # noqa: PLC0415
    from agent_jobs.cli.bench_beside import run_beside  # noqa: PLC0415

    argv = ["bench", "peers", "--json", "--no-dbos", "--tasks", str(args.tasks)]
    argv += ["--steps", str(args.steps), "--workers", str(args.workers)]
    argv += ["--rounds", str(args.rounds), "--handoff-steps", "20"]
    result = run_beside(args, argv, peers_figures, migrate_first=True)
    return _print(result, args.json, baseline.render)


def register(bsub: Any, guarded: Callable[[Any], Any]) -> None:
    w = bsub.add_parser("webhooks", help="webhook deliveries/s, event-to-delivery, hot-path cost")
    wsub = w.add_subparsers(dest="webhooks_bench", metavar="WHAT", parser_class=type(w))
    wsub.required = True
    d = wsub.add_parser("delivery", help="deliveries/s (a burst) and event-to-delivery p50/p99")
    add_workers(d, 2)
    d.add_argument(
        "--tenants",
        type=int,
        default=4,
        help="tenants, one endpoint each, the burst's events split evenly over them "
        "(default %(default)s)",
    )
    d.add_argument("--events", type=int, default=400, help="events in the burst")
    d.add_argument("--samples", type=int, default=100, help="single events timed")
    add_json(d, BENCH_JSON)
    d.set_defaults(func=guarded(cmd_delivery))
    h = wsub.add_parser(
        "hot-path", help="steps/s with no endpoint vs one per tenant (the peers workload)"
    )
    add_workers(h, 2)
    h.add_argument(
        "--tasks",
        type=int,
        default=20,
        help="no-op tasks a side and round, each on a tenant of its own (default %(default)s)",
    )
    h.add_argument(
        "--steps", type=int, default=200, help="steps of each no-op task (default %(default)s)"
    )
    h.add_argument(
        "--rounds",
        type=int,
        default=4,
        help="rounds, alternating which side runs first (ABBA); medians are reported "
        "(default %(default)s)",
    )
    h.add_argument(
        "--baseline",
        metavar="DIR",
        help="instead: `bench peers` with no webhook, side by side with the checkout in DIR "
        "(the code before webhooks), on --baseline-database",
    )
    h.add_argument("--baseline-database", metavar="URL", help="the baseline's own database")
    h.add_argument("--pairs", type=int, default=2, help="with --baseline: pairs of runs")
    add_json(h, BENCH_JSON)
    h.set_defaults(func=guarded(cmd_hot_path))
