"""`/v1/webhooks`: a tenant registers the endpoints its events go to, and sees what was sent.

Any caller of the tenant manages its endpoints (the services that submit tasks are the ones
that want to hear back); replaying dead deliveries is an operator's (role `operator`). Another
tenant's endpoint or delivery is a 404 (invariant 7). The signing secret is shown once, in the
answer to a registration or a rotation.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from agent_jobs.api import responses as r
from agent_jobs.api.auth import Principal
from agent_jobs.api.deps import principal, state
from agent_jobs.api.models import ID_PATTERN
from agent_jobs.api.operator import operator
from agent_jobs.notify.service import WebhookService
from agent_jobs.store.webhook_endpoints import Endpoint
from agent_jobs.store.webhook_outbox import EVENT_TYPES
from agent_jobs.store.webhooks import Delivery, WebhookStore

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])

Caller = Annotated[Principal, Depends(principal)]
Operator = Annotated[Principal, Depends(operator)]
EndpointId = Annotated[str, Path(pattern=ID_PATTERN, description="The endpoint's id.")]
MsgId = Annotated[str, Path(pattern=ID_PATTERN, description="The `webhook-id` of a delivery.")]
EventType = Literal[EVENT_TYPES]  # type: ignore[valid-type]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class WebhookEndpoint(_Model):
    id: str
    url: str
    event_types: list[str]
    description: str
    enabled: bool
    disabled_at: datetime | None = Field(
        description="When it was disabled (null while enabled). A disable after a day of "
        "failures is also sent as `endpoint.disabled` to the tenant's other endpoints."
    )
    disabled_reason: str | None = Field(
        description="Why it is disabled: by its owner, or failing for a day (then its pending "
        "deliveries were dead-lettered; enable it, then replay them)."
    )
    failing_since: datetime | None
    created_at: datetime

    @classmethod
    def of(cls, e: Endpoint) -> WebhookEndpoint:
        return cls(
            id=e.id,
            url=e.url,
            event_types=e.event_types,
            description=e.description,
            enabled=e.disabled_at is None,
            disabled_at=e.disabled_at,
            disabled_reason=e.disabled_reason,
            failing_since=e.failing_since,
            created_at=e.created_at,
        )


class WebhookSecret(_Model):
    endpoint: WebhookEndpoint
    secret: str = Field(
        description="`whsec_` + base64: verify with any Standard Webhooks library. Shown once."
    )


class DeliveryCounts(_Model):
    pending: int
    delivered: int
    dead: int


class WebhookEndpointList(_Model):
    endpoints: list[WebhookEndpoint]
    event_types: list[str] = Field(description="Every event type an endpoint may ask for.")
    deliveries: DeliveryCounts = Field(description="The tenant's deliveries by status.")


class NewWebhook(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(max_length=2048, description="https (see the README's Webhooks).")
    event_types: list[EventType] = Field(min_length=1, max_length=len(EVENT_TYPES))
    description: str = Field(default="", max_length=200)


class WebhookChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(default=None, max_length=2048)
    event_types: list[EventType] | None = Field(
        default=None, min_length=1, max_length=len(EVENT_TYPES)
    )
    enabled: bool | None = None


class WebhookDelivery(_Model):
    msg_id: str = Field(description="The `webhook-id`: the same on every attempt and replay.")
    endpoint_id: str
    task_id: str | None
    event_type: str
    status: Literal["pending", "delivered", "dead"]
    attempts: int
    next_attempt_at: datetime | None
    last_status: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None

    @classmethod
    def of(cls, d: Delivery) -> WebhookDelivery:
        return cls(
            msg_id=d.msg_id,
            endpoint_id=d.endpoint_id,
            task_id=d.task_id,
            event_type=d.event_type,
            status=d.status,
            attempts=d.attempts,
            next_attempt_at=d.next_attempt_at,
            last_status=d.last_status,
            last_error=d.last_error,
            created_at=d.created_at,
            delivered_at=d.delivered_at,
        )


class WebhookDeliveryList(_Model):
    deliveries: list[WebhookDelivery]


class Replayed(_Model):
    replayed: int = Field(description="Dead deliveries sent again (0: none matched).")


def service(request: Request) -> WebhookService:
    rt = state(request).runtime
    return WebhookService(WebhookStore(rt.store.engine), rt.settings)


@router.post(
    "",
    status_code=201,
    response_model=WebhookSecret,
    summary="Register a webhook endpoint",
    description="422 for a URL this deployment does not send to (not https; loopback, "
    "private, link-local or metadata addresses; a name that does not resolve), an unknown "
    "event type, or a tenant at its endpoint limit.",
    responses=r.errors(401, 413, 422, 503),
)
def register(request: Request, who: Caller, body: Annotated[NewWebhook, Body()]) -> WebhookSecret:
    reg = service(request).register(
        who.tenant_id, body.url, list(body.event_types), body.description
    )
    return WebhookSecret(endpoint=WebhookEndpoint.of(reg.endpoint), secret=reg.secret)


@router.get(
    "",
    response_model=WebhookEndpointList,
    summary="List the tenant's webhook endpoints",
    responses=r.errors(401, 503),
)
def list_endpoints(request: Request, who: Caller) -> WebhookEndpointList:
    svc = service(request)
    endpoints = svc.endpoints(who.tenant_id)
    return WebhookEndpointList(
        endpoints=[WebhookEndpoint.of(e) for e in endpoints],
        event_types=list(EVENT_TYPES),
        deliveries=DeliveryCounts(**svc.ws.delivery_counts(who.tenant_id)),
    )


@router.get(
    "/deliveries",
    response_model=WebhookDeliveryList,
    summary="List the tenant's webhook deliveries, newest first",
    responses=r.errors(401, 404, 422, 503),
)
def list_deliveries(
    request: Request,
    who: Caller,
    *,
    status: Annotated[Literal["pending", "delivered", "dead"] | None, Query()] = None,
    endpoint_id: Annotated[str | None, Query(pattern=ID_PATTERN)] = None,
    task_id: Annotated[str | None, Query(pattern=ID_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> WebhookDeliveryList:
    found = service(request).deliveries(
        who.tenant_id, status=status, endpoint_id=endpoint_id, task_id=task_id, limit=limit
    )
    return WebhookDeliveryList(deliveries=[WebhookDelivery.of(d) for d in found])


@router.post(
    "/deliveries/{msg_id}/replay",
    response_model=Replayed,
    summary="Send a dead delivery again, with the same webhook-id (operator)",
    responses=r.errors(401, 403, 503),
)
def replay_delivery(msg_id: MsgId, request: Request, who: Operator) -> Replayed:
    return Replayed(replayed=len(service(request).replay(who.tenant_id, msg_id=msg_id)))


@router.get(
    "/{endpoint_id}",
    response_model=WebhookEndpoint,
    summary="One webhook endpoint",
    responses=r.errors(401, 404, 422, 503),
)
def get_endpoint(endpoint_id: EndpointId, request: Request, who: Caller) -> WebhookEndpoint:
    return WebhookEndpoint.of(service(request).get(who.tenant_id, endpoint_id))


@router.patch(
    "/{endpoint_id}",
    response_model=WebhookEndpoint,
    summary="Change an endpoint's URL or event types, or enable or disable it",
    responses=r.errors(401, 404, 413, 422, 503),
)
def change_endpoint(
    endpoint_id: EndpointId, request: Request, who: Caller, body: Annotated[WebhookChange, Body()]
) -> WebhookEndpoint:
    changed = service(request).update(
        who.tenant_id,
        endpoint_id,
        url=body.url,
        event_types=list(body.event_types) if body.event_types is not None else None,
        enabled=body.enabled,
    )
    return WebhookEndpoint.of(changed)


@router.delete(
    "/{endpoint_id}",
    status_code=204,
    summary="Remove an endpoint, its secrets and its deliveries",
    responses=r.errors(401, 404, 422, 503),
)
def delete_endpoint(endpoint_id: EndpointId, request: Request, who: Caller) -> Response:
    service(request).delete(who.tenant_id, endpoint_id)
    return Response(status_code=204)


@router.post(
    "/{endpoint_id}/rotate",
    response_model=WebhookSecret,
    summary="A new signing secret; the old one keeps signing beside it for a day",
    responses=r.errors(401, 404, 422, 503),
)
def rotate(endpoint_id: EndpointId, request: Request, who: Caller) -> WebhookSecret:
    reg = service(request).rotate(who.tenant_id, endpoint_id)
    return WebhookSecret(endpoint=WebhookEndpoint.of(reg.endpoint), secret=reg.secret)


@router.post(
    "/{endpoint_id}/replay",
    response_model=Replayed,
    summary="Send an endpoint's dead deliveries again (operator)",
    responses=r.errors(401, 403, 404, 422, 503),
)
def replay_endpoint(endpoint_id: EndpointId, request: Request, who: Operator) -> Replayed:
    return Replayed(replayed=len(service(request).replay(who.tenant_id, endpoint_id=endpoint_id)))
