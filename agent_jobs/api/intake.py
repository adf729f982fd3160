"""Intake: the one submission path behind `POST /v1/tasks` and the Celery-native
`agent_jobs.submit`, so both apply the same rules in the same order:

1. the tenant and requester come from the verified token (the caller did that: `Principal`);
2. the idempotency key and the request are validated; an unknown workflow is refused;
3. admission control (the tenant's token bucket): refused means nothing is created;
4. `Orchestrator.submit`: the workflow's own input check (`InvalidInput` with the field: nothing
   created, the key not consumed, so a corrected payload with the same key succeeds), then
   create-or-get on (tenant, key) and publish the first step; the same key with another payload
   raises `IdempotencyConflict`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ValidationError

from agent_jobs.api.admission import Admission
from agent_jobs.api.auth import Principal
from agent_jobs.core.contracts import TaskRequest, validation_message
from agent_jobs.core.errors import AgentJobsError, InvalidInput, UnknownWorkflow
from agent_jobs.core.identity import check_idempotency_key
from agent_jobs.obs.metrics import PrometheusObserver
from agent_jobs.store import CreateResult

MAX_DEPTH = 32


class SubmitRateLimited(AgentJobsError):
    """The tenant's bucket is empty: nothing was created; retry after `retry_after_s`."""

    code = "rate_limited"

    def __init__(self, tenant_id: str, retry_after_s: int) -> None:
        super().__init__(
            f"tenant {tenant_id!r} is over its submission rate; retry after {retry_after_s} s"
        )
        self.tenant_id = tenant_id
        self.retry_after_s = retry_after_s


class InvalidIdempotencyKey(AgentJobsError):
    """The key is missing or not 1-255 printable ASCII characters."""

    code = "invalid_idempotency_key"


class _Submitter(Protocol):
    def submit(
        self,
        tenant_id: str,
        idempotency_key: str,
        request: TaskRequest,
        *,
        requester: str,
        via: str = "python",
    ) -> CreateResult: ...


class _Workflows(Protocol):
    def __contains__(self, key: object) -> bool: ...

    def names(self) -> list[str]: ...


def check_key(raw: str | None) -> str:
    """The idempotency key, validated; `InvalidIdempotencyKey` otherwise."""
    if raw is None or raw == "":
        raise InvalidIdempotencyKey("the Idempotency-Key header is required")
    try:
        return check_idempotency_key(raw)
    except ValueError as exc:
        raise InvalidIdempotencyKey(str(exc)) from None


def check_depth(value: Any, path: str = "input", depth: int = 0) -> None:
    """Refuse absurd nesting (the hash and the database recurse through it). NUL, lone surrogates
    and non-finite numbers need no check here: `TaskRequest` applies the content rule
    (`core.text.clean_json`) to the input whichever entry point built it."""
    if depth > MAX_DEPTH:
        raise InvalidInput(f"{path}: nested deeper than {MAX_DEPTH} levels", field=path)
    if isinstance(value, Mapping):
        for k, v in value.items():
            check_depth(v, f"{path}.{k}", depth + 1)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            check_depth(v, f"{path}[{i}]", depth + 1)


def parse_request(raw: Mapping[str, Any] | Any, workflows: _Workflows) -> TaskRequest:
    """A `TaskRequest` from untrusted data; `InvalidInput` or `UnknownWorkflow` otherwise."""
    if not isinstance(raw, Mapping):
        raise InvalidInput("the request must be a JSON object with `workflow` and `input`")
    try:
        request = TaskRequest.model_validate(dict(raw))
    except ValidationError as exc:
        errors = exc.errors()
        field = ".".join(str(p) for p in errors[0].get("loc", ())) if errors else None
        raise InvalidInput(validation_message(exc), field=field or None) from None
    check_depth(request.input)
    if request.workflow not in workflows:
        raise UnknownWorkflow(request.workflow, workflows.names())
    return request


@dataclass
class Intake:
    """Validated, admitted, created (or found)."""

    orchestrator: _Submitter
    workflows: _Workflows
    admission: Admission
    metrics: PrometheusObserver

    def submit(
        self, principal: Principal, idempotency_key: str, request: TaskRequest, *, via: str
    ) -> CreateResult:
        verdict = self.admission.admit(principal.tenant_id)
        if verdict.error:
            self.metrics.admission_error()
        if not verdict.allowed:
            self.metrics.rate_limited(principal.tenant_id)
            raise SubmitRateLimited(principal.tenant_id, verdict.retry_after_s)
        # The orchestrator counts the creation (once, whichever door the task came in by).
        return self.orchestrator.submit(
            principal.tenant_id, idempotency_key, request, requester=principal.subject, via=via
        )


def payload_size(raw: Any) -> int:
    """Bytes of a JSON value as sent (for the Celery intake's size limit)."""
    try:
        return len(json.dumps(raw, ensure_ascii=False, default=str).encode("utf-8", "replace"))
    except (TypeError, ValueError):
        return 0
