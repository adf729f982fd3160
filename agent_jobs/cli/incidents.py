"""`agent-jobs incidents tasks ...` and `agent-jobs dead-letters replay ...`.

agent-jobs incidents tasks --release RELEASE_ID [--json]
agent-jobs incidents tasks --since 2026-03-14T10:00Z [--until ...] [--tool refunds.create
    [--tool-version 2]] [--prompt P] [--model-route R] [--workflow W] [--policy-version V]
    [--tenant T] [--json]
agent-jobs dead-letters replay TASK_ID --as WHO --reason WHY
agent-jobs dead-letters replay --all [--tenant T] [--workflow W] [--since ...] --as ... --reason ...
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from datetime import UTC, datetime
from typing import Any

from agent_jobs.cli.args import add_as, add_json, add_limit, add_reason, add_tenant
from agent_jobs.core.errors import InvalidInput


def _service() -> Any:
    from agent_jobs.ops.service import from_runtime  # noqa: PLC0415 - Celery loads lazily
    from agent_jobs.queue.runtime import get_runtime  # noqa: PLC0415

    return from_runtime(get_runtime())


def parse_time(text: str) -> datetime:
    """ISO 8601; `Z` accepted; a time without a zone is UTC."""
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(
            f"{text!r} is not an ISO 8601 time (e.g. 2026-03-14T10:00:00Z)"
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _json(value: Any) -> str:
    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, list):
            return [plain(x) for x in v]
        if hasattr(v, "model_dump"):
            return v.model_dump(mode="json")
        return v

    return json.dumps(plain(value), default=str, indent=2, sort_keys=True)


def _release_tasks(args: argparse.Namespace) -> int:
    """The tasks a release escalated or failed (a reverted canary's exposure)."""
    from agent_jobs.queue.runtime import get_runtime  # noqa: PLC0415
    from agent_jobs.releases.rollout import ReleaseService  # noqa: PLC0415

    rows = ReleaseService(get_runtime().store).escalated_tasks(args.release, limit=args.limit)
    if args.json:
        print(_json(rows))
        return 0
    for t in rows:
        print(f"{t.task_id}  {t.tenant_id}  {t.status}  release={t.release}  "
              f"created {t.created_at:%Y-%m-%d %H:%M:%S}")  # fmt: skip
    if not rows:
        print("(no tasks match)", file=sys.stderr)
    return 0


def cmd_incident_tasks(args: argparse.Namespace) -> int:
    if args.release:
        return _release_tasks(args)
    if not args.since:
        raise InvalidInput("pass --since (a window) or --release (what a release escalated)")
    from agent_jobs.store.ops import IncidentFilter  # noqa: PLC0415 - the store loads when used

    f = IncidentFilter(
        since=parse_time(args.since),
        until=parse_time(args.until) if args.until else datetime.now(UTC),
        tool=args.tool,
        tool_version=args.tool_version,
        prompt=args.prompt,
        model_route=args.model_route,
        workflow=args.workflow,
        policy_version=args.policy_version,
        tenant_id=args.tenant,
    )
    rows = _service().incident_tasks(f, limit=args.limit)
    if args.json:
        print(_json(rows))
        return 0
    for t in rows:
        policies = ",".join(t.policy_versions)
        print(f"{t.task_id}  {t.tenant_id}  {t.workflow}  {t.status}  "
              f"created {t.created_at:%Y-%m-%d %H:%M:%S}  policy={policies}")  # fmt: skip
        for e in t.effects:
            print(f"    effect {e.tool} {e.status} key={e.idempotency_key}")
    if not rows:
        print("(no tasks match)", file=sys.stderr)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    ops = _service()
    if args.all:
        results = ops.replay_matching(
            actor=args.as_user,
            why=args.reason,
            limit=args.limit,
            tenant_id=args.tenant,
            workflow=args.workflow,
            since=parse_time(args.since) if args.since else None,
            until=parse_time(args.until) if args.until else None,
        )
    elif args.task_id:
        results = [ops.replay(args.task_id, actor=args.as_user, why=args.reason)]
    else:
        raise InvalidInput("name a dead letter (its task id) or pass --all with filters")
    for r in results:
        if r.replayed:
            print(f"{r.task_id}  replayed: resumed as {r.resumed_as}")
        else:
            print(f"{r.task_id}  not replayed: {r.reason}")
    if not results:
        print("(no dead letters match)", file=sys.stderr)
    return 0


def register(sub: Any) -> None:
    inc = sub.add_parser("incidents", help="incident queries: which tasks used what, and did what")
    cmds = inc.add_subparsers(dest="incidents_command", metavar="QUERY", parser_class=type(inc))
    cmds.required = True
    p = cmds.add_parser(
        "tasks", help="tasks in a window that used a tool, prompt, route, workflow or policy"
    )
    p.add_argument("--since", help="ISO 8601 (UTC unless a zone is given); needed unless --release")
    p.add_argument(
        "--release",
        help="the tasks this release escalated or failed (e.g. a reverted canary's); "
        "replay one on the incumbent with `agent-jobs release replay`",
    )
    p.add_argument("--until", help="ISO 8601 (default: now)")
    p.add_argument("--tool", help="e.g. refunds.create")
    p.add_argument("--tool-version", help="with --tool: only its effects of this version, e.g. 2")
    p.add_argument("--prompt", help="pinned prompt version, e.g. refund-v7")
    p.add_argument("--model-route", help="pinned model route, e.g. support-tier2@2026-03")
    p.add_argument("--workflow", help="name or name@version")
    p.add_argument("--policy-version", help="a policy version a decision was made under")
    add_tenant(p, "filter")
    add_limit(p, 1000, "tasks, oldest first")
    add_json(p, "print the tasks as a JSON list")
    p.set_defaults(func=cmd_incident_tasks)

    # `dead-letters` (the list) is registered by cli/tasks.py; `replay` hangs under it.
    dead = sub.choices["dead-letters"]
    actions = dead.add_subparsers(dest="dead_letters_command", metavar="ACTION",
                                  parser_class=type(dead))  # fmt: skip
    p = actions.add_parser("replay", help="resume dead-lettered tasks from their checkpoint")
    p.add_argument("task_id", nargs="?", help="the dead letter's task id")
    p.add_argument("--all", action="store_true", help="every dead letter matching the filters")
    add_tenant(p, "filter", given="--all")
    p.add_argument("--workflow", help="with --all: only this workflow's (name or name@version)")
    p.add_argument(
        "--since",
        help="with --all: dead-lettered at or after this ISO 8601 time (UTC unless zoned)",
    )
    p.add_argument("--until", help="with --all: dead-lettered before this ISO 8601 time")
    add_limit(p, 100, "dead letters replayed with --all, oldest first")
    add_as(p, "the task's event")
    add_reason(p, "the task's event")
    p.set_defaults(func=cmd_replay)
