"""Operations: database migrations, sweepers, an in-process worker, the demo."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from typing import Any

from agent_jobs.config import env_name, settings
from agent_jobs.orchestrator.sweep_kinds import KINDS


def _redacted_url(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in creds else f"{scheme}://{user}@{host}"
    return url


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    from agent_jobs.store.engine import make_engine  # noqa: PLC0415
    from agent_jobs.store.migrate import current_revision, upgrade  # noqa: PLC0415

    url = settings().database_url
    engine = make_engine(url)
    before = current_revision(engine)
    upgrade(engine, args.revision)
    after = current_revision(engine)
    print(f"{_redacted_url(url)}: {before or 'empty'} -> {after}")
    engine.dispose()
    return 0


def cmd_db_current(args: argparse.Namespace) -> int:
    from agent_jobs.store.engine import make_engine  # noqa: PLC0415
    from agent_jobs.store.migrate import current_revision, head_revision  # noqa: PLC0415

    engine = make_engine(settings().database_url)
    cur, head = current_revision(engine), head_revision(engine)
    print(
        f"current {cur or 'empty'}  head {head}"
        + ("" if cur == head else "  (run: agent-jobs db upgrade)")
    )
    engine.dispose()
    return 0 if cur == head else 1


def cmd_sweep(args: argparse.Namespace) -> int:
    from agent_jobs.queue.runtime import get_runtime  # noqa: PLC0415

    sweepers = get_runtime().sweepers
    if args.kind == "all":
        report = sweepers.all()
        for kind, count in report.counts.items():
            print(f"{kind:<10} {count}")
        return 0
    print(f"{args.kind:<10} {sweepers.run(args.kind)}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Worker (thread pool) and beat in this process until interrupted."""
    from agent_jobs.queue.embedded import EmbeddedWorker  # noqa: PLC0415
    from agent_jobs.queue.runtime import get_runtime  # noqa: PLC0415
    from agent_jobs.tools.credentials import tool_secret  # noqa: PLC0415

    tool_secret(settings())  # on a real broker, no tool secret: one line naming it, exit 2
    logging.basicConfig(
        level=args.loglevel.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    rt = get_runtime()
    if args.migrate:
        from agent_jobs.store.migrate import upgrade  # noqa: PLC0415

        upgrade(rt.store.engine)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    mode = "embedded" if rt.settings.embedded else "broker"
    print(
        f"agent-jobs run: {mode} mode, database {_redacted_url(rt.settings.database_url)}, "
        f"broker {_redacted_url(rt.settings.broker_url)}, {args.concurrency} threads"
        + (", beat on" if not args.no_beat else ""),
        flush=True,
    )
    with EmbeddedWorker(
        concurrency=args.concurrency, beat_enabled=not args.no_beat, loglevel=args.loglevel.upper()
    ):
        print("agent-jobs run: ready (Ctrl-C to stop)", flush=True)
        stop.wait()
    print("agent-jobs run: stopped", flush=True)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from agent_jobs.demo import run_demo  # noqa: PLC0415

    return run_demo(args.scenario, quiet=args.quiet)


def cmd_config(args: argparse.Namespace) -> int:
    """The settings in force (validated: a bad value is one line each), or the schema's table."""
    from agent_jobs.config import markdown_table  # noqa: PLC0415

    if args.markdown:
        print(markdown_table())
        return 0
    current = settings()
    for name, value in current.model_dump().items():
        shown = value
        if name in ("jwt_secret", "tool_secret") and value:
            shown = "***"
        elif isinstance(value, str) and "url" in name:
            shown = _redacted_url(value)
        print(f"{env_name(name)}={'' if shown is None else shown}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "config", help="print the settings in force (secrets masked), or the table of all"
    )
    p.add_argument("--markdown", action="store_true", help="the README's configuration table")
    p.set_defaults(func=cmd_config)

    p = sub.add_parser("db", help="database schema")
    dbsub = p.add_subparsers(dest="db_command", metavar="SUBCOMMAND")
    dbsub.required = True
    u = dbsub.add_parser("upgrade", help="apply the migrations (creates the schema on first run)")
    u.add_argument(
        "--revision",
        default="head",
        help="the Alembic revision to upgrade to, e.g. 0003 (db/versions/; default %(default)s)",
    )
    u.set_defaults(func=cmd_db_upgrade)
    c = dbsub.add_parser("current", help="show the schema revision; exit 1 if not at head")
    c.set_defaults(func=cmd_db_current)

    p = sub.add_parser("sweep", help="run a sweeper once (beat runs them on a schedule)")
    p.add_argument(
        "kind", choices=[*KINDS, "all"], help="which sweeper; all: each of them once, in turn"
    )
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("run", help="run a worker (thread pool) and beat in this process")
    p.add_argument(
        "--concurrency", type=int, default=4, help="worker threads (default %(default)s)"
    )
    p.add_argument("--no-beat", action="store_true", help="do not run the sweepers here")
    p.add_argument("--migrate", action="store_true", help="apply migrations first")
    p.add_argument(
        "--loglevel",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="the lowest level of log line printed (default %(default)s)",
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("demo", help="run the incident end to end on the embedded default")
    p.add_argument(
        "scenario",
        nargs="?",
        default="refund",
        choices=["refund", "example"],
        help="refund: seed 004's order 8472, charged twice, against the simulated business "
        "systems; example: a payout through a lost response and a killed worker "
        "(default %(default)s)",
    )
    p.add_argument("--quiet", action="store_true", help="print only the timeline and the checks")
    p.set_defaults(func=cmd_demo)
