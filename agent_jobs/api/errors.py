"""API errors: one exception type, the mapping from the core's typed errors, and the handlers
that render every error as `{"error": {"code", "message"}}` (plus `field` when one field is at
fault) with the right status. Messages may quote what the caller sent, so they are rendered
through the content rule (`core.text.for_log`): one line, no control or bidi characters, bounded.
Nothing a caller sends can make an error body unencodable (a 500)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from agent_jobs.api.models import ErrorBody
from agent_jobs.core.errors import (
    AgentJobsError,
    ApprovalError,
    IdempotencyConflict,
    InvalidInput,
    RecordNotFound,
    SelfApproval,
    UnknownWorkflow,
)
from agent_jobs.core.text import for_log
from agent_jobs.store.engine import database_error_line
from agent_jobs.store.store import UNAVAILABLE

log = logging.getLogger(__name__)


class HttpError(Exception):
    """An error response: status, stable code, message for a person, extra headers."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: dict[str, str] | None = None,
        *,
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}
        self.field = field


def unauthorized(message: str) -> HttpError:
    """A 401 with the bearer challenge."""
    # RFC 6750 3: a bearer challenge tells the client which scheme to use.
    return HttpError(
        401, "unauthorized", message, {"WWW-Authenticate": 'Bearer error="invalid_token"'}
    )


def from_core(exc: AgentJobsError) -> HttpError:
    """The HTTP face of a core error. Anything unexpected is a 500 with no internals in it."""
    if isinstance(exc, RecordNotFound):
        return HttpError(404, exc.code, str(exc))
    if isinstance(exc, IdempotencyConflict):
        # draft-ietf-httpapi-idempotency-key-header: reuse with another payload is a 422.
        return HttpError(422, exc.code, str(exc))
    if isinstance(exc, InvalidInput):
        return HttpError(422, exc.code, str(exc), field=exc.field)
    if isinstance(exc, UnknownWorkflow):
        return HttpError(422, exc.code, str(exc), field="workflow")
    if isinstance(exc, SelfApproval):
        return HttpError(403, exc.code, "the requester of a task cannot approve its actions")
    if isinstance(exc, ApprovalError):
        return HttpError(409, exc.code, str(exc))
    log.error("unmapped %s: %s", type(exc).__name__, exc)
    return HttpError(500, "internal_error", "internal error")


MESSAGE_MAX_CHARS = 1000
# FastAPI's answer to a body that is not UTF-8 (or not decodable at all): a bare 400. It is the
# same mistake as malformed JSON, which FastAPI answers 422, so it is answered the same way.
_BODY_PARSE_ERROR = "There was an error parsing the body"


def error_response(
    status: int, code: str, message: str, headers: Any = None, *, field: str | None = None
) -> JSONResponse:
    """An `ErrorBody` response; `field` is left out when None."""
    detail: dict[str, Any] = {"code": code, "message": for_log(message, MESSAGE_MAX_CHARS)}
    if field is not None:
        detail["field"] = for_log(field, 200)
    body = ErrorBody.model_validate({"error": detail})
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status, headers=headers)


_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "rate_limited",
}


def _where(err: Any) -> str:
    """The dotted path of one validation error, without FastAPI's `body`/`query` prefix."""
    loc = [str(p) for p in err.get("loc", ())]
    if loc and loc[0] in ("body", "query", "path", "header"):
        loc = loc[1:] or loc[:1]
    return ".".join(loc) or "body"


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    parts = [f"{_where(err)}: {err.get('msg', 'invalid')}" for err in errors[:5]]
    field = _where(errors[0]) if errors else None
    return "; ".join(parts) or "invalid request", field


def install_handlers(app: FastAPI) -> None:
    """Every error the app can raise renders as an `ErrorBody`."""

    @app.exception_handler(HttpError)
    async def _api_error(request: Request, exc: HttpError) -> JSONResponse:
        return error_response(
            exc.status, exc.code, exc.message, exc.headers or None, field=exc.field
        )

    @app.exception_handler(AgentJobsError)
    async def _core_error(request: Request, exc: AgentJobsError) -> JSONResponse:
        err = from_core(exc)
        return error_response(
            err.status, err.code, err.message, err.headers or None, field=err.field
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, field = _validation_message(exc)
        return error_response(422, "invalid_request", message, field=field)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and exc.detail == _BODY_PARSE_ERROR:
            return error_response(
                422, "invalid_request", "the body cannot be parsed as UTF-8 JSON", field="body"
            )
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        # Keep the framework's headers (e.g. `Allow` on a 405).
        return error_response(exc.status_code, code, message, getattr(exc, "headers", None))

    async def _database_down(request: Request, exc: Exception) -> JSONResponse:
        # One line, no statement and no value (`database_error_line`): the cause, for operators.
        log.warning(
            "database unavailable on %s %s: %s",
            request.method,
            request.url.path,
            database_error_line(exc),
        )
        return error_response(503, "unavailable", "the database is unavailable; retry later")

    for cls in UNAVAILABLE:
        app.add_exception_handler(cls, _database_down)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "internal error")
