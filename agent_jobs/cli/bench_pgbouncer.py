"""`agent-jobs bench pgbouncer`: worker processes sharing few server connections through
PgBouncer, beside the same workers straight to Postgres (`bench/pooled.py`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from agent_jobs.cli.args import BENCH_JSON, add_json


def cmd_pgbouncer(args: argparse.Namespace) -> int:
    from agent_jobs.bench import pooled  # noqa: PLC0415 - keep `--help` fast

    result = pooled.run(
        workers=args.workers,
        pool_size=args.pool_size,
        steps=args.steps,
        rounds=args.rounds,
        progress=not args.json,
    )
    print(json.dumps(result, sort_keys=True) if args.json else pooled.render(result))
    return 0


def register(bsub: Any, guarded: Callable[[Any], Any]) -> None:
    pb = bsub.add_parser(
        "pgbouncer",
        help="40 worker processes on 20 server connections through PgBouncer vs straight",
        description="Starts Debian's pgbouncer of its own (transaction mode, prepared "
        "statements off) and, one after the other, worker processes straight to Postgres, "
        "through it, and straight again, each side on a database of its own; rounds of one "
        "no-op task per worker. Prints steps/s, p50/p99 step latency, Postgres connections, "
        "SHOW POOLS' cl_waiting, and the ratio. At the defaults on 2 cores the rounds take "
        "about a minute, starting the three blocks' worker processes four to five more.",
    )
    pb.add_argument("--workers", type=int, default=40, help="worker processes per side")
    pb.add_argument("--pool-size", type=int, default=20, help="PgBouncer's default_pool_size")
    pb.add_argument("--steps", type=int, default=60, help="steps of each worker's task a round")
    pb.add_argument(
        "--rounds",
        type=int,
        default=4,
        help="rounds per side (the direct side's in two halves, before and after)",
    )
    add_json(pb, BENCH_JSON)
    pb.set_defaults(func=guarded(cmd_pgbouncer))
