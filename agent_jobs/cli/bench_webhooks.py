"""`agent-jobs bench webhooks delivery|hot-path`: the webhook figures (`bench/webhooks.py`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any


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
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415
    from urllib.parse import urlsplit  # noqa: PLC0415

    from agent_jobs.bench import baseline  # noqa: PLC0415
    from agent_jobs.bench.common import progress  # noqa: PLC0415
    from agent_jobs.cli.bench import peers_figures  # noqa: PLC0415
    from agent_jobs.core.errors import ConfigError  # noqa: PLC0415

    if not args.baseline_database:
        raise ConfigError("--baseline needs --baseline-database URL (a database of its own)")
    root = baseline.code_root(args.baseline)
    env = {
        **os.environ,
        "AGENT_JOBS_DATABASE_URL": args.baseline_database,
        "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p),
    }
    subprocess.run(
        [sys.executable, "-m", "agent_jobs.cli", "db", "upgrade"],
        env=env, cwd=root, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    argv = ["bench", "peers", "--json", "--no-dbos", "--tasks", str(args.tasks)]
    argv += ["--steps", str(args.steps), "--workers", str(args.workers)]
    argv += ["--rounds", str(args.rounds), "--handoff-steps", "20"]
    own_db = urlsplit(args.baseline_database).path.lstrip("/")

    def run(code: Path, child_argv: Any) -> dict[str, Any]:
        if code != root:
            return baseline.run_child(code, child_argv)
        # The child inherits this process's environment: the baseline's database in it for
        # the child's run, then the environment as it was (copied whole, not read by name:
        # settings are read in config.py only).
        saved = os.environ.copy()
        os.environ["AGENT_JOBS_DATABASE_URL"] = args.baseline_database
        try:
            return baseline.run_child(code, [*child_argv, "--wipe", own_db])
        finally:
            os.environ.clear()
            os.environ.update(saved)

    result = baseline.run_pairs(
        argv,
        root,
        args.pairs,
        peers_figures,
        progress=lambda text: progress(not args.json, text),
        run=run,
    )
    return _print(result, args.json, baseline.render)


def register(bsub: Any, guarded: Callable[[Any], Any]) -> None:
    w = bsub.add_parser("webhooks", help="webhook deliveries/s, event-to-delivery, hot-path cost")
    wsub = w.add_subparsers(dest="webhooks_bench", metavar="WHAT", parser_class=type(w))
    wsub.required = True
    d = wsub.add_parser("delivery", help="deliveries/s (a burst) and event-to-delivery p50/p99")
    d.add_argument("--workers", type=int, default=2)
    d.add_argument("--tenants", type=int, default=4)
    d.add_argument("--events", type=int, default=400, help="events in the burst")
    d.add_argument("--samples", type=int, default=100, help="single events timed")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=guarded(cmd_delivery))
    h = wsub.add_parser(
        "hot-path", help="steps/s with no endpoint vs one per tenant (the peers workload)"
    )
    h.add_argument("--workers", type=int, default=2)
    h.add_argument("--tasks", type=int, default=20)
    h.add_argument("--steps", type=int, default=200)
    h.add_argument("--rounds", type=int, default=4)
    h.add_argument(
        "--baseline",
        metavar="DIR",
        help="instead: `bench peers` with no webhook, side by side with the checkout in DIR "
        "(the code before webhooks), on --baseline-database",
    )
    h.add_argument("--baseline-database", metavar="URL", help="the baseline's own database")
    h.add_argument("--pairs", type=int, default=2, help="with --baseline: pairs of runs")
    h.add_argument("--json", action="store_true")
    h.set_defaults(func=guarded(cmd_hot_path))
