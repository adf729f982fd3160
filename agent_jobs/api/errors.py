"""API errors: one exception type, the mapping from the core's typed errors, and the handlers
that render every error as `{"error": {"code", "message"}}` with the right status."""

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
    NotFound,
    UnknownWorkflow,
)
from agent_jobs.store.store import UNAVAILABLE

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An error response: status, stable code, message for a person, extra headers."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


def unauthorized(message: str) -> ApiError:
    """A 401 with the bearer challenge."""
    # RFC 6750 3: a bearer challenge tells the client which scheme to use.
    return ApiError(
        401, "unauthorized", message, {"WWW-Authenticate": 'Bearer error="invalid_token"'}
    )


def from_core(exc: AgentJobsError) -> ApiError:
    """The HTTP face of a core error. Anything unexpected is a 500 with no internals in it."""
    if isinstance(exc, NotFound):
        return ApiError(404, exc.code, str(exc))
    if isinstance(exc, IdempotencyConflict):
        # draft-ietf-httpapi-idempotency-key-header: reuse with another payload is a 422.
        return ApiError(422, exc.code, str(exc))
    if isinstance(exc, UnknownWorkflow | InvalidInput):
        return ApiError(422, exc.code, str(exc))
    if isinstance(exc, ApprovalError):
        return ApiError(409, exc.code, str(exc))
    log.error("unmapped %s: %s", type(exc).__name__, exc)
    return ApiError(500, "internal_error", "internal error")


def error_response(status: int, code: str, message: str, headers: Any = None) -> JSONResponse:
    """An `ErrorBody` response."""
    body = ErrorBody.model_validate({"error": {"code": code, "message": message}})
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


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


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


def install_handlers(app: FastAPI) -> None:
    """Every error the app can raise renders as an `ErrorBody`."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.headers or None)

    @app.exception_handler(AgentJobsError)
    async def _core_error(request: Request, exc: AgentJobsError) -> JSONResponse:
        err = from_core(exc)
        return error_response(err.status, err.code, err.message, err.headers or None)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(422, "invalid_request", _validation_message(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        # Keep the framework's headers (e.g. `Allow` on a 405).
        return error_response(exc.status_code, code, message, getattr(exc, "headers", None))

    async def _database_down(request: Request, exc: Exception) -> JSONResponse:
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc)
        return error_response(503, "unavailable", "the database is unavailable; retry later")

    for cls in UNAVAILABLE:
        app.add_exception_handler(cls, _database_down)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "internal error")
