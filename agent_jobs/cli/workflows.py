"""`agent-jobs workflows`: the workflows this process loads, with their versions and origins."""

from __future__ import annotations

import argparse
import json
from typing import Any


def cmd_workflows(args: argparse.Namespace) -> int:
    """List the registry as every process with these settings loads it (built-ins, the modules
    of AGENT_JOBS_WORKFLOWS, the `agent_jobs.workflows` entry points); a module that cannot be
    loaded is one line and exit status 2, as it is for the API and the workers."""
    from agent_jobs.workflows import loaded_workflows  # noqa: PLC0415

    loaded = loaded_workflows()
    if args.json:
        rows = [
            {
                "workflow": w.key,
                "name": w.name,
                "version": w.version,
                "origin": w.origin.kind,
                "where": w.origin.where,
            }
            for w in loaded
        ]
        print(json.dumps(rows, indent=2))
        return 0
    width = max([len("workflow"), *(len(w.name) for w in loaded)])
    print(f"{'workflow':<{width}}  {'version':>7}  origin")
    for w in loaded:
        print(f"{w.name:<{width}}  {w.version:>7}  {w.origin}")
    return 0


def register(sub: Any) -> None:
    """Add `workflows` to the `agent-jobs` command line."""
    p = sub.add_parser(
        "workflows",
        help="list the workflows this configuration loads, with versions and origins",
        description="Lists the built-in workflows and those of AGENT_JOBS_WORKFLOWS and of the "
        "`agent_jobs.workflows` entry points, as the API, workers and beat load them.",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per workflow")
    p.set_defaults(func=cmd_workflows)
