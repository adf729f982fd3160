"""`python -m agent_jobs.sim serve --port 8090 [--state FILE] [--world NAME]`.

The world defaults to `worlds.DEFAULT_WORLD` (order 8472 charged twice); `--world empty` serves
no orders.

A standalone entry point, so acceptance tests and other services can run the sim as a process
without the project's CLI.
"""

from __future__ import annotations

import argparse

from agent_jobs.sim import worlds
from agent_jobs.sim.server import serve


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agent_jobs.sim")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve the simulated business systems over HTTP")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8090, help="0 picks a free port")
    s.add_argument("--state", default=None, help="JSON state file, kept across restarts")
    s.add_argument(
        "--world",
        default=None,
        choices=sorted(worlds.BUILDERS),
        help=f"seed world of a fresh state (default {worlds.DEFAULT_WORLD}; empty: no orders)",
    )
    s.add_argument("--access-log", action="store_true", help="one line per request on stderr")
    args = parser.parse_args(argv)
    serve(args.host, args.port, args.state, world=args.world, access_log=args.access_log)


if __name__ == "__main__":
    main()
