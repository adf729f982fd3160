"""Task commands: submit, status, events, cancel, approvals, approve, deny, dead-letters.

Every identifier given on the command line is checked by the same functions the API and the
Celery intake use (`core.identity`, full match: a trailing newline is not part of a valid id),
so a value one entry point accepts the others accept; a bad one is one line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from pydantic import ValidationError

from agent_jobs.cli.args import add_json, add_limit, add_task_id, add_tenant
from agent_jobs.cli.output import approval_line, event_line, task_text, to_json
from agent_jobs.cli.reading import reading_store
from agent_jobs.core.contracts import TaskRequest, validation_message
from agent_jobs.core.errors import InvalidInput, RecordNotFound
from agent_jobs.core.identity import check_idempotency_key, check_subject, check_tenant_id
from agent_jobs.core.text import is_clean

# Task and approval ids as the store makes them (`tsk_...`, `apr_...`), as the API's path rule.
_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")


def _runtime() -> Any:
    from agent_jobs.queue.runtime import get_runtime  # noqa: PLC0415 - Celery loads lazily

    return get_runtime()


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"--input is not valid JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(value, dict):
        raise InvalidInput("--input must be a JSON object")
    return value


def _checked(check: Any, value: str, what: str) -> str:
    try:
        return str(check(value))
    except ValueError as exc:
        raise InvalidInput(f"{what}: {exc}") from None


def _check_id(value: str) -> str:
    if not _ID.fullmatch(value):
        raise ValueError("must be 1-80 characters of letters, digits, '_' or '-'")
    return value


def _check_note(value: str) -> str:
    if not is_clean(value) or len(value) > 200:
        raise ValueError("must be at most 200 characters, without NUL or lone surrogates")
    return value


# argument name -> (check, how it is spelled on the command line)
_CHECKS: dict[str, tuple[Any, str]] = {
    "tenant": (check_tenant_id, "--tenant"),
    "key": (check_idempotency_key, "--key"),
    "requester": (check_subject, "--requester"),
    "as_user": (check_subject, "--as"),
    "note": (_check_note, "--note"),
    "task_id": (_check_id, "task id"),
    "id": (_check_id, "id"),
}


def _check_args(args: argparse.Namespace) -> None:
    """Check every identifier the command was given (None: an option left out)."""
    for name, (check, what) in _CHECKS.items():
        value = getattr(args, name, None)
        if value is not None:
            _checked(check, value, what)


def cmd_submit(args: argparse.Namespace) -> int:
    _check_args(args)
    tenant, key = str(args.tenant), str(args.key)
    raw = sys.stdin.read() if args.input == "-" else args.input
    try:
        request = TaskRequest(workflow=args.workflow, input=_json_object(raw))
    except ValidationError as exc:
        raise InvalidInput(validation_message(exc)) from None
    from agent_jobs.cli import submit as bounded  # noqa: PLC0415

    def say(line: str) -> None:
        print(f"agent-jobs submit: {line}", file=sys.stderr, flush=True)

    # Every wait bounded, a watchdog saying what it waits on, an answer within bounded.BUDGET_S.
    with bounded.bounded_waits(), bounded.Watch(say, bounded.end_now) as watch:
        try:
            result, unsent = bounded.submit(
                lambda: _runtime().orchestrator.submit(
                    tenant, key, request, requester=args.requester, via="cli"
                ),
                watch,
            )
        except bounded.Unanswered as exc:
            say(str(exc))
            return bounded.EXIT_UNANSWERED
    rt = _runtime()
    if args.json:
        print(
            to_json(
                {
                    "task_id": result.task.id,
                    "created": result.created,
                    "status": result.task.status.value,
                    "trace_id": result.task.trace_id,
                }
            )
        )
    else:
        print(result.task.id)
        if not result.created:
            print(f"(existing task for key {key!r}: {result.task.status.value})", file=sys.stderr)
        if rt.settings.embedded:
            print("(embedded mode: a running `agent-jobs run` picks it up)", file=sys.stderr)
    if unsent is not None:
        say(bounded.unsent_message(result.task.id, unsent))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    _check_args(args)
    with reading_store() as store:
        view = store.get(args.task_id, args.tenant).view()
    print(to_json(view) if args.json else task_text(view))
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    _check_args(args)
    with reading_store() as store:
        events = store.events(args.task_id, args.tenant)
    if args.json:
        print(to_json(events))
    else:
        for e in events:
            print(event_line(e))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    _check_args(args)
    result = _runtime().orchestrator.cancel(args.task_id, args.tenant)
    view = result.task.view()
    if not result.accepted:
        print(f"{view.task_id} is already {view.status.value}; nothing to cancel", file=sys.stderr)
        return 1
    print(
        f"{view.task_id} cancel requested ({view.status.value}; cancelled at its next step boundary"
        + (
            ", or after its effect is resolved)"
            if view.status.value in ("EXECUTING", "EXEC_UNKNOWN")
            else ")"
        )
    )
    return 0


def _resolve_approval(rt: Any, ident: str, tenant: str | None) -> str:
    if ident.startswith("apr_"):
        return ident
    pending = rt.store.list_approvals(tenant, status="pending", task_id=ident)
    if not pending:
        rt.store.get(ident, tenant)  # RecordNotFound if the task does not exist either
        raise RecordNotFound(f"task {ident} has no pending approval")
    return str(pending[0].approval_id)


def _decide(args: argparse.Namespace, grant: bool) -> int:
    _check_args(args)
    rt = _runtime()
    approval_id = _resolve_approval(rt, args.id, args.tenant)
    view = rt.orchestrator.decide_approval(
        approval_id, args.as_user, grant=grant, tenant_id=args.tenant, note=args.note
    )
    print(f"{view.approval_id} {view.status} by {view.approver} (task {view.task_id})")
    if view.group_id is not None:
        # A plan's effects were decided together: say what each of them now is.
        for a in rt.store.approval_group(view.approval_id, args.tenant):
            if a.approval_id != view.approval_id:
                print(f"  with {a.approval_id} {a.status} {a.tool} {a.action_hash}")
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    return _decide(args, True)


def cmd_deny(args: argparse.Namespace) -> int:
    return _decide(args, False)


def cmd_approvals(args: argparse.Namespace) -> int:
    _check_args(args)
    with reading_store() as store:
        rows = store.list_approvals(
            args.tenant, status=None if args.status == "all" else args.status
        )
    if args.json:
        print(to_json(rows))
    else:
        for a in rows:
            print(approval_line(a) + (f" group={a.group_id}" if a.group_id else ""))
        if not rows:
            print(f"(no {args.status} approvals)", file=sys.stderr)
    return 0


def cmd_dead_letters(args: argparse.Namespace) -> int:
    _check_args(args)
    with reading_store() as store:
        rows = store.dead_letters(args.tenant, limit=args.limit)
    if args.json:
        print(to_json(rows))
    else:
        for d in rows:
            print(
                f"{d.task_id}  {d.tenant_id}  {d.workflow}  attempts={d.attempts}  "
                f"{d.at:%Y-%m-%d %H:%M:%S}  {d.reason}"
            )
        if not rows:
            print("(no dead letters)", file=sys.stderr)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("submit", help="submit a task; prints its id")
    add_tenant(p, "owner")
    p.add_argument(
        "--key", required=True, help="idempotency key: the same key returns the same task"
    )
    p.add_argument("--workflow", required=True, help="name@version, e.g. example@1")
    p.add_argument(
        "--input", default="{}", help="the workflow input as a JSON object, or - for stdin"
    )
    p.add_argument("--requester", default="cli", help="who is asking (an approver must differ)")
    add_json(p, "print a JSON object: task_id, created, status, trace_id")
    p.set_defaults(func=cmd_submit)

    p = sub.add_parser("status", help="show a task")
    add_task_id(p)
    add_tenant(p, "wall")
    add_json(p, "print the task's view as JSON")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("events", help="show a task's event log (its trace)")
    add_task_id(p)
    add_tenant(p, "wall")
    add_json(p, "print the events as a JSON list")
    p.set_defaults(func=cmd_events)

    p = sub.add_parser("cancel", help="request cancellation (honoured at the next step boundary)")
    add_task_id(p)
    add_tenant(p, "wall")
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser("approvals", help="list approvals")
    add_tenant(p, "filter")
    p.add_argument(
        "--status",
        default="pending",
        choices=["pending", "granted", "denied", "expired", "used", "void", "all"],
        help="only approvals in this state; all: any state (default %(default)s)",
    )
    add_json(p, "print the approvals as a JSON list")
    p.set_defaults(func=cmd_approvals)

    for name, func, verb in (("approve", cmd_approve, "grant"), ("deny", cmd_deny, "deny")):
        p = sub.add_parser(
            name,
            help=f"{verb} a pending approval (by approval id or task id); an approval of a "
            "plan's group is decided with its whole group",
        )
        p.add_argument("id", help="apr_... or tsk_...")
        p.add_argument(
            "--as", dest="as_user", required=True, help="the approver (never the requester)"
        )
        add_tenant(p, "wall")
        p.add_argument(
            "--note",
            default="",
            help="a note kept with the decision (at most 200 characters; default none)",
        )
        p.set_defaults(func=func)

    p = sub.add_parser("dead-letters", help="list tasks that exhausted their retries")
    add_tenant(p, "filter")
    add_limit(p, 100, "dead letters, newest first")
    add_json(p, "print the dead letters as a JSON list")
    p.set_defaults(func=cmd_dead_letters)
