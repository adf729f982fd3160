"""Pydantic contracts: what crosses a boundary (API, CLI, client, store reads)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent_jobs.core.hashing import action_hash as compute_action_hash
from agent_jobs.core.identity import (  # noqa: F401 - re-exported for existing callers
    check_idempotency_key,
    check_subject,
    check_tenant_id,
)
from agent_jobs.core.park import Park
from agent_jobs.core.states import DisplayStatus, Status
from agent_jobs.core.text import clean_json

_WORKFLOW = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}@[0-9]{1,6}$")


def validation_message(exc: ValidationError) -> str:
    """One line a person can act on: `field: problem; field: problem`."""
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ())) or "value"
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}")
    return "; ".join(parts) or "invalid value"


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TaskRequest(Frozen):
    """What a caller submits. The tenant and subject come from the verified token, not from here."""

    workflow: str = Field(description="`name@version`, e.g. `refund_resolution@3`")
    input: dict[str, Any] = Field(default_factory=dict)

    @field_validator("workflow")
    @classmethod
    def _workflow(cls, v: str) -> str:
        if not _WORKFLOW.fullmatch(v):
            raise ValueError("workflow must look like name@version, e.g. example@1")
        return v

    @field_validator("input")
    @classmethod
    def _content(cls, v: dict[str, Any]) -> dict[str, Any]:
        # The content rule (core.text) where input enters: what is hashed, stored and decided
        # on is the cleaned value, whichever entry point built the request.
        cleaned: dict[str, Any] = clean_json(v)
        return cleaned


class Action(Frozen):
    """One exact side-effecting call: what policy decides on, an approval binds and a key names."""

    tool: str
    tool_version: str
    args: dict[str, Any]
    idempotency_key: str
    side_effect: Literal["none", "idempotent", "keyed"] = "keyed"

    @field_validator("args")
    @classmethod
    def _content(cls, v: dict[str, Any]) -> dict[str, Any]:
        # The content rule where an action is made (from a model's proposal, a tool's answer, a
        # request): the action hashed, approved, stored and sent is the cleaned one. A lone
        # surrogate left in would make the hash itself fail (UTF-8 cannot spell it).
        cleaned: dict[str, Any] = clean_json(v)
        return cleaned

    @property
    def action_hash(self) -> str:
        return compute_action_hash(self.tool, self.tool_version, self.args)


class TaskView(Frozen):
    task_id: str
    tenant_id: str
    status: Status
    display_status: DisplayStatus
    workflow: str
    version: int
    attempts: int
    cancel_requested: bool
    trace_id: str
    created_at: datetime
    updated_at: datetime
    outcome: dict[str, Any] | None = None
    pending_action: dict[str, Any] | None = None
    approval_id: str | None = None
    # The class and message of the last step that raised, while failures are consecutive.
    last_error: str | None = None
    # Held at the dispatch gate, without a worker: a `core.holds.HoldReason` (`paused` by an
    # operator, `gate` for a cap or fair share, `model_cap`, `deferred`).
    held_for: str | None = None
    # In RETRY_WAIT: why it waits and what it does on waking (`core.park`).
    park: Park | None = None


class EventView(Frozen):
    task_id: str
    seq: int
    type: str
    from_status: Status | None
    to_status: Status | None
    data: dict[str, Any]
    trace_id: str
    at: datetime


# "void": closed without use (the task was cancelled, or policy changed before it was used).
ApprovalStatus = Literal["pending", "granted", "denied", "expired", "used", "void"]


class ApprovalView(Frozen):
    approval_id: str
    task_id: str
    tenant_id: str
    tool: str
    tool_version: str
    args: dict[str, Any]
    action_hash: str
    policy_version: str
    requester: str
    approver: str | None
    status: ApprovalStatus
    reason: str
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None
    used_at: datetime | None
    # The head approval's id when this one is decided with others (a plan of effects).
    group_id: str | None = None


EffectStatus = Literal["intent", "committed", "unknown", "failed"]


class EffectView(Frozen):
    task_id: str
    idempotency_key: str
    tool: str
    action_hash: str
    status: EffectStatus
    attempts: int
    result: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime


class DeadLetterView(Frozen):
    task_id: str
    tenant_id: str
    workflow: str
    reason: str
    attempts: int
    at: datetime
