"""Typed errors. Each carries what a person needs to act on it."""

from __future__ import annotations

from agent_jobs.core.holds import HoldReason


class AgentJobsError(Exception):
    """Base class. `code` is stable and machine-readable; the message is for people."""

    code = "agent_jobs_error"


class IllegalTransition(AgentJobsError):
    code = "illegal_transition"

    def __init__(self, frm: str, to: str) -> None:
        super().__init__(f"illegal transition {frm} -> {to}")
        self.frm = frm
        self.to = to


class StaleTransition(AgentJobsError):
    """The compare-and-set found another version or lease epoch: this worker lost ownership."""

    code = "stale_transition"

    def __init__(self, task_id: str, version: int, lease_epoch: int) -> None:
        super().__init__(
            f"task {task_id}: commit at version {version} / lease epoch {lease_epoch} is stale "
            "(another worker or a sweeper moved the task on)"
        )
        self.task_id = task_id
        self.version = version
        self.lease_epoch = lease_epoch


class IdempotencyConflict(AgentJobsError):
    code = "idempotency_key_reused"

    def __init__(self, tenant_id: str, idempotency_key: str) -> None:
        super().__init__(
            f"idempotency key {idempotency_key!r} of tenant {tenant_id!r} was already used "
            "with a different payload"
        )
        self.tenant_id = tenant_id
        self.idempotency_key = idempotency_key


class RecordNotFound(AgentJobsError):
    code = "not_found"


class InvalidInput(AgentJobsError):
    """A workflow's input is not valid. `field` names the offending field (a dotted path, e.g.
    `input.order_id`) when one can be named; the API answers 422 with it."""

    code = "invalid_input"

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class ApprovalError(AgentJobsError):
    """An approval cannot be decided: unknown, already decided, expired, or self-approval."""

    code = "approval_refused"

    def __init__(self, approval_id: str, reason: str) -> None:
        super().__init__(f"approval {approval_id}: {reason}")
        self.approval_id = approval_id
        self.reason = reason


class SelfApproval(ApprovalError):
    """The approver is the requester (compared by `core.identity.principal`, so case, width
    and spacing variants of one name are one person). The API answers 403 `self_approval`."""

    code = "self_approval"

    def __init__(self, approval_id: str) -> None:
        super().__init__(approval_id, "the approver cannot be the requester")


class UnknownWorkflow(AgentJobsError):
    code = "unknown_workflow"

    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown workflow {name!r}; known: {', '.join(sorted(known))}")
        self.name = name


class ConfigError(AgentJobsError):
    code = "config_error"


class Deferred(AgentJobsError):
    """A step cannot run now for want of a shared resource (e.g. the global model-call cap).

    Raised from a workflow hook, it ends the step without a transition: the task is held at the
    dispatch gate — no lease, no message, no worker — until the resource frees up. It is not a
    failure and costs no retry attempt.
    """

    code = "deferred"
    hold_for: str = HoldReason.DEFERRED.value


class EffectKeyConflict(AgentJobsError, ValueError):
    """An intent presented under an effect key that cannot take it: the key already names a
    different action, or its effect was already committed (sending it again is the double
    effect the key exists to prevent; its outcome is on record)."""

    code = "effect_key_conflict"
