"""Operations endpoints: liveness, readiness (database and broker), Prometheus metrics.

They need no token: they reveal no tenant's data, and probes and scrapers carry none. Expose them
on an internal network only.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client.exposition import choose_encoder

from agent_jobs.api.deps import state
from agent_jobs.api.models import Health, Readiness

log = logging.getLogger(__name__)

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, summary="Liveness: the process serves requests")
def healthz() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Readiness,
    summary="Readiness: the database and the broker answer",
    responses={503: {"model": Readiness, "description": "The database or the broker is down."}},
)
def readyz(request: Request) -> JSONResponse:
    st = state(request)
    checks: dict[str, str] = {}
    for name, probe in (("database", st.runtime.store.ping), ("broker", st.broker_ping)):
        try:
            probe()
            checks[name] = "ok"
        except Exception as exc:
            log.warning("readiness: %s unreachable: %s", name, type(exc).__name__)
            checks[name] = "unavailable"
    ready = all(v == "ok" for v in checks.values())
    body = Readiness.model_validate(
        {"status": "ready" if ready else "unavailable", "checks": checks}
    )
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    description="The Prometheus text exposition format (OpenMetrics when asked for in `Accept`).",
    response_class=Response,
    responses={
        200: {
            "description": "Metrics of this API process and per-tenant queue gauges.",
            "content": {
                "text/plain": {"schema": {"type": "string"}},
                "application/openmetrics-text": {"schema": {"type": "string"}},
            },
        }
    },
)
def metrics(request: Request) -> Response:
    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(
        encoder(state(request).registry), media_type=None, headers={"Content-Type": content_type}
    )
