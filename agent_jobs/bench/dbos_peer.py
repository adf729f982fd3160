"""`agent-jobs bench peers`' DBOS side, run as its own process (`python -m
agent_jobs.bench.dbos_peer`): DBOS workflows of no-op steps, each step checkpointed in DBOS's
Postgres system database, which is DBOS's equivalent of our one commit per transition.

Protocol with the bench: the process launches DBOS, prints `ready`, waits for one line on stdin,
runs `--workflows` workflows of `--steps` steps at once (DBOS runs each in a thread of its
own), and prints one JSON object: steps done, wall-clock start and end (epoch seconds) and the
CPU seconds this process used meanwhile.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agent_jobs.bench.dbos_peer")
    parser.add_argument("--url", required=True, help="DBOS system database (Postgres)")
    parser.add_argument("--workflows", type=int, default=10)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--migrate-only", action="store_true")
    args = parser.parse_args(argv)

    from dbos import DBOS, DBOSConfig  # noqa: PLC0415 - an optional extra

    config: DBOSConfig = {
        "name": "agent-jobs-bench-peers",
        "system_database_url": args.url,
        "run_admin_server": False,
        "log_level": "WARNING",
        "sys_db_pool_size": max(4, args.workflows + 2),
    }  # type: ignore[typeddict-unknown-key]
    DBOS(config=config)

    @DBOS.step()
    def noop_step(i: int) -> int:
        return i

    @DBOS.workflow()
    def noop_workflow(steps: int) -> int:
        for i in range(steps):
            noop_step(i)
        return steps

    DBOS.launch()
    try:
        if args.migrate_only:
            return 0
        print("ready", flush=True)
        sys.stdin.readline()
        cpu0, start = time.process_time(), time.time()
        handles: list[Any] = [
            DBOS.start_workflow(noop_workflow, args.steps) for _ in range(args.workflows)
        ]
        done = sum(int(h.get_result()) for h in handles)
        end, cpu = time.time(), time.process_time() - cpu0
        print(json.dumps({"steps": done, "start": start, "end": end, "cpu_s": cpu}), flush=True)
    finally:
        DBOS.destroy()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
