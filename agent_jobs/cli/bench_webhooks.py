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

    result = webhooks.hot_path(
        workers=args.workers,
        tasks=args.tasks,
        steps=args.steps,
        rounds=args.rounds,
        show=not args.json,
    )
    return _print(result, args.json, webhooks.render_hot_path)


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
    h.add_argument("--json", action="store_true")
    h.set_defaults(func=guarded(cmd_hot_path))
