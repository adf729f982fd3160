"""`agent-jobs eval`: run a suite on real workers against the simulator; the exit status is the
gate (0 pass, 1 fail: any case with a failed run, or a single safety failure)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser(
        "eval",
        help="run an eval suite (golden-refund, safety) on real workers; exit status is the gate",
    )
    p.add_argument(
        "--suite", default="golden-refund", help="golden-refund | safety (name[@version])"
    )
    p.add_argument("--runs", type=int, default=5, help="runs per case (default 5)")
    p.add_argument("--case", action="append", default=[], help="only this case (repeatable)")
    p.add_argument("--limit", type=int, default=None, help="only the first N cases")
    p.add_argument("--concurrency", type=int, default=4, help="worker threads")
    p.add_argument("--json", dest="json_out", default=None, help="write the JSON report here")
    p.add_argument("--html", dest="html_out", default=None, help="write the HTML report here")
    p.add_argument("--compare", default=None, help="a previous JSON report: print the regressions")
    p.add_argument(
        "--latency-tolerance",
        type=float,
        default=None,
        metavar="FRACTION",
        help="with --compare: count latency as regressed when slower by more than this "
        "fraction (0.5 = 50%%); by default wall-clock latency is shown, not gated",
    )
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no progress lines, and the platform's own warnings (model output repaired, ...) "
        "only when they are errors",
    )
    p.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    from agent_jobs.evals.report import compare, text_summary, to_html  # noqa: PLC0415
    from agent_jobs.evals.runner import run_suite  # noqa: PLC0415
    from agent_jobs.evals.suites import suite  # noqa: PLC0415

    if args.runs < 1:
        print("agent-jobs: error: --runs must be at least 1", file=sys.stderr)
        return 2
    chosen = suite(args.suite)
    say = None if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
    if args.quiet:
        # The cases provoke what a worker warns about (injected text, broken model output):
        # in a report run those lines are the suite working, not news.
        logging.getLogger("agent_jobs").setLevel(logging.ERROR)
    report = run_suite(
        chosen,
        runs=args.runs,
        only=args.case or None,
        limit=args.limit,
        concurrency=args.concurrency,
        progress=say,
    )
    table, regressed = None, False
    if args.compare:
        previous = json.loads(Path(args.compare).read_text(encoding="utf-8"))
        table, regressed = compare(report, previous, args.latency_tolerance)
        report["regressed"] = regressed
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2), encoding="utf-8")
    if args.html_out:
        Path(args.html_out).write_text(to_html(report, table), encoding="utf-8")
    print(text_summary(report))
    if table:
        print(table)
    return 0 if report["overall"]["gate"] == "pass" and not regressed else 1
