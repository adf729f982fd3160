"""OpenAPI response declarations shared by the routes, so the schema says exactly what the
handlers and the error handlers send."""

from __future__ import annotations

from typing import Any

from agent_jobs.api.models import ErrorBody

_DESCRIPTIONS = {
    400: "Bad request (e.g. the `Idempotency-Key` header is missing or malformed).",
    401: "Missing, malformed, expired or untrusted bearer token.",
    403: "The token lacks the role this operation needs (`forbidden`), or the caller is the "
    "task's requester (`self_approval`).",
    404: "No such resource for the caller's tenant (another tenant's is also 404).",
    409: "The resource's state does not allow this.",
    413: "The request body is larger than the configured limit.",
    422: "The request is invalid: `invalid_request` (malformed parameters or body, a body that "
    "is not UTF-8 JSON), `invalid_input` (the workflow refused its input: nothing was created "
    "and the key is not consumed), `unknown_workflow`, or `idempotency_key_reused` (the key "
    "was used with a different payload). `field` names the offending field when there is one.",
    429: "The tenant's submission rate is exhausted; nothing was created.",
    503: "The database is unreachable.",
}

_HEADERS: dict[int, dict[str, Any]] = {
    401: {
        "WWW-Authenticate": {
            "description": "The bearer challenge (RFC 6750).",
            "required": True,
            "schema": {"type": "string"},
        }
    },
    429: {
        "Retry-After": {
            "description": "Seconds to wait before the tenant's bucket has a token again.",
            "required": True,
            "schema": {"type": "integer", "minimum": 1},
        }
    },
}

CREATED_HEADERS: dict[str, Any] = {
    "description": "Accepted: the task exists (new, or the one this key already created).",
    "headers": {
        "Location": {
            "description": "The task's URL, `/v1/tasks/{task_id}`.",
            "required": True,
            "schema": {"type": "string"},
        },
        "Idempotent-Replayed": {
            "description": "`true` when the key named an existing task with the same payload.",
            "required": False,
            "schema": {"type": "string", "enum": ["true"]},
        },
    },
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """Error responses (all `ErrorBody`) for the given status codes."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        entry: dict[str, Any] = {"model": ErrorBody, "description": _DESCRIPTIONS[status]}
        if status in _HEADERS:
            entry["headers"] = _HEADERS[status]
        out[status] = entry
    return out


def merge(*parts: dict[Any, dict[str, Any]]) -> dict[int | str, dict[str, Any]]:
    out: dict[int | str, dict[str, Any]] = {}
    for part in parts:
        out.update(part)
    return out
