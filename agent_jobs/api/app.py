"""`create_app`: the FastAPI application of `agent-jobs api` (run it under uvicorn).

uvicorn --factory agent_jobs.api:create_app --host 0.0.0.0 --port 8000

`/docs` is Swagger UI served from the `swagger-ui-bundle-v2` package's files (no CDN: it works
on a network without the internet); `/openapi.json` is the document it shows. The metrics
exporter (`AGENT_JOBS_API_METRICS_PORT`) starts and stops with the application's lifespan.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from swagger_ui_bundle import swagger_ui_path  # type: ignore[import-untyped,unused-ignore]

from agent_jobs import __version__
from agent_jobs.api import approvals, console_api, operator, ops, releases, tasks, webhooks
from agent_jobs.api.admission import build_admission
from agent_jobs.api.auth import TokenVerifier
from agent_jobs.api.deadline import Deadline
from agent_jobs.api.deps import ApiRuntime, ApiState
from agent_jobs.api.errors import error_response, install_handlers
from agent_jobs.api.intake import Intake
from agent_jobs.api.openapi import install_openapi
from agent_jobs.api.ops import start_metrics_server
from agent_jobs.config import Settings
from agent_jobs.console import install_console
from agent_jobs.obs.metrics import (
    HTTP_REQUESTS,
    HTTP_SECONDS,
    PrometheusObserver,
    exposition_registry,
)
from agent_jobs.obs.queues import GateCollector, QueueCollector
from agent_jobs.queue.gate import GATE_HOLD, MODEL_CAP
from agent_jobs.store.engine import database_error_line as one_line
from agent_jobs.store.migrate import head_revisions, schema_lag

log = logging.getLogger(__name__)

DOCS_ASSETS = "/docs/assets"


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


def _broker_client(settings: Settings) -> Any:
    """The broker's Redis (its server, or its primary through the Sentinels), or None."""
    from agent_jobs.queue.broker_redis import broker_redis, is_redis_broker  # noqa: PLC0415

    if not is_redis_broker(settings.broker_url):
        return None
    return broker_redis(settings.broker_url, settings.sentinel_master, timeout_s=2)


def _broker_ping(settings: Settings) -> Any:
    client = _broker_client(settings)
    if client is None:
        return lambda: None  # the in-process broker is always there; others: not probed
    return client.ping


def _queue_collector(runtime: ApiRuntime, settings: Settings) -> list[Any]:
    client = _broker_client(settings)
    if client is None:
        return []
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


def _schema_check(runtime: ApiRuntime, *, reachable: bool) -> Callable[[], str | None] | None:
    """The readiness check of the schema revision, and one log line now if it is not at head
    (nothing when the database is known unreachable: that was said already)."""
    engine = getattr(runtime.store, "engine", None)
    if engine is None:
        return None
    heads = head_revisions()  # the scripts are read once; each probe is one small query

    def check() -> str | None:
        return schema_lag(engine, heads)

    if not reachable:
        return check
    try:
        lag = check()
    except Exception as exc:  # the database may come up later: readiness will tell
        log.warning("could not read the database schema revision at start: %s", one_line(exc))
    else:
        if lag is not None:
            log.error("not ready: %s", lag)
    return check


def _unreachable_at_start(cfg: Settings) -> set[str]:
    """Probe the database and the broker before anything else reads them, and say in one line
    each what does not answer; the API starts anyway and `/readyz` answers 503 until they do
    (its probes log again only when that changes). The names of what is down."""
    from agent_jobs.queue.reach import broker_problem, database_problem  # noqa: PLC0415

    down = set()
    for name, problem in (("database", database_problem(cfg)), ("broker", broker_problem(cfg))):
        if problem is not None:
            down.add(name)
            log.error("agent-jobs api: %s; /readyz answers 503 until it answers", problem)
    return down


@contextmanager
def _quiet(logger: str, when: bool) -> Iterator[None]:
    """`logger` silent below ERROR inside the block, when `when`."""
    log_ = logging.getLogger(logger)
    level = log_.level
    if when:
        log_.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log_.setLevel(level)


def _install_docs(app: FastAPI) -> None:
    """Swagger UI at /docs from the packaged assets (FastAPI's default loads them from a CDN)."""
    app.mount(DOCS_ASSETS, StaticFiles(directory=swagger_ui_path), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{app.title} - API",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
        )


def create_app(runtime: ApiRuntime | None = None, settings: Settings | None = None) -> FastAPI:
    """The API over `runtime` (default: this process's `queue.runtime.get_runtime()`).

    `settings` overrides the runtime's settings for the API's own concerns (auth, admission,
    body limit, metrics port); the store, orchestrator and workflows are the runtime's.
    """
    down: set[str] = set()
    if runtime is None:
        from agent_jobs.config import settings as process_settings  # noqa: PLC0415
        from agent_jobs.queue.runtime import get_runtime  # noqa: PLC0415

        down = _unreachable_at_start(process_settings())
        # Said once: building the runtime reads the operator switches, whose reader would say
        # the database is unreachable again (it then logs only when the database answers).
        with _quiet("agent_jobs.ops.live", "database" in down):
            runtime = get_runtime()
    cfg = settings or runtime.settings
    metrics = PrometheusObserver()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        server = start_metrics_server(app.state.api.registry, cfg)
        try:
            yield
        finally:
            if server is not None:
                server.shutdown()
                server.server_close()

    app = FastAPI(
        lifespan=lifespan,
        # Swagger UI from packaged assets (`_install_docs`); ReDoc only exists on a CDN.
        docs_url=None,
        redoc_url=None,
        # Exact paths: a trailing slash is a 404, not a redirect that drops a POST body.
        redirect_slashes=False,
        title="agent_jobs",
        version=__version__,
        description="A durable, multi-tenant job queue for AI-agent tasks. Submit a task with "
        "a bearer token and an `Idempotency-Key`; poll it; read its trace; cancel it; "
        "approvers grant or deny the exact actions a task waits on.\n\n"
        'Every error answer is an `ErrorBody`: `{"error": {"code": "...", "message": "..."}}`, '
        "plus `field` (a dotted path such as `input.order_id`) when one field is at fault. "
        "`code` is stable and machine-readable; `message` is one line for a person.",
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
        schema_check=_schema_check(runtime, reachable="database" not in down),
        down=down,
    )
    install_handlers(app)
    _install_docs(app)
    app.include_router(tasks.router)
    app.include_router(approvals.router)
    app.include_router(ops.router)
    app.include_router(console_api.router)
    install_console(app)
    app.include_router(operator.router)
    app.include_router(releases.router)
    app.include_router(webhooks.router)
    # The middleware added last is the outermost: metrics see every response, 413s included.
    # Innermost of the three: the deadline's 503 is counted and timed like any answer.
    app.add_middleware(Deadline, seconds=cfg.api_request_timeout_s)
    app.add_middleware(BodyLimit, limit=cfg.api_max_body_bytes)
    app.add_middleware(RequestMetrics)
    install_openapi(app, runtime.workflows.names(), cfg.api_max_body_bytes)
    return app
