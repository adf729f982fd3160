"""The arguments many `agent-jobs` commands share, each with its help written once.

Each helper adds its argument exactly as the commands spelled it before (flag, dest, type,
default, required): what `--help` says is shared, never what a command line parses to.
"""

from __future__ import annotations

import argparse
from typing import Literal

JSON_TEXT = "print JSON instead of text"
BENCH_JSON = "print the figures as one JSON object (and no progress lines on stderr)"

# What `--tenant` does to a command, as the store applies it.
TenantRole = Literal["owner", "wall", "filter", "scope"]
_TENANT: dict[TenantRole, str] = {
    # Required: the tenant the command acts for.
    "owner": "the tenant id: 1-63 characters of a-z, 0-9, '_', '-', '.', starting alphanumeric",
    # One record by id: another tenant's is answered as not found.
    "wall": "only if it belongs to this tenant (another tenant's is not found); default: any",
    # A list: only this tenant's rows.
    "filter": "only this tenant's (default: every tenant's)",
    # An operator switch: one tenant or all of them.
    "scope": "one tenant (default: every tenant)",
}


def add_json(p: argparse.ArgumentParser, text: str = JSON_TEXT) -> None:
    """`--json`: the same records as one JSON document."""
    p.add_argument("--json", action="store_true", help=text)


def add_tenant(p: argparse.ArgumentParser, role: TenantRole, *, given: str = "") -> None:
    """`--tenant`: required only for `owner` (the tenant acted for); `given`: the option it
    applies with, where it does nothing without it."""
    text = f"with {given}: {_TENANT[role]}" if given else _TENANT[role]
    if role == "owner":
        p.add_argument("--tenant", required=True, help=text)
    else:
        p.add_argument("--tenant", help=text)


def add_limit(p: argparse.ArgumentParser, default: int, what: str) -> None:
    """`--limit`: at most this many rows, `what` saying which and in what order."""
    p.add_argument(
        "--limit", type=int, default=default, help=f"at most this many {what} (default %(default)s)"
    )


def add_task_id(p: argparse.ArgumentParser, text: str = "the task's id (tsk_...)") -> None:
    """The positional `task_id`."""
    p.add_argument("task_id", help=text)


def add_reason(p: argparse.ArgumentParser, record: str, default: str | None = None) -> None:
    """`--reason`: why, kept in `record` beside who; required unless it has a default."""
    text = f"why (recorded in {record})"
    if default is None:
        p.add_argument("--reason", required=True, help=text)
    else:
        p.add_argument("--reason", default=default, help=f"{text}; default %(default)s")


def add_as(p: argparse.ArgumentParser, record: str) -> None:
    """`--as WHO` (dest `as_user`, required): the person acting, kept in `record`."""
    p.add_argument(
        "--as", dest="as_user", required=True, help=f"who is acting (recorded in {record})"
    )


def add_actor(p: argparse.ArgumentParser, record: str, default: str) -> None:
    """`--actor`: who is acting, with a default (the release commands')."""
    p.add_argument(
        "--actor",
        default=default,
        help=f"who is acting (recorded in {record}); default %(default)s",
    )


def add_workers(p: argparse.ArgumentParser, default: int, text: str = "worker processes") -> None:
    """`--workers`: a benchmark's worker processes (Celery, solo pool, each its own process)."""
    p.add_argument("--workers", type=int, default=default, help=f"{text} (default %(default)s)")
