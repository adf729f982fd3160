"""`agent-jobs trace TASK_ID [--json]`: a task's trace, read from its event log.

The spans are the ones `obs.otel` exports (`obs.tracing.spans_from_events`), so this works without
a collector and never disagrees with one: `--json` prints the seed's trace JSON, the default a
text waterfall.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from agent_jobs.cli.args import add_json, add_task_id, add_tenant
from agent_jobs.cli.reading import reading_store
from agent_jobs.core.errors import InvalidInput
from agent_jobs.core.identity import check_tenant_id

_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")


def cmd_trace(args: argparse.Namespace) -> int:
    if not _ID.fullmatch(args.task_id):
        raise InvalidInput("task id: must be 1-80 characters of letters, digits, '_' or '-'")
    if args.tenant is not None:
        try:
            check_tenant_id(args.tenant)
        except ValueError as exc:
            raise InvalidInput(f"--tenant: {exc}") from None
    # The tracing module (and the store) load when a trace is read, not to build the parser.
    from agent_jobs.obs.tracing import spans_from_events, trace_json, waterfall  # noqa: PLC0415

    with reading_store() as store:
        task = store.get(args.task_id, args.tenant)
        spans = spans_from_events(task, store.events(args.task_id, args.tenant))
    if args.json:
        print(json.dumps(trace_json(spans), indent=2, ensure_ascii=False))
    else:
        print(waterfall(spans))
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "trace",
        help="show a task's trace (spans from its event log: a waterfall, or --json)",
    )
    add_task_id(p)
    add_tenant(p, "wall")
    add_json(p, "print the trace JSON (seed 004's shape) instead of the waterfall")
    p.set_defaults(func=cmd_trace)
