"""`agent-jobs ops ...`: the incident levers (operator switches), changed with who and why.

    agent-jobs ops list | history
    agent-jobs ops set KIND [--tenant T] [--target X] [--value N] --as WHO --reason WHY
    agent-jobs ops clear KIND [--tenant T] [--target X] --as WHO --reason WHY
    agent-jobs ops disable-tool TOOL / enable-tool TOOL [--tenant T]
    agent-jobs ops read-only T / read-write T
    agent-jobs ops pause / resume [--tenant T] [--workflow W]
    agent-jobs ops stop-effects / start-effects [--tenant T]
    agent-jobs ops revoke-credentials [--tenant T]
    agent-jobs ops autonomy N / autonomy-reset [--tenant T]

Every change needs `--as` and `--reason` (they are the audit record); workers and the API obey it
within a second or two, without a restart.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from agent_jobs.cli.args import add_as, add_json, add_limit, add_reason, add_tenant
from agent_jobs.ops.switches import Kind

AUDIT = "`ops history`, the audit record"
# What each switch does when on; every Kind needs one (building the parser fails without it).
WHAT: dict[Kind, str] = {
    Kind.TOOL_DISABLED: "refuse --target, a tool",
    Kind.READ_ONLY: "only tools without side effects",
    Kind.PAUSED: "hold new steps (of --target, a workflow, or all)",
    Kind.EFFECTS_STOPPED: "side effects wait, reads go on",
    Kind.CREDENTIAL_EPOCH: "void the tool credentials minted so far",
    Kind.AUTONOMY_THRESHOLD: "execute without approval only under --value minor units",
}
TARGET = "the tool (tool_disabled) or workflow, name or name@version (paused); default: none"


def _service() -> Any:
    from agent_jobs.ops.service import from_runtime  # noqa: PLC0415 - Celery loads lazily
    from agent_jobs.queue.runtime import get_runtime  # noqa: PLC0415

    return from_runtime(get_runtime())


def _who(args: argparse.Namespace) -> dict[str, str]:
    return {"actor": args.as_user, "reason": args.reason}


def cmd_list(args: argparse.Namespace) -> int:
    rows = _service().switches()
    if args.json:
        print(json.dumps([r.__dict__ for r in rows], default=str, indent=2, sort_keys=True))
        return 0
    for r in rows:
        where = r.tenant_id or "*"
        target = f" {r.target}" if r.target else ""
        print(f"{r.kind:<20} {where:<16}{target}  value={json.dumps(r.value)}  "
              f"by {r.actor} at {r.changed_at:%Y-%m-%d %H:%M:%S}: {r.reason}")  # fmt: skip
    if not rows:
        print("(no switches on)", file=sys.stderr)
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    rows = _service().history(limit=args.limit)
    if args.json:
        print(json.dumps([r.__dict__ for r in rows], default=str, indent=2, sort_keys=True))
        return 0
    for r in rows:
        what = "off" if r.value is None else f"on value={json.dumps(r.value)}"
        where = r.tenant_id or "*"
        print(f"{r.at:%Y-%m-%d %H:%M:%S}  {r.kind:<20} {where} {r.target}  {what}  "
              f"by {r.actor}: {r.reason}")  # fmt: skip
    return 0


def _set(kind: Kind, *, value: Any = True, target_attr: str | None = None) -> Any:
    def run(args: argparse.Namespace) -> int:
        target = getattr(args, target_attr) if target_attr else ""
        row = _service().set(
            kind.value, tenant_id=args.tenant or "", target=target or "", value=value, **_who(args)
        )
        print(f"{row.kind} on for {row.tenant_id or 'every tenant'} {row.target}".rstrip())
        return 0

    return run


def _clear(kind: Kind, *, target_attr: str | None = None) -> Any:
    def run(args: argparse.Namespace) -> int:
        target = getattr(args, target_attr) if target_attr else ""
        gone = _service().clear(
            kind.value, tenant_id=args.tenant or "", target=target or "", **_who(args)
        )
        print(f"{kind.value} off" if gone else f"{kind.value} was not on")
        return 0

    return run


def cmd_set(args: argparse.Namespace) -> int:
    value: Any = True if args.value is None else json.loads(args.value)
    row = _service().set(
        args.kind, tenant_id=args.tenant or "", target=args.target or "", value=value, **_who(args)
    )
    print(f"{row.kind} on for {row.tenant_id or 'every tenant'} value={json.dumps(row.value)}")
    return 0


def cmd_clear(args: argparse.Namespace) -> int:
    gone = _service().clear(
        args.kind, tenant_id=args.tenant or "", target=args.target or "", **_who(args)
    )
    print(f"{args.kind} off" if gone else f"{args.kind} was not on")
    return 0


def cmd_autonomy(args: argparse.Namespace) -> int:
    return int(_set(Kind.AUTONOMY_THRESHOLD, value=args.minor)(args))


def _change(p: argparse.ArgumentParser, *, tenant: bool = True) -> None:
    if tenant:
        add_tenant(p, "scope")
    add_as(p, AUDIT)
    add_reason(p, AUDIT)


def register(sub: Any) -> None:
    ops = sub.add_parser("ops", help="incident levers: operator switches (durable, audited)")
    cmds = ops.add_subparsers(dest="ops_command", metavar="ACTION", parser_class=type(ops))
    cmds.required = True

    p = cmds.add_parser("list", help="the switches on now")
    add_json(p, "print the switches as a JSON list")
    p.set_defaults(func=cmd_list)
    p = cmds.add_parser("history", help="every change: who, why, when (newest first)")
    add_limit(p, 100, "changes, newest first")
    add_json(p, "print the changes as a JSON list")
    p.set_defaults(func=cmd_history)

    kinds = [k.value for k in Kind]
    p = cmds.add_parser("set", help="turn any switch on (or change its value)")
    p.add_argument("kind", choices=kinds, help="; ".join(f"{k}: {WHAT[k]}" for k in Kind))
    p.add_argument("--target", help=TARGET)
    p.add_argument("--value", help="JSON value for numeric switches (default: true)")
    _change(p)
    p.set_defaults(func=cmd_set)
    p = cmds.add_parser("clear", help="turn any switch off")
    p.add_argument("kind", choices=kinds, help="the switch to turn off")
    p.add_argument("--target", help=TARGET)
    _change(p)
    p.set_defaults(func=cmd_clear)

    for name, func, help_ in (
        ("disable-tool", _set(Kind.TOOL_DISABLED, target_attr="tool"), "refuse a tool"),
        ("enable-tool", _clear(Kind.TOOL_DISABLED, target_attr="tool"), "allow it again"),
    ):
        p = cmds.add_parser(name, help=help_)
        p.add_argument("tool", help="the tool's name, e.g. refunds.create")
        _change(p)
        p.set_defaults(func=func)
    for name, func, help_ in (
        ("read-only", _set(Kind.READ_ONLY), "downgrade a tenant to read-only tools"),
        ("read-write", _clear(Kind.READ_ONLY), "lift the downgrade"),
    ):
        p = cmds.add_parser(name, help=help_)
        p.add_argument("tenant", help="the tenant's id")
        _change(p, tenant=False)
        p.set_defaults(func=func)
    for name, func, help_ in (
        ("pause", _set(Kind.PAUSED, target_attr="workflow"), "hold new steps (drain)"),
        ("resume", _clear(Kind.PAUSED, target_attr="workflow"), "release them, oldest first"),
    ):
        p = cmds.add_parser(name, help=help_)
        p.add_argument("--workflow", help="only this workflow (name or name@version)")
        _change(p)
        p.set_defaults(func=func)
    for name, func, help_ in (
        ("stop-effects", _set(Kind.EFFECTS_STOPPED), "side effects wait; reads go on"),
        ("start-effects", _clear(Kind.EFFECTS_STOPPED), "let waiting effects go"),
        ("revoke-credentials", _set(Kind.CREDENTIAL_EPOCH), "void tool credentials minted so far"),
    ):
        p = cmds.add_parser(name, help=help_)
        _change(p)
        p.set_defaults(func=func)
    p = cmds.add_parser("autonomy", help="execute without approval only under this amount")
    p.add_argument("minor", type=int, help="minor units; 0: every action goes to a person")
    _change(p)
    p.set_defaults(func=cmd_autonomy)
    p = cmds.add_parser("autonomy-reset", help="back to the policy's own thresholds")
    _change(p)
    p.set_defaults(func=_clear(Kind.AUTONOMY_THRESHOLD))
