"""Service commands: `api`, `token`, `worker` (with its metrics exporter) and `flower`."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import shutil
import sys
import tempfile
from typing import Any

from agent_jobs.cli.args import add_tenant
from agent_jobs.config import settings
from agent_jobs.core.errors import ConfigError, InvalidInput
from agent_jobs.core.identity import check_tenant_id


def cmd_api(args: argparse.Namespace) -> int:
    """The HTTP API under uvicorn (one process; run several behind a balancer to scale)."""
    import uvicorn  # noqa: PLC0415

    from agent_jobs.api import create_app  # noqa: PLC0415
    from agent_jobs.api.auth import require_token_key  # noqa: PLC0415

    cfg = settings()
    require_token_key(cfg)
    uvicorn.run(
        create_app(),
        host=args.host or cfg.api_host,
        port=args.port if args.port is not None else cfg.api_port,
        log_level=args.loglevel,
        proxy_headers=True,
    )
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    """Print a development token (HS256, signed with AGENT_JOBS_JWT_SECRET)."""
    from agent_jobs.api.auth import mint_token  # noqa: PLC0415

    try:
        check_tenant_id(args.tenant)
    except ValueError as exc:
        raise InvalidInput(f"--tenant: {exc}") from None
    if args.ttl < 1:
        raise InvalidInput("--ttl must be at least 1 second")
    print(
        mint_token(
            settings(), tenant_id=args.tenant, subject=args.sub, roles=args.role, ttl_s=args.ttl
        )
    )
    return 0


def _multiprocess_dir(requested: str | None) -> str:
    """A fresh directory for this worker's metric files, removed when it exits: stale files of
    a previous run (or of another worker with the same pids) must not be summed in."""
    if requested:
        os.makedirs(requested, exist_ok=True)
        for name in os.listdir(requested):
            if name.endswith(".db"):
                os.unlink(os.path.join(requested, name))
        return requested
    path = tempfile.mkdtemp(prefix="agent-jobs-metrics-")
    atexit.register(shutil.rmtree, path, True)
    return path


def cmd_worker(args: argparse.Namespace) -> int:
    """`celery -A agent_jobs worker ...`, plus a metrics exporter for all its processes.

    With a metrics port, prometheus-client runs in multiprocess mode: the environment variable
    is set here, before anything imports prometheus_client, and inherited by the pool's
    children; this process serves the sum of every process's files on the port.
    """
    from agent_jobs.tools.credentials import tool_secret  # noqa: PLC0415

    # Before Celery starts: outside the embedded mode a missing tool secret is one line naming
    # it and exit status 2 (`celery -A agent_jobs worker` gets the same check at `worker_init`).
    tool_secret(settings())
    from agent_jobs.queue.reach import exit_if_unreachable  # noqa: PLC0415

    # Before Celery starts (its banner, its broker retries): one line if Postgres or the broker
    # does not answer. `celery -A agent_jobs worker` gets the same check at `worker_init`.
    exit_if_unreachable("agent-jobs worker", settings())
    port = args.metrics_port if args.metrics_port is not None else settings().worker_metrics_port
    if port is not None:
        if "prometheus_client" in sys.modules:
            raise RuntimeError("prometheus_client was imported before multiprocess mode was set")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = _multiprocess_dir(args.metrics_dir)
        from prometheus_client import start_http_server  # noqa: PLC0415

        from agent_jobs.obs.metrics import exposition_registry  # noqa: PLC0415

        start_http_server(port, addr=args.metrics_addr, registry=exposition_registry())
        print(f"agent-jobs worker: metrics on {args.metrics_addr}:{port}/metrics", flush=True)
    from agent_jobs.queue.app import app  # noqa: PLC0415

    celery_args = [a for a in args.celery_args if a != "--"]
    app.worker_main(["worker", *celery_args])
    return 0


_LOCAL_ADDRESSES = ("", "127.0.0.1", "localhost", "::1")


def _require_flower_auth(options: Any, *, unauthenticated: bool) -> None:
    """Flower can revoke tasks, shut workers down and read every task's arguments: it runs only
    behind authentication (`--basic-auth` / FLOWER_BASIC_AUTH, or Flower's OAuth `--auth`), or,
    for one person on their own machine, explicitly unauthenticated and bound to 127.0.0.1."""
    if options.basic_auth or options.auth:
        return
    if not unauthenticated:
        raise ConfigError(
            "flower needs authentication: set FLOWER_BASIC_AUTH=user:password (or pass "
            "-- --basic-auth=user:password, or Flower's --auth for OAuth); for local use only, "
            "--unauthenticated serves it on 127.0.0.1"
        )
    if options.address not in _LOCAL_ADDRESSES:
        raise ConfigError(
            f"flower --unauthenticated serves on 127.0.0.1 only, not on {options.address!r}: "
            "set FLOWER_BASIC_AUTH=user:password to serve it on another address"
        )
    options.address = "127.0.0.1"
    # Flower's HTTP API (queue lengths for scripts) is off without authentication unless asked.
    os.environ["FLOWER_UNAUTHENTICATED_API"] = "true"


def cmd_flower(args: argparse.Namespace) -> int:
    """Flower, re-inspecting the workers every `--refresh-s` seconds.

    Flower lists the queues the workers consume (their `active_queues`), but inspects them only
    at start; tenant queues are added while workers run, so plain Flower would not show a new
    tenant until its page is refreshed by hand. This runs Flower with a periodic inspection.
    """
    from flower.app import Flower  # noqa: PLC0415
    from flower.command import (  # noqa: PLC0415
        apply_env_options,
        apply_options,
        extract_settings,
        setup_logging,
    )
    from flower.urls import settings as flower_settings  # noqa: PLC0415
    from tornado.ioloop import PeriodicCallback  # noqa: PLC0415
    from tornado.options import options  # noqa: PLC0415

    from agent_jobs.queue.app import app  # noqa: PLC0415

    refresh_s = args.refresh_s if args.refresh_s is not None else settings().flower_refresh_s
    flower_args = [a for a in args.flower_args if a != "--"]
    apply_env_options()
    apply_options("flower", flower_args)
    _require_flower_auth(options, unauthenticated=args.unauthenticated)
    if not any(a.startswith(("--enable_events", "--enable-events")) for a in flower_args) and (
        "FLOWER_ENABLE_EVENTS" not in os.environ
    ):
        # Flower turns the workers' task events on by default: three extra publishes per step
        # that queue lengths do not need. They follow AGENT_JOBS_TASK_EVENTS, as in the workers.
        options.enable_events = settings().task_events
    extract_settings()
    setup_logging()
    server = Flower(capp=app, options=options, **flower_settings)
    atexit.register(server.stop)
    port = server.start_http_server()
    print(f"agent-jobs flower: http://{options.address or '127.0.0.1'}:{port}/", flush=True)
    if refresh_s > 0:
        PeriodicCallback(server.update_workers, refresh_s * 1000).start()
    with contextlib.suppress(KeyboardInterrupt, SystemExit):
        server.start()
    return 0


def register(sub: Any) -> None:
    """Add `api`, `token`, `worker` and `flower` to the `agent-jobs` command line."""
    p = sub.add_parser("api", help="serve the HTTP API (uvicorn)")
    p.add_argument("--host", default=None, help="default AGENT_JOBS_API_HOST or 127.0.0.1")
    p.add_argument("--port", type=int, default=None, help="default AGENT_JOBS_API_PORT or 8000")
    p.add_argument(
        "--loglevel",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="uvicorn's log level (default %(default)s)",
    )
    p.set_defaults(func=cmd_api)

    p = sub.add_parser("token", help="mint a development bearer token (HS256)")
    add_tenant(p, "owner")
    p.add_argument("--sub", required=True, help="the subject: who is calling")
    p.add_argument(
        "--role",
        action="append",
        default=[],
        help="a role: approver, operator or release_manager (repeatable)",
    )
    p.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds (default 3600)")
    p.set_defaults(func=cmd_token)

    p = sub.add_parser(
        "worker",
        help="a Celery worker with a metrics exporter for all its processes",
        description="Runs `celery -A agent_jobs worker` with the arguments after `--`.",
    )
    p.add_argument("--metrics-port", type=int, default=None, help="serve /metrics on this port")
    p.add_argument(
        "--metrics-addr",
        default="0.0.0.0",
        help="the address /metrics is served on, with a metrics port (default %(default)s)",
    )
    p.add_argument("--metrics-dir", default=None, help="multiprocess directory (default: temp)")
    p.add_argument("celery_args", nargs=argparse.REMAINDER, help="-- then celery worker options")
    p.set_defaults(func=cmd_worker)

    p = sub.add_parser(
        "flower",
        help="Flower, refreshing the workers' tenant queues periodically",
        description="Runs Flower on the agent_jobs app with the arguments after `--`.",
    )
    p.add_argument("--refresh-s", type=float, default=None, help="default 5 s; 0 turns it off")
    p.add_argument(
        "--unauthenticated",
        action="store_true",
        help="local use only: no authentication, served on 127.0.0.1 (otherwise "
        "FLOWER_BASIC_AUTH=user:password or -- --basic-auth=user:password is required)",
    )
    p.add_argument("flower_args", nargs=argparse.REMAINDER, help="-- then Flower options")
    p.set_defaults(func=cmd_flower)
