"""`agent-jobs bench failover`: Redis under Sentinel loses its primary under load
(`bench/failover.py`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from agent_jobs.cli.args import BENCH_JSON, add_json


def cmd_failover(args: argparse.Namespace) -> int:
    from agent_jobs.bench import failover  # noqa: PLC0415 - keep `--help` fast

    result = failover.run(tasks=args.tasks, progress=not args.json)
    print(json.dumps(result, sort_keys=True) if args.json else failover.render(result))
    return 1 if result["lost"] or result["duplicate_effects"] else 0


def register(bsub: Any, guarded: Callable[[Any], Any]) -> None:
    fo = bsub.add_parser(
        "failover",
        help="Redis under Sentinel loses its primary under load: how soon work moves",
        description="Starts two redis-servers and a redis-sentinel of its own, runs the load "
        "through the Sentinel, SIGKILLs the primary; prints the election's delay, how soon every "
        "runnable task moves again after it (median, max), tasks lost and effects applied twice.",
    )
    fo.add_argument(
        "--tasks", type=int, default=20, help="no-op tasks running (plus half as many payouts)"
    )
    add_json(fo, BENCH_JSON)
    fo.set_defaults(func=guarded(cmd_failover))
