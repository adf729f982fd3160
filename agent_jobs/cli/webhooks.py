"""`agent-jobs webhooks ...`: a tenant's webhook endpoints and deliveries, from the database.

    agent-jobs webhooks add --tenant T URL --events task.completed,approval.requested
    agent-jobs webhooks list --tenant T
    agent-jobs webhooks rotate|enable|disable|remove --tenant T ENDPOINT
    agent-jobs webhooks deliveries --tenant T [--status dead] [--endpoint E] [--task ID]
    agent-jobs webhooks replay --tenant T (--msg MSG_ID | --endpoint E)

The same service as `/v1/webhooks` (the same URL check, limits and tenant walls). A replayed
delivery is made due; the `webhooks` sweeper sends it within a sweep interval.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from agent_jobs.cli.args import add_json, add_limit, add_tenant

ENDPOINT = "the endpoint's id, as `webhooks list` shows it"


def _service() -> Any:
    from agent_jobs.config import settings  # noqa: PLC0415 - keep `--help` fast
    from agent_jobs.notify.service import WebhookService  # noqa: PLC0415
    from agent_jobs.store.webhooks import WebhookStore  # noqa: PLC0415

    cfg = settings()
    return WebhookService(WebhookStore.from_url(cfg.database_url), cfg)


def _endpoint_line(e: Any) -> str:
    state = (
        "enabled"
        if e.disabled_at is None
        else f"DISABLED ({e.disabled_reason}) since {e.disabled_at:%Y-%m-%d %H:%M:%S}"
    )
    failing = f"  failing since {e.failing_since:%Y-%m-%d %H:%M:%S}" if e.failing_since else ""
    return f"{e.id}  {state}  {','.join(e.event_types)}  {e.url}{failing}"


def _print(value: Any, as_json: bool, line: Any) -> None:
    rows = value if isinstance(value, list) else [value]
    if as_json:
        print(json.dumps([asdict(r) for r in rows], default=str, indent=2, sort_keys=True))
    else:
        for r in rows:
            print(line(r))


def cmd_add(args: argparse.Namespace) -> int:
    events = [e.strip() for e in args.events.split(",") if e.strip()]
    reg = _service().register(args.tenant, args.url, events, args.description)
    print(_endpoint_line(reg.endpoint))
    print(f"secret (shown once): {reg.secret}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    _print(_service().endpoints(args.tenant), args.json, _endpoint_line)
    return 0


def cmd_rotate(args: argparse.Namespace) -> int:
    reg = _service().rotate(args.tenant, args.endpoint)
    print(f"new secret (shown once; the old one signs beside it for a day): {reg.secret}")
    return 0


def _enabled(value: bool) -> Any:
    def run(args: argparse.Namespace) -> int:
        print(_endpoint_line(_service().update(args.tenant, args.endpoint, enabled=value)))
        return 0

    return run


def cmd_remove(args: argparse.Namespace) -> int:
    _service().delete(args.tenant, args.endpoint)
    print(f"removed {args.endpoint}")
    return 0


def _delivery_line(d: Any) -> str:
    answer = f"HTTP {d.last_status}" if d.last_status else (d.last_error or "")
    return (
        f"{d.msg_id}  {d.status:<9} {d.event_type:<24} task {d.task_id}  "
        f"attempts {d.attempts}  {answer}"
    ).rstrip()


def cmd_deliveries(args: argparse.Namespace) -> int:
    found = _service().deliveries(
        args.tenant,
        status=args.status,
        endpoint_id=args.endpoint,
        task_id=args.task,
        limit=args.limit,
    )
    _print(found, args.json, _delivery_line)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    ids = _service().replay(args.tenant, msg_id=args.msg, endpoint_id=args.endpoint)
    print(f"{len(ids)} dead deliver{'y' if len(ids) == 1 else 'ies'} made due again")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("webhooks", help="a tenant's webhook endpoints and their deliveries")
    cmds = p.add_subparsers(dest="webhooks_command", metavar="ACTION", parser_class=type(p))
    cmds.required = True

    def command(name: str, func: Any, help_: str) -> Any:
        c = cmds.add_parser(name, help=help_)
        add_tenant(c, "owner")
        c.set_defaults(func=func)
        return c

    c = command("add", cmd_add, "register an endpoint; prints its signing secret once")
    c.add_argument("url", help="where deliveries are POSTed (checked as the API checks it)")
    c.add_argument("--events", required=True, help="comma-separated event types")
    c.add_argument(
        "--description", default="", help="a note of what it is for (first 200 characters kept)"
    )
    c = command("list", cmd_list, "the tenant's endpoints")
    add_json(c, "print the endpoints as a JSON list")
    for name, func, help_ in (
        ("rotate", cmd_rotate, "a new signing secret (the old one signs beside it for a day)"),
        ("enable", _enabled(True), "enable (after a day of failures disabled it)"),
        ("disable", _enabled(False), "stop sending to it"),
        ("remove", cmd_remove, "remove it, its secrets and its deliveries"),
    ):
        command(name, func, help_).add_argument("endpoint", help=ENDPOINT)
    c = command("deliveries", cmd_deliveries, "deliveries, newest first")
    c.add_argument(
        "--status",
        choices=("pending", "delivered", "dead"),
        help="only deliveries in this state (default: any)",
    )
    c.add_argument("--endpoint", help="only this endpoint's (its id, as `webhooks list` shows)")
    c.add_argument("--task", help="only the deliveries of this task's events (its id)")
    add_limit(c, 50, "deliveries, newest first")
    add_json(c, "print the deliveries as a JSON list")
    c = command("replay", cmd_replay, "send dead deliveries again, with their webhook-id")
    which = c.add_mutually_exclusive_group(required=True)
    which.add_argument("--msg", help="one delivery's webhook-id")
    which.add_argument("--endpoint", help="every dead delivery of this endpoint")
