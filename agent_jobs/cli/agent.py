"""Agent commands: `agent-jobs sim serve` and `agent-jobs cost`.

`cost` prints the seed's cost model (`gateway.costmodel`); `cost --task ID` prices a real task's
model calls, as the gateway recorded them in the task's `chat` events, with the same formula, so
a run can be set against the plan (`cli.costs`).
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def cmd_sim_serve(args: argparse.Namespace) -> int:
    from agent_jobs.sim.server import serve  # noqa: PLC0415 - keep `--help` fast

    # No --world: the sim's default world (the README's order 8472); it prints which it serves.
    serve(args.host, args.port, args.state, world=args.world, access_log=args.access_log)
    return 0


def cmd_cost(args: argparse.Namespace) -> int:
    if args.task is None:
        from agent_jobs.gateway.costmodel import cost_report_json, render_cost_table  # noqa: PLC0415

        if args.json:
            print(json.dumps(cost_report_json(cap=args.cap), sort_keys=True, indent=2))
        else:
            print(render_cost_table(cap=args.cap), end="")
        return 0
    from agent_jobs.cli.costs import task_cost_json, task_cost_text  # noqa: PLC0415
    from agent_jobs.queue.runtime import get_runtime  # noqa: PLC0415 - Celery loads lazily

    store = get_runtime().store
    if args.json:
        print(json.dumps(task_cost_json(store, args.task), sort_keys=True, indent=2))
    else:
        print(task_cost_text(store, args.task))
    return 0


def register(sub: Any) -> None:
    from agent_jobs.sim.worlds import BUILDERS  # noqa: PLC0415

    p = sub.add_parser("sim", help="the simulated business systems (orders, payments, policies)")
    ssub = p.add_subparsers(dest="sim_command", metavar="SIM")
    ssub.required = True
    s = ssub.add_parser("serve", help="serve the business-systems HTTP contract until Ctrl-C")
    s.add_argument(
        "--host", default="127.0.0.1", help="the address to serve on (default %(default)s)"
    )
    s.add_argument("--port", type=int, default=8090, help="0 picks a free port")
    s.add_argument("--state", default=None, help="JSON state file, kept across restarts")
    s.add_argument("--world", default=None, choices=sorted(BUILDERS), help="seed a fresh state")
    s.add_argument("--access-log", action="store_true", help="one line per request on stderr")
    s.set_defaults(func=cmd_sim_serve)

    c = sub.add_parser("cost", help="the seed's token and latency arithmetic, or a task's calls")
    c.add_argument("--json", action="store_true", help="one JSON object")
    c.add_argument("--task", default=None, metavar="ID", help="price this task's model calls")
    c.add_argument("--cap", type=int, default=40, help="model-call concurrency cap (Little's law)")
    c.set_defaults(func=cmd_cost)
