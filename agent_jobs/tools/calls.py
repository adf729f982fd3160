"""What goes into the executor (a call, its context, the policy stamp) and what comes out."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from agent_jobs.core.contracts import Frozen

UnknownReason = Literal["timeout", "connection_error", "server_error_after_send"]


class PolicyStamp(Frozen):
    """The policy decision that authorised a side-effecting call, as the orchestrator recorded it.

    `action_hash` is the hash the decision (and any approval) was made on; the executor recomputes
    the hash from the arguments it is about to send and refuses the call if they differ.
    """

    decision: Literal["allow", "approved"]
    action_hash: str
    policy_version: str
    approval_id: str | None = None


class ToolCall(Frozen):
    """One call to execute. `idempotency_key` is the key recorded with the intent (keyed tools)."""

    tool: str
    args: dict[str, Any]
    idempotency_key: str | None = None
    policy_decision: PolicyStamp | None = None


class ExecContext(Frozen):
    """Trusted context of the call: from the task row, never from the model."""

    tenant_id: str
    task_id: str
    trace_id: str
    step_scope: str
    request_id: str


class Ok(Frozen):
    """The tool answered and, for a write, applied the request (or replayed an earlier apply)."""

    kind: Literal["ok"] = "ok"
    result: Any = None
    status_code: int | None = None


class Rejected(Frozen):
    """Nothing was applied. `transient`: the same call may succeed later (outage, rate limit)."""

    kind: Literal["rejected"] = "rejected"
    code: str
    message: str = ""
    transient: bool = False


class Unknown(Frozen):
    """A write may or may not have been applied: reconcile by idempotency key, never re-send."""

    kind: Literal["unknown"] = "unknown"
    reason: UnknownReason
    message: str = ""


class Throttled(Frozen):
    """The service refused the call *before applying it* because of load (HTTP 429, or 503 with
    `Retry-After`): nothing happened, and the same call, with the same idempotency key, may be
    sent again after `retry_after_s` seconds (None: the service gave no usable hint).

    Neither a rejection (the action is fine, only not now) nor an unknown outcome (nothing was
    applied, so there is nothing to reconcile). `retry_after_s` is already bounded to
    `[0, MAX_RETRY_AFTER_S]` whatever the service sent."""

    kind: Literal["throttled"] = "throttled"
    retry_after_s: float | None = None
    code: str = "throttled"
    message: str = ""
    status: int | None = None
    # Held back by an operator's switch (effects stopped, read-only, tool disabled, credentials
    # revoked), not by the service: the caller waits as long as the switch is on.
    by_operator: bool = False


Outcome = Ok | Rejected | Unknown | Throttled
ToolOutcome = Annotated[Outcome, Field(discriminator="kind")]
