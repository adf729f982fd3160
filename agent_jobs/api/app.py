"""`create_app`: the FastAPI application of `agent-jobs api` (run it under uvicorn).

uvicorn --factory agent_jobs.api:create_app --host 0.0.0.0 --port 8000
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent_jobs import __version__
from agent_jobs.api import approvals, ops, tasks
from agent_jobs.api.admission import build_admission
from agent_jobs.api.auth import TokenVerifier
from agent_jobs.api.deps import ApiRuntime, ApiState
from agent_jobs.api.errors import error_response, install_handlers
from agent_jobs.api.intake import Intake
from agent_jobs.api.openapi import install_openapi
from agent_jobs.config import Settings
from agent_jobs.obs.metrics import (
    HTTP_REQUESTS,
    HTTP_SECONDS,
    PrometheusObserver,
    exposition_registry,
)
from agent_jobs.obs.queues import GateCollector, QueueCollector
from agent_jobs.queue.gate import GATE_HOLD, MODEL_CAP


class BodyLimit:
    """413 for a body over `limit` bytes: at once from Content-Length, or as soon as a streamed
    (chunked) body passes the limit, before the application has parsed any of it."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_big = int(value) > self.limit
                except ValueError:
                    too_big = False
                if too_big:
                    await self._refuse(scope, receive, send)
                    return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    # An HTTPException passes through FastAPI's body parsing unchanged (any
                    # other exception there becomes a 400); the handler renders the 413.
                    raise HTTPException(413, self._message())
            return message

        await self.app(scope, limited, send)

    def _message(self) -> str:
        return f"the request body is larger than {self.limit} bytes"

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(413, "payload_too_large", self._message())
        await response(scope, receive, send)


class RequestMetrics:
    """Counts and times requests by route template (`/v1/tasks/{task_id}`), never by raw path:
    a path holds a task id, and a label per task id would be a time series per task."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = str(scope.get("method", "")).upper()
            HTTP_REQUESTS.labels(method, template, str(status)).inc()
            HTTP_SECONDS.labels(method, template).observe(time.perf_counter() - started)


def _broker_ping(settings: Settings) -> Any:
    if not settings.broker_url.startswith(("redis://", "rediss://")):
        return lambda: None  # the in-process broker is always there; others: not probed
    import redis  # noqa: PLC0415

    client = redis.Redis.from_url(settings.broker_url, socket_timeout=2, socket_connect_timeout=2)
    return client.ping


def _queue_collector(runtime: ApiRuntime, settings: Settings) -> list[Any]:
    if not settings.broker_url.startswith(("redis://", "rediss://")):
        return []
    import redis  # noqa: PLC0415

    client = redis.Redis.from_url(settings.broker_url, socket_timeout=2, socket_connect_timeout=2)
    directory = getattr(runtime, "directory", None)

    def tenants() -> list[str]:
        # Active tenants only: the ones workers consume (idle ones are dropped).
        return list(directory.active(settings.tenant_idle_s)) if directory is not None else []

    collectors: list[Any] = [QueueCollector(client, settings.queue_prefix, tenants)]
    store = getattr(runtime, "store", None)
    if store is not None:
        slots = getattr(runtime, "model_slots", None)

        def held() -> dict[str, dict[str, tuple[int, float]]]:
            return {reason: store.held_ages(reason) for reason in (GATE_HOLD, MODEL_CAP)}

        collectors.append(
            GateCollector(
                held,
                lambda: len(tenants()),
                (lambda: (slots.in_use(), slots.limit)) if slots is not None else None,
            )
        )
    return collectors


def create_app(runtime: ApiRuntime | None = None, settings: Settings | None = None) -> FastAPI:
    """The API over `runtime` (default: this process's `queue.runtime.get_runtime()`).

    `settings` overrides the runtime's settings for the API's own concerns (auth, admission,
    body limit); the store, orchestrator and workflows are the runtime's.
    """
    if runtime is None:
        from agent_jobs.queue.runtime import get_runtime  # noqa: PLC0415

        runtime = get_runtime()
    cfg = settings or runtime.settings
    metrics = PrometheusObserver()
    app = FastAPI(
        # Exact paths: a trailing slash is a 404, not a redirect that drops a POST body.
        redirect_slashes=False,
        title="agent_jobs",
        version=__version__,
        description="A durable, multi-tenant job queue for AI-agent tasks. Submit a task with "
        "a bearer token and an `Idempotency-Key`; poll it; read its trace; cancel it; "
        "approvers grant or deny the exact actions a task waits on.",
    )
    app.state.api = ApiState(
        runtime=runtime,
        verifier=TokenVerifier(cfg),
        intake=Intake(
            orchestrator=runtime.orchestrator,
            workflows=runtime.workflows,
            admission=build_admission(cfg),
            metrics=metrics,
        ),
        metrics=metrics,
        registry=exposition_registry(*_queue_collector(runtime, cfg)),
        broker_ping=_broker_ping(cfg),
    )
    install_handlers(app)
    app.include_router(tasks.router)
    app.include_router(approvals.router)
    app.include_router(ops.router)
    # The middleware added last is the outermost: metrics see every response, 413s included.
    app.add_middleware(BodyLimit, limit=cfg.api_max_body_bytes)
    app.add_middleware(RequestMetrics)
    install_openapi(app, runtime.workflows.names(), cfg.api_max_body_bytes)
    return app
