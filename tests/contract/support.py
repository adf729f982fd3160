"""Helpers for the store contract tests: requests, patches, and SQL that rewrites timestamps
(stalled work is made stale by moving its clock in the database, never by sleeping)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Table, event, func, select, update

from agent_jobs.core.contracts import Action, TaskRequest
from agent_jobs.core.patch import ApprovalRequest, ApprovalUse, EffectWrite, Patch
from agent_jobs.core.states import Status
from agent_jobs.store import Lease, Store, TaskRow
from agent_jobs.store.backend import prepared
from agent_jobs.store.guard import Guard
from agent_jobs.store.schema import approvals, effects, task_events, tasks
from agent_jobs.store.types import db_now_plus

S = Status
OWNER = "worker-a:1"
OTHER = "worker-b:2"


def request(n: int = 1, **extra: Any) -> TaskRequest:
    return TaskRequest(workflow="example@1", input={"n": n, **extra})


def new_task(store: Store, tenant: str, key: str | None = None, **input_: Any) -> TaskRow:
    return store.create_or_get(
        tenant, key or uuid.uuid4().hex, request(**input_), requester="svc:tester"
    ).task


def action(amount: int = 1200, key: str = "refund:req-1:pay_1") -> Action:
    return Action(
        tool="refunds.create",
        tool_version="2",
        args={"payment_id": "pay_1", "amount_minor": amount, "currency": "EUR"},
        idempotency_key=key,
    )


def runtime_state(act: Action, **extra: Any) -> dict[str, Any]:
    """A state whose pending action is `act`: what the lease sweeper reads for EXEC_UNKNOWN."""
    return {"runtime": {"pending_action": act.model_dump(mode="json"), **extra}}


def to(status: Status, event: str = "step", **kw: Any) -> Patch:
    return Patch(to=status, event=event, **kw)


def intent(act: Action, approval_id: str | None = None) -> Patch:
    """RUNNING/APPROVAL_WAIT/EXEC_UNKNOWN -> EXECUTING: the intent, committed before the call."""
    return Patch(
        to=S.EXECUTING,
        event="effect_intent",
        state=runtime_state(act),
        keep_lease=True,
        effect=EffectWrite(act, "intent"),
        approval_use=ApprovalUse(approval_id, "used") if approval_id else None,
    )


def park_for_approval(
    act: Action, approval_id: str, ttl_s: float = 600.0, requester: str = "agent:planner"
) -> Patch:
    return Patch(
        to=S.APPROVAL_WAIT,
        event="approval_requested",
        state=runtime_state(act, approval_id=approval_id),
        wake_in_s=ttl_s,
        approval_request=ApprovalRequest(
            approval_id=approval_id,
            action=act,
            policy_version="refund-policy@7",
            requester=requester,
            reason="over the auto-approve limit",
            ttl_s=ttl_s,
        ),
    )


def claim(store: Store, task_id: str, owner: str = OWNER, ttl_s: float = 30.0) -> Lease:
    lease = store.claim(task_id, owner, ttl_s)
    assert lease is not None, f"{task_id} was not claimable"
    return lease


def running(store: Store, tenant: str, owner: str = OWNER) -> Lease:
    """A fresh task moved RECEIVED -> RUNNING, still leased to `owner`."""
    task = new_task(store, tenant)
    lease = claim(store, task.id, owner)
    result = store.transition(Guard.lease(lease), to(S.RUNNING, "started", keep_lease=True))
    assert result.lease is not None
    return result.lease


def executing(store: Store, tenant: str, act: Action | None = None) -> Lease:
    lease = running(store, tenant)
    result = store.transition(Guard.lease(lease), intent(act or action()))
    assert result.lease is not None
    return result.lease


def shift(store: Store, table: Table, row_id: str, **seconds: float | None) -> None:
    """Set timestamp columns of one row to the database's now plus `seconds` (None: NULL)."""
    values = {col: None if s is None else db_now_plus(s) for col, s in seconds.items()}
    with store.tx() as conn:
        conn.execute(update(table).where(table.c.id == row_id).values(**values))


def expire_lease(store: Store, task_id: str) -> None:
    """The lease lapsed a second ago, as if its worker died."""
    shift(store, tasks, task_id, lease_expires_at=-1.0)


def make_due(store: Store, task_id: str) -> None:
    """The parked task's timer fell due a second ago, after its last dispatch (as when the
    whole wait has passed): what a retry or an approval expiry looks like to the sweepers."""
    shift(store, tasks, task_id, dispatched_at=-5.0, next_attempt_at=-1.0)


def event_types(store: Store, task_id: str) -> list[str]:
    return [e.type for e in store.events(task_id)]


def count(store: Store, table: Table, **where: Any) -> int:
    cond = [table.c[k] == v for k, v in where.items()]
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table).where(*cond)).scalar_one())


def n_events(store: Store, task_id: str) -> int:
    return count(store, task_events, task_id=task_id)


def n_effects(store: Store, task_id: str) -> int:
    return count(store, effects, task_id=task_id)


def n_approvals(store: Store, task_id: str) -> int:
    return count(store, approvals, task_id=task_id)


@contextmanager
def failing_statement(store: Store, fragment: str) -> Iterator[None]:
    """Make the next SQL statement containing `fragment` fail, as a crash or a constraint
    violation in the middle of a transaction would."""

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        # A prepared statement runs as `EXECUTE name(...)`: look inside what it runs.
        if fragment in prepared.sql_of(statement):
            raise RuntimeError(f"injected failure on: {statement[:60]}")

    event.listen(store.engine, "before_cursor_execute", before)
    try:
        yield
    finally:
        event.remove(store.engine, "before_cursor_execute", before)
