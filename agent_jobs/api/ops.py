"""Operations endpoints: liveness and readiness on the API's port; Prometheus metrics on a port
of their own.

Liveness and readiness need no token: they reveal no tenant's data, and probes carry none.
Readiness is the database answering *at the schema this code expects* (an API started before
`agent-jobs db upgrade` is not ready: every write would fail), and the broker answering.

`/metrics` is not served on the public port: its label values name tenants and workflows. With
`AGENT_JOBS_API_METRICS_PORT` set, the API process serves it on that port of `AGENT_JOBS_API_HOST`
(prometheus-client's own HTTP server, started and stopped with the application), for a scraper
on an internal network; unset, the API exports no metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from agent_jobs.api import responses as r
from agent_jobs.api.deps import ApiState, state
from agent_jobs.api.models import Health, Readiness
from agent_jobs.config import Settings
from agent_jobs.store.engine import database_error_line

log = logging.getLogger(__name__)

router = APIRouter(tags=["operations"])


@router.get(
    "/healthz",
    response_model=Health,
    summary="Liveness: the process serves requests",
    responses=r.errors(413),
)
def healthz() -> Health:
    return Health(status="ok")


def _probe(st: ApiState, name: str, probe: Callable[[], Any]) -> str:
    """`ok` or `unavailable`; logged once when it becomes unavailable (one line, no statement or
    value in it) and once when it answers again, not at every probe in between."""
    try:
        probe()
    except Exception as exc:
        if name not in st.down:
            st.down.add(name)
            log.warning("readiness: %s unreachable: %s", name, database_error_line(exc))
        return "unavailable"
    if name in st.down:
        st.down.discard(name)
        log.warning("readiness: %s answers again", name)
    return "ok"


@router.get(
    "/readyz",
    response_model=Readiness,
    summary="Readiness: the database (migrated to head) and the broker answer",
    responses=r.merge(
        {
            503: {
                "model": Readiness,
                "description": "The database or the broker is down, or the database schema is "
                "not at the head revision (`checks.schema`: `not_at_head`); `reason` says which.",
            }
        },
        r.errors(413),
    ),
)
def readyz(request: Request) -> JSONResponse:
    st = state(request)
    checks = {
        "database": _probe(st, "database", st.runtime.store.ping),
        "broker": _probe(st, "broker", st.broker_ping),
    }
    reason = None
    if checks["database"] == "ok" and st.schema_check is not None:
        try:
            lag = st.schema_check()
        except Exception as exc:
            log.warning("readiness: schema revision unreadable: %s", type(exc).__name__)
            checks["schema"], reason = "unavailable", "the schema revision cannot be read"
        else:
            checks["schema"] = "ok" if lag is None else "not_at_head"
            reason = lag
    down = [name for name, v in checks.items() if v == "unavailable"]
    if down and reason is None:
        reason = f"{' and '.join(down)} unreachable"
    ready = all(v == "ok" for v in checks.values())
    body = Readiness.model_validate(
        {"status": "ready" if ready else "unavailable", "checks": checks, "reason": reason}
    )
    return JSONResponse(body.model_dump(exclude_none=True), status_code=200 if ready else 503)


def start_metrics_server(registry: Any, cfg: Settings) -> Any | None:
    """Serve `registry` on `cfg.api_metrics_port` (all paths, `/metrics` included) in a daemon
    thread; returns the server (call `.shutdown()`), or None when the port is not configured."""
    if cfg.api_metrics_port is None:
        return None
    from prometheus_client import start_http_server  # noqa: PLC0415

    server, _thread = start_http_server(cfg.api_metrics_port, addr=cfg.api_host, registry=registry)
    log.info("metrics on http://%s:%d/metrics", cfg.api_host, cfg.api_metrics_port)
    return server
