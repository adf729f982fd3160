"""The HTTP API's wire models: what `/v1` sends and returns (also the client's typed results).

Only pydantic here, so `agent_jobs.client` can use these without importing FastAPI. The task view
shows the pending action's identity and hash, never its arguments; approvers see the arguments of
the one action they are asked to decide on (`Approval.args`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent_jobs.api.redaction import redact_outcome, redact_text
from agent_jobs.core.contracts import ApprovalStatus, ApprovalView, EventView, TaskView
from agent_jobs.core.hashing import action_hash
from agent_jobs.core.park import Park, ParkReason
from agent_jobs.core.states import DisplayStatus, Status
from agent_jobs.core.text import clean_text

ID_PATTERN = r"^[A-Za-z0-9_-]{1,80}$"
IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"


class _Model(BaseModel):
    # Clients ignore fields added later; the server never sends undeclared ones.
    model_config = ConfigDict(frozen=True, extra="ignore")


class ErrorDetail(_Model):
    """The `error` object of every error response."""

    code: str = Field(description="Stable, machine-readable error code, e.g. `not_found`.")
    message: str = Field(description="What went wrong, for a person (one line).")
    field: str | None = Field(
        default=None,
        description="The offending field as a dotted path (`input.order_id`, `note`, "
        "`idempotency_key`), when one can be named; absent otherwise.",
    )


class ErrorBody(_Model):
    """Every error response: `{"error": {"code", "message"}}`, plus `field` when the error is
    about one field of the request (422 `invalid_input`, `invalid_request`)."""

    error: ErrorDetail


class TaskCreate(BaseModel):
    """`POST /v1/tasks` body. The tenant and the requester come from the bearer token."""

    model_config = ConfigDict(extra="forbid")

    workflow: str = Field(description="`name@version` of a registered workflow.")
    input: dict[str, Any] = Field(
        default_factory=dict, description="The workflow's input (a JSON object)."
    )


class TaskCreated(_Model):
    """`202` body of `POST /v1/tasks`: the task (new, or the one the key names)."""

    task_id: str
    status: Status
    trace_id: str = Field(description="W3C trace id (32 hex digits) of the task's trace.")


class Parked(_Model):
    """Why a task in RETRY_WAIT waits, and what it does on waking (its park reason)."""

    reason: ParkReason
    resume: Status = Field(description="The status waking leads to.")
    waits_for: str
    on_waking: str
    detail: str = Field(
        description="What happened, redacted: the error, the provider's answer, the lever."
    )

    @classmethod
    def from_park(cls, park: Park) -> Parked:
        return cls(
            reason=park.reason,
            resume=park.resume,
            waits_for=park.waits_for,
            on_waking=park.on_waking,
            detail=redact_text(park.detail),
        )


class PendingAction(_Model):
    """The action a task waits to perform: identity and hash, never the arguments."""

    tool: str
    tool_version: str
    action_hash: str
    idempotency_key: str


class Task(_Model):
    """`GET /v1/tasks/{task_id}`."""

    task_id: str
    tenant_id: str
    workflow: str
    status: Status
    # The core's own list (`core.states.DisplayStatus`): whatever the core reads out, this sends.
    display_status: DisplayStatus = Field(
        description="What a person reads: distinguishes `cancel_requested` from `cancelled`, "
        "names `awaiting_approval` and `confirming_effect`, a task an operator `paused` or "
        "whose effects are `stopped_by_operator`, and one `held_<reason>` at the dispatch gate "
        "(`held_gate`: its tenant's cap or fair share; `held_model_cap`; `held_deferred`; "
        "`held`: a reason this release does not know)."
    )
    cancel_requested: bool
    version: int
    attempts: int
    trace_id: str
    created_at: datetime
    updated_at: datetime
    outcome: dict[str, Any] | None = Field(
        default=None, description="The terminal outcome, once there is one."
    )
    pending_action: PendingAction | None = None
    approval_id: str | None = None
    park: Parked | None = Field(default=None, description="In RETRY_WAIT: why it waits.")

    @classmethod
    def from_view(cls, view: TaskView) -> Task:
        pending = None
        pa = view.pending_action
        if pa and all(isinstance(pa.get(k), str) for k in ("tool", "tool_version")):
            try:
                digest = str(pa.get("action_hash") or "") or action_hash(
                    pa["tool"], pa["tool_version"], pa.get("args") or {}
                )
            except Exception:
                digest = ""
            pending = PendingAction(
                tool=pa["tool"],
                tool_version=pa["tool_version"],
                action_hash=digest,
                idempotency_key=str(pa.get("idempotency_key") or ""),
            )
        return cls(
            task_id=view.task_id,
            tenant_id=view.tenant_id,
            workflow=view.workflow,
            status=view.status,
            display_status=view.display_status,
            cancel_requested=view.cancel_requested,
            version=view.version,
            attempts=view.attempts,
            trace_id=view.trace_id,
            created_at=view.created_at,
            updated_at=view.updated_at,
            # A dead letter's reason quotes an exception: redacted here (operators read it raw).
            outcome=redact_outcome(view.outcome),
            pending_action=pending,
            approval_id=view.approval_id,
            park=Parked.from_park(view.park) if view.park is not None else None,
        )


class Event(_Model):
    """One entry of a task's append-only event log (its trace)."""

    seq: int
    type: str
    from_status: Status | None
    to_status: Status | None
    data: dict[str, Any] = Field(
        description="Redacted: hashes and identities, never raw arguments."
    )
    trace_id: str
    at: datetime

    @classmethod
    def from_view(cls, view: EventView, data: dict[str, Any]) -> Event:
        return cls(
            seq=view.seq,
            type=view.type,
            from_status=view.from_status,
            to_status=view.to_status,
            data=data,
            trace_id=view.trace_id,
            at=view.at,
        )


class EventList(_Model):
    """`GET /v1/tasks/{task_id}/events`."""

    task_id: str
    events: list[Event]


class CancelAccepted(_Model):
    """`202` body of a cancel: the flag is set; the status changes at the next step."""

    task_id: str
    status: Status
    display_status: DisplayStatus
    cancel_requested: bool


class Approval(_Model):
    """One action waiting for (or decided by) a human, with the exact arguments it binds."""

    approval_id: str
    task_id: str
    tool: str
    tool_version: str
    args: dict[str, Any] = Field(description="The exact arguments the grant binds to.")
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
    group_id: str | None = Field(
        default=None,
        description="The group's head approval when several effects of a plan are decided "
        "together (`GET /v1/approvals/{id}/group`); deciding any decides them all.",
    )

    @classmethod
    def from_view(cls, view: ApprovalView) -> Approval:
        data = view.model_dump()
        data.pop("tenant_id")
        return cls(**data)


class ApprovalList(_Model):
    """`GET /v1/approvals`."""

    approvals: list[Approval]


class ApprovalDecision(BaseModel):
    """Optional body of grant and deny."""

    model_config = ConfigDict(extra="forbid")

    note: str = Field(
        default="",
        max_length=200,
        description="Recorded with the decision, as given, by the content rule: a NUL (which no "
        "store can hold) becomes U+FFFD. A lone surrogate escape is not a JSON string the "
        "parser accepts: 422 with `field` `note`.",
    )

    @field_validator("note")
    @classmethod
    def _storable(cls, value: str) -> str:
        return clean_text(value)


class Health(_Model):
    """`GET /healthz`."""

    status: Literal["ok"]


class Readiness(_Model):
    """`GET /readyz`: each dependency's state (`database`, `broker`, `schema`), and when not ready,
    one line saying why."""

    status: Literal["ready", "unavailable"]
    checks: dict[str, Literal["ok", "unavailable", "not_at_head"]]
    reason: str | None = Field(
        default=None, description="Why the API is not ready (one line); absent when ready."
    )
