"""The webhook outbox: the events a transition causes, written in the transition's transaction.

`transition.apply` calls `record` after its compare-and-set matched, on the same connection: one
`webhook_deliveries` row per (event, subscribed endpoint), so an event exists exactly when the
status change that caused it does (a rollback takes both, a commit keeps both). Workers deliver
the rows later (`notify.delivery`); a crash between commit and delivery loses nothing.

The hot path pays nothing for a tenant without an endpoint: most patches cause no event (a
read step, a retry), and for the few that do (a task's end, an approval) this process's
`EndpointPresence` answers from memory. It is re-read after `PRESENCE_TTL_S`, so an endpoint
registered in another process receives the events of transitions committed from at most that
long after its registration (its own process forgets its answer at once). Payloads follow
the redaction rule: ids, statuses, links and, for an approval, what an approver decides on (the
tool, the amount, the policy's reason), never task input, model text or tool arguments.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy import Connection, Engine, insert, select

from agent_jobs.core.park import PARK_KEY, THROTTLES_KEY, Park, ParkReason, park_of
from agent_jobs.core.patch import ApprovalRequest, GroupMember, Patch
from agent_jobs.core.states import TERMINAL, Status
from agent_jobs.core.text import cut
from agent_jobs.store.ids import new_id
from agent_jobs.store.rows import TaskRow
from agent_jobs.store.schema import webhook_deliveries, webhook_endpoints
from agent_jobs.store.types import db_now

log = logging.getLogger(__name__)

# Every event type an endpoint may ask for, listed once: the API's validation, the CLI's help
# and the README derive from it.
TASK_FINISHED = {
    Status.COMPLETED: "task.completed",
    Status.ESCALATED: "task.escalated",
    Status.FAILED: "task.failed",
    Status.CANCELLED: "task.cancelled",
}
APPROVAL_REQUESTED = "approval.requested"
APPROVAL_EXPIRING = "approval.expiring"
TASK_PARKED = "task.parked_by_operator"
TASK_DEAD_LETTERED = "task.dead_lettered"
# One of the tenant's endpoints failed for a day and was disabled: told to its other endpoints
# (never to the disabled one), written in the transaction that disabled it.
ENDPOINT_DISABLED = "endpoint.disabled"
EVENT_TYPES: tuple[str, ...] = (
    *TASK_FINISHED.values(),
    APPROVAL_REQUESTED,
    APPROVAL_EXPIRING,
    TASK_PARKED,
    TASK_DEAD_LETTERED,
    ENDPOINT_DISABLED,
)
# The console's page of pending approvals (it lists them; it has no route to one approval).
CONSOLE_APPROVALS = "/console/#approvals"
# An action's arguments are never sent; these two say what an approver decides on (`amount_minor`
# in the currency's minor unit), and only as a number and a short code.
_AMOUNT_KEYS = ("amount_minor", "currency")
_MAX_ARGS_SCANNED = 32  # a hostile action may carry thousands of arguments


@dataclass(frozen=True)
class Event:
    type: str
    data: dict[str, Any]


@dataclass
class Planned:
    """What `Store.transition` decided before its write: the events, and (filled by `record`)
    the delivery rows written, for the publish after the commit."""

    tenant_id: str
    events: list[Event]
    delivery_ids: list[int] = field(default_factory=list)


def links(task_id: str) -> dict[str, str]:
    """Where a receiver reads more (relative to the API's address: the body is built without it).
    Console links are the console's own routes (`#timeline/<task>`, `#approvals`, `#queues`)."""
    return {"task": f"/v1/tasks/{task_id}", "console": f"/console/#timeline/{task_id}"}


def events_of(task: TaskRow, patch: Patch) -> list[Event]:
    """The events `patch` causes for `task` (pure; most patches cause none)."""
    out: list[Event] = []
    base = {
        "task_id": task.id,
        "workflow": task.workflow,
        "from_status": task.status.value,
        "status": patch.to.value,
        "event": patch.event,
        "trace_id": task.trace_id,
        "links": links(task.id),
    }
    finished = TASK_FINISHED.get(patch.to)
    if finished is not None:
        out.append(Event(finished, base))
    if patch.dead_letter is not None:
        out.append(Event(TASK_DEAD_LETTERED, {**base, "attempts": patch.attempts}))
    req = patch.approval_request
    if req is not None:
        action = req.action
        amount = _amount(action.args)
        out.append(
            Event(
                APPROVAL_REQUESTED,
                {
                    **base,
                    "approval_id": req.approval_id,
                    "action": {"tool": action.tool, "tool_version": action.tool_version, **amount},
                    "action_hash": action.action_hash,
                    "policy_version": req.policy_version,
                    "policy_reason": cut(req.reason, 300),
                    "expires_in_s": req.ttl_s,
                    **_group(req),
                    "links": {
                        **links(task.id),
                        "approval": f"/v1/approvals/{req.approval_id}",
                        "console": CONSOLE_APPROVALS,
                    },
                },
            )
        )
    held = lever_park(patch)
    # A lever's park repeats every poll while the lever holds: only its first is news. The
    # count is the park's own (runtime's throttle counter, dropped when the effect goes through).
    if held is not None and _park_count(patch) == 1:
        out.append(Event(TASK_PARKED, {**base, "reason": held.detail}))
    return out


def _group(req: ApprovalRequest) -> dict[str, Any]:
    """A plan's approval (`Agent(approve_plan=True)`) names every effect decided with it, in the
    plan's order, under the same redaction rule as the head: tool, hash, amount, reason."""
    if not req.members:
        return {}
    head = GroupMember(req.approval_id, req.action, req.reason)
    return {
        "group": [
            {
                "approval_id": m.approval_id,
                "tool": m.action.tool,
                "tool_version": m.action.tool_version,
                "action_hash": m.action.action_hash,
                **_amount(m.action.args),
                "policy_reason": cut(m.reason, 300),
            }
            for m in (head, *req.members)
        ]
    }


def lever_park(patch: Patch) -> Park | None:
    """The park `patch` writes when an operator's lever holds the task's effect: read from its
    explicit park reason (`runtime["park"]`, invariant 12), never inferred from other fields."""
    if patch.to is not Status.RETRY_WAIT or patch.state is None:
        return None
    runtime = patch.state.get("runtime")
    if not isinstance(runtime, dict) or PARK_KEY not in runtime:
        return None
    try:
        park = park_of(Status.RETRY_WAIT, runtime)
    except ValueError:
        return None
    return park if park is not None and park.reason is ParkReason.HELD_BY_OPERATOR else None


def _park_count(patch: Patch) -> int | None:
    runtime = (patch.state or {}).get("runtime") or {}
    count = (runtime.get(THROTTLES_KEY) or {}).get("count")
    return count if isinstance(count, int) else None


def endpoint_disabled_event(endpoint: Any, dead_lettered: int) -> Event:
    """`endpoint.disabled` for an endpoint row (a mapping) just disabled after failing for
    `webhook_disable_after_s`: which one, since when, why (our own words and its last answer)
    and how many of its deliveries were dead-lettered with it; never its URL (a URL may carry a
    token of the receiver's) nor any payload."""
    endpoint_id = endpoint["id"]
    return Event(
        ENDPOINT_DISABLED,
        {
            "endpoint_id": endpoint_id,
            "disabled_at": _iso(endpoint["disabled_at"]),
            "failing_since": _iso(endpoint["failing_since"]),
            "reason": cut(str(endpoint["disabled_reason"] or ""), 300),
            "dead_lettered": dead_lettered,
            "links": {
                "endpoint": f"/v1/webhooks/{endpoint_id}",
                "dead": f"/v1/webhooks/deliveries?status=dead&endpoint_id={endpoint_id}",
                "console": "/console/#queues",
            },
        },
    )


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat()


def _amount(args: Any) -> dict[str, Any]:
    """The amounts of an action, the one exception to the redaction rule: `amount_minor` and
    `currency`, and any other argument in minor units (`*_minor`, an integer, e.g. a price)."""
    if not isinstance(args, dict):
        return {}
    out = {k: args[k] for k in _AMOUNT_KEYS if _short_scalar(args.get(k))}
    for k, v in list(args.items())[:_MAX_ARGS_SCANNED]:
        if (
            isinstance(k, str)
            and k.endswith("_minor")
            and len(k) <= 64
            and type(v) is int
            and abs(v) < 10**18
        ):
            out.setdefault(k, v)
    return out


def expiring_event(approval: Any) -> Event:
    """`approval.expiring` for an approval row (a mapping) still pending near its expiry."""
    task_id, approval_id = approval["task_id"], approval["id"]
    return Event(
        APPROVAL_EXPIRING,
        {
            "task_id": task_id,
            "approval_id": approval_id,
            "action": {
                "tool": approval["tool"],
                "tool_version": approval["tool_version"],
                **_amount(approval["args"]),
            },
            "policy_version": approval["policy_version"],
            "policy_reason": cut(str(approval["reason"]), 300),
            "expires_at": approval["expires_at"].isoformat(),
            "links": {
                **links(task_id),
                "approval": f"/v1/approvals/{approval_id}",
                "console": CONSOLE_APPROVALS,
            },
        },
    )


def _short_scalar(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, str) and 0 < len(value) <= 8)


class EndpointPresence:
    """Per process: which tenants have an enabled endpoint, each answer kept `ttl_s` seconds."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._known: dict[tuple[int, str], tuple[bool, float]] = {}
        self._lock = threading.Lock()

    def has(self, engine: Engine, tenant_id: str, conn: Connection | None = None) -> bool:
        """On `conn` when given (SQLite's step holds the write lock: another connection would
        wait for it), else on a connection of its own."""
        key = (id(engine), tenant_id)
        now = time.monotonic()
        hit = self._known.get(key)
        if hit is not None and hit[1] > now:
            return hit[0]
        q = (
            select(webhook_endpoints.c.id)
            .where(
                (webhook_endpoints.c.tenant_id == tenant_id)
                & webhook_endpoints.c.disabled_at.is_(None)
            )
            .limit(1)
        )
        if conn is not None:
            found = conn.execute(q).first() is not None
        else:
            with engine.connect() as own:
                found = own.execute(q).first() is not None
        with self._lock:
            self._known[key] = (found, now + self.ttl_s)
        return found

    def forget(self, tenant_id: str | None = None) -> None:
        """An endpoint of `tenant_id` (or any) was added, changed or removed in this process."""
        with self._lock:
            if tenant_id is None:
                self._known.clear()
            else:
                for key in [k for k in self._known if k[1] == tenant_id]:
                    del self._known[key]


PRESENCE_TTL_S = 2.0
PRESENCE = EndpointPresence(PRESENCE_TTL_S)


def plan(
    engine: Engine, task: TaskRow, patch: Patch, conn: Connection | None = None
) -> Planned | None:
    """Before `Store.transition` picks its connection: the events to record, or None (the
    patch causes none, or the tenant has no endpoint): then the write stays one statement."""
    if not _may_cause(patch):
        return None
    events = events_of(task, patch)
    if not events or not PRESENCE.has(engine, task.tenant_id, conn):
        return None
    return Planned(task.tenant_id, events)


def _may_cause(patch: Patch) -> bool:
    # The cheap test first: a read step's patch (the hot path) answers here.
    return (
        patch.to in TERMINAL
        or patch.approval_request is not None
        or patch.dead_letter is not None
        or lever_park(patch) is not None
    )


def record(conn: Connection, task: TaskRow, patch: Patch, planned: Planned | None = None) -> None:
    """Inside the transition's transaction: the outbox rows of the events `patch` causes, one per
    endpoint of the task's tenant that wants it. Without `planned` (a sweeper's or a replay's
    transition, always in a transaction of its own) the events are worked out here."""
    if planned is NOTHING:
        return
    if planned is None:
        if not _may_cause(patch):
            return
        planned = Planned(task.tenant_id, events_of(task, patch))
        if not planned.events:
            return
    endpoints = conn.execute(
        select(webhook_endpoints.c.id, webhook_endpoints.c.event_types).where(
            (webhook_endpoints.c.tenant_id == task.tenant_id)
            & webhook_endpoints.c.disabled_at.is_(None)
        )
    ).all()
    rows = []
    for event in planned.events:
        body = body_of(event)
        for endpoint_id, wanted in endpoints:
            if event.type in (wanted or ()):
                rows.append(delivery_values(endpoint_id, task.tenant_id, task.id, event.type, body))
    if rows:
        stmt = insert(webhook_deliveries).values(rows).returning(webhook_deliveries.c.id)
        planned.delivery_ids.extend(sorted(int(i) for i in conn.execute(stmt).scalars()))


def body_of(event: Event) -> str:
    """The payload as Standard Webhooks shapes it: type, timestamp, data; sent byte for byte the
    same at every attempt (it is stored so)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return orjson.dumps({"type": event.type, "timestamp": stamp, "data": event.data}).decode()


def delivery_values(
    endpoint_id: str, tenant_id: str, task_id: str | None, event_type: str, body: str
) -> dict[str, Any]:
    return {
        "msg_id": new_id("msg"),
        "endpoint_id": endpoint_id,
        "tenant_id": tenant_id,
        "task_id": task_id,
        "event_type": event_type,
        "body": body,
        "status": "pending",
        "attempts": 0,
        "next_attempt_at": db_now(),
        "created_at": db_now(),
        "updated_at": db_now(),
    }


# An empty plan: `Store.transition` found nothing to record, so `record` does nothing (and, on
# a connection that commits each statement, must not: its rows would not be atomic).
NOTHING = Planned("", [])


def _autocommits(conn: Connection) -> bool:
    # psycopg2's client-side switch (`Backend.autocommit` on Postgres); sqlite3 never has it True.
    return getattr(conn.connection.dbapi_connection, "autocommit", None) is True


@contextmanager
def atomic(engine: Engine, conn: Connection | None) -> Iterator[Connection]:
    """Where a transition with outbox rows runs: `conn` when its statements share one
    transaction (SQLite's step connection), else a transaction of its own."""
    if conn is not None and not _autocommits(conn):
        yield conn
    else:
        with engine.begin() as tx:
            yield tx


Notifier = Callable[[str, list[int]], None]
_notifiers: list[Notifier] = []


def on_commit(notifier: Notifier) -> None:
    """Called with (tenant, delivery ids) after a transition's outbox rows commit: the queue
    publishes their delivery at once (the sweeper finds any it did not)."""
    if notifier not in _notifiers:
        _notifiers.append(notifier)


def committed(planned: Planned | None) -> None:
    if planned is not None:
        publish(planned.tenant_id, planned.delivery_ids)


def publish(tenant_id: str, delivery_ids: list[int]) -> None:
    """Hand committed deliveries to whoever sends them (`on_commit`); without one (a process
    with no queue) the sweeper finds them due."""
    if not delivery_ids:
        return
    for notify in _notifiers:
        try:
            notify(tenant_id, list(delivery_ids))
        except Exception:
            # The rows are committed: the sweeper delivers what this publish did not.
            log.exception("publishing webhook deliveries %s failed", delivery_ids)
