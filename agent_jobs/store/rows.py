"""Typed snapshots of rows, as the store hands them out."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from sqlalchemy import Row

from agent_jobs.core.contracts import ApprovalView, EffectView, EventView, TaskView
from agent_jobs.core.park import ParkReason, shown_park
from agent_jobs.core.states import Status, display_status


class RowLike(Protocol):
    """What the store reads of a result row: SQLAlchemy's `Row`, or `prepared.RawRow`."""

    @property
    def _mapping(self) -> Mapping[Any, Any]: ...


@dataclass(frozen=True)
class TaskRow:
    id: str
    tenant_id: str
    idempotency_key: str
    payload_hash: str
    workflow: str
    requester: str
    input: dict[str, Any]
    pinned: dict[str, Any]
    status: Status
    version: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    lease_epoch: int
    next_attempt_at: datetime | None
    dispatched_at: datetime | None
    attempts: int
    held_since: datetime | None
    held_for: str | None
    cancel_requested_at: datetime | None
    state: dict[str, Any]
    outcome: dict[str, Any] | None
    event_seq: int
    trace_id: str
    created_at: datetime
    updated_at: datetime
    last_error: str | None = None

    @property
    def cancel_requested(self) -> bool:
        return self.cancel_requested_at is not None

    def view(self) -> TaskView:
        runtime = self.state.get("runtime") or {}
        pending = runtime.get("pending_action")
        park = shown_park(self.status, runtime)
        return TaskView(
            task_id=self.id,
            tenant_id=self.tenant_id,
            status=self.status,
            display_status=display_status(
                self.status,
                self.cancel_requested,
                held_for=self.held_for,
                stopped_by_operator=park is not None and park.reason is ParkReason.HELD_BY_OPERATOR,
            ),
            held_for=self.held_for,
            workflow=self.workflow,
            version=self.version,
            attempts=self.attempts,
            cancel_requested=self.cancel_requested,
            trace_id=self.trace_id,
            created_at=self.created_at,
            updated_at=self.updated_at,
            outcome=self.outcome,
            pending_action=pending if isinstance(pending, dict) else None,
            approval_id=runtime.get("approval_id"),
            last_error=self.last_error,
            park=park,
        )


def task_from_row(row: RowLike) -> TaskRow:
    m = row._mapping
    return TaskRow(
        id=m["id"],
        tenant_id=m["tenant_id"],
        idempotency_key=m["idempotency_key"],
        payload_hash=m["payload_hash"],
        workflow=m["workflow"],
        requester=m["requester"],
        input=m["input"],
        pinned=m["pinned"],
        status=Status(m["status"]),
        version=m["version"],
        lease_owner=m["lease_owner"],
        lease_expires_at=m["lease_expires_at"],
        lease_epoch=m["lease_epoch"],
        next_attempt_at=m["next_attempt_at"],
        dispatched_at=m["dispatched_at"],
        attempts=m["attempts"],
        held_since=m["held_since"],
        held_for=m["held_for"],
        cancel_requested_at=m["cancel_requested_at"],
        state=m["state"],
        outcome=m["outcome"],
        event_seq=m["event_seq"],
        trace_id=m["trace_id"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        last_error=m.get("last_error"),
    )


_FIELDS = frozenset(f.name for f in fields(TaskRow))
# The instants (`datetime`, in the annotations as written): ISO 8601 text in JSON.
_TIMES = tuple(f.name for f in fields(TaskRow) if str(f.type).startswith("datetime"))


def task_to_json(task: TaskRow) -> str:
    """The row as compact JSON (instants in ISO 8601 with their offset): `task_from_json`'s
    input, byte for byte what a signature covers."""
    data = dict(vars(task))
    data["status"] = task.status.value
    for name in _TIMES:
        value = data[name]
        data[name] = None if value is None else value.isoformat()
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def task_from_json(text: str) -> TaskRow:
    """The row `task_to_json` wrote. Raises (ValueError, KeyError, TypeError) on anything else."""
    data = json.loads(text)
    if not isinstance(data, dict) or data.keys() != _FIELDS:
        raise ValueError("not a task row")
    data["status"] = Status(data["status"])
    for name in _TIMES:
        value = data[name]
        data[name] = None if value is None else datetime.fromisoformat(value)
    return TaskRow(**data)


@dataclass(frozen=True)
class Lease:
    """Ownership of one task: the owner name and the fencing epoch, with the row as claimed."""

    task: TaskRow
    owner: str
    epoch: int
    expires_at: datetime

    @property
    def task_id(self) -> str:
        return self.task.id

    @property
    def version(self) -> int:
        return self.task.version


@dataclass(frozen=True)
class PendingEvent:
    """A non-transition event a step recorded (a model call, a tool call's audit record), held
    until the step's next commit writes it in the same transaction. `at` is `time.monotonic()`
    when it happened: the write dates it that long before the database's clock."""

    type: str
    data: dict[str, Any]
    at: float


class Dispatch(NamedTuple):
    """A step message to publish once the transaction that recorded it has committed. `row`:
    the task as that commit left it, when the next step can start from it without a read (a
    quick step after a quick step; see `Orchestrator.run_step`). `claim`: the next step is
    expected to need a lease, so it claims at once (the claim returns the row) instead of
    reading first; a hint only — a step that turns out quick runs under the lease."""

    task_id: str
    tenant_id: str
    row: TaskRow | None = None
    claim: bool = False


@dataclass(frozen=True)
class CreateResult:
    task: TaskRow
    created: bool


@dataclass(frozen=True)
class CommitResult:
    """What `Store.transition` did: the new row (None when the caller asked for none back), the
    lease kept (`Patch.keep_lease`), and the step message to publish now that it committed."""

    task: TaskRow | None
    lease: Lease | None
    dispatch: Dispatch | None


def event_from_row(row: Row[Any]) -> EventView:
    m = row._mapping
    return EventView(
        task_id=m["task_id"],
        seq=m["seq"],
        type=m["type"],
        from_status=Status(m["from_status"]) if m["from_status"] else None,
        to_status=Status(m["to_status"]) if m["to_status"] else None,
        data=m["data"],
        trace_id=m["trace_id"],
        at=m["at"],
    )


def effect_from_row(row: Row[Any]) -> EffectView:
    m = row._mapping
    return EffectView(
        task_id=m["task_id"],
        idempotency_key=m["idempotency_key"],
        tool=m["tool"],
        action_hash=m["action_hash"],
        status=m["status"],
        attempts=m["attempts"],
        result=m["result"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
    )


def approval_from_row(row: RowLike) -> ApprovalView:
    m = row._mapping
    return ApprovalView(
        approval_id=m["id"],
        task_id=m["task_id"],
        tenant_id=m["tenant_id"],
        tool=m["tool"],
        tool_version=m["tool_version"],
        args=m["args"],
        action_hash=m["action_hash"],
        policy_version=m["policy_version"],
        requester=m["requester"],
        approver=m["approver"],
        status=m["status"],
        reason=m["reason"],
        created_at=m["created_at"],
        expires_at=m["expires_at"],
        decided_at=m["decided_at"],
        used_at=m["used_at"],
        group_id=m.get("group_id"),
    )
