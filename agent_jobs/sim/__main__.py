"""`python -m agent_jobs.sim serve --port 8090 [--state FILE] [--world incident_8472]`.

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
        "--world", default=None, choices=sorted(worlds.BUILDERS), help="seed world (fresh state)"
    )
    s.add_argument("--access-log", action="store_true", help="one line per request on stderr")
    args = parser.parse_args(argv)
    world = worlds.build(args.world) if args.world else None
    serve(args.host, args.port, args.state, world=world, access_log=args.access_log)


if __name__ == "__main__":
    main()
