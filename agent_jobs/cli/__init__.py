"""`agent-jobs`: the command line. Bad input gets one line on stderr and a non-zero exit."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

from agent_jobs import __version__
from agent_jobs.config import load_settings
from agent_jobs.core.errors import AgentJobsError

EXIT_USAGE = 2
EXIT_FAILED = 1
EXIT_NO_DATABASE = 3  # as a worker or beat exits on a database it cannot use


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse prints the whole usage; one line with a hint reads better in scripts.
        self.exit(EXIT_USAGE, f"agent-jobs: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    from agent_jobs.cli import (  # noqa: PLC0415 - keep `--help` fast
        bench_parser,
        incidents,
        ops,
        switches,
        tasks,
        trace,
        webhooks,
        workflows,
    )

    parser = _Parser(
        prog="agent-jobs",
        description="A durable, multi-tenant job queue for AI-agent tasks.",
        epilog="Configuration comes from AGENT_JOBS_* environment variables (see the README). "
        "With none set, it runs embedded: SQLite in ./agent_jobs.db and an in-process broker.",
    )
    parser.add_argument("--version", action="version", version=f"agent-jobs {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for module in (tasks, ops, bench_parser, trace, switches, incidents, workflows, webhooks):
        module.register(sub)
    for extra in _optional_modules():
        extra.register(sub)
    return parser


def _optional_modules() -> list[ModuleType]:
    """Command groups of the agent, API and simulator packages, when they are present."""
    import importlib  # noqa: PLC0415

    found: list[ModuleType] = []
    for name in (
        "agent_jobs.cli.agent",
        "agent_jobs.cli.service",
        "agent_jobs.cli.evals",
        "agent_jobs.cli.releases",
        "agent_jobs.cli.simulate",
    ):
        try:
            found.append(importlib.import_module(name))
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
    return found


def _debug_from_settings() -> bool:
    try:
        return load_settings().debug
    except AgentJobsError:
        return False  # the bad value is reported by the command that reads the settings


def _database_problem(exc: Exception) -> str | None:
    from agent_jobs.cli.database_errors import database_problem  # noqa: PLC0415

    try:
        return database_problem(exc, load_settings().database_url)
    except AgentJobsError:
        return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    debug = args.debug or _debug_from_settings()
    try:
        result = args.func(args)
        return int(result or 0)
    except AgentJobsError as exc:
        print(f"agent-jobs: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("agent-jobs: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        problem = _database_problem(exc)
        if problem is not None:
            print(f"agent-jobs: error: {problem}", file=sys.stderr)
            return EXIT_NO_DATABASE
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"agent-jobs: error: {type(exc).__name__}: {first}", file=sys.stderr)
        print("agent-jobs: (run with --debug for the traceback)", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    raise SystemExit(main())
