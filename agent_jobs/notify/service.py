"""Webhooks as the API and the CLI offer them: register, list, change, rotate, remove; list
deliveries and replay dead ones. Every call is scoped by the caller's tenant (invariant 7)."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from agent_jobs.config import Settings
from agent_jobs.core.errors import InvalidInput
from agent_jobs.notify import signing
from agent_jobs.notify.delivery import policy_of
from agent_jobs.notify.urls import Resolver, UnsafeUrl, check
from agent_jobs.store.webhook_endpoints import Endpoint
from agent_jobs.store.webhook_outbox import EVENT_TYPES, publish
from agent_jobs.store.webhooks import Delivery, WebhookStore

DELIVERY_STATUSES = ("pending", "delivered", "dead")
# After a rotation the old secret keeps signing beside the new one this long: every message
# carries both signatures, so receivers switch to the new secret without a gap.
ROTATION_OVERLAP_S = 86400.0


@dataclass(frozen=True)
class Registered:
    endpoint: Endpoint
    secret: str  # shown once, at registration or rotation


class WebhookService:
    def __init__(
        self, ws: WebhookStore, cfg: Settings, resolver: Resolver = socket.getaddrinfo
    ) -> None:
        self.ws = ws
        self.cfg = cfg
        self.resolver = resolver

    def _url(self, url: str) -> str:
        try:
            check(url, policy_of(self.cfg), self.resolver)
        except UnsafeUrl as exc:
            raise InvalidInput(f"webhook url refused: {exc}", field="url") from None
        return url

    @staticmethod
    def _types(event_types: list[str]) -> list[str]:
        unknown = [t for t in event_types if t not in EVENT_TYPES]
        if unknown or not event_types:
            raise InvalidInput(
                f"event_types must name some of {', '.join(EVENT_TYPES)}"
                + (f" (unknown: {', '.join(map(repr, unknown[:5]))})" if unknown else ""),
                field="event_types",
            )
        return list(dict.fromkeys(event_types))

    def register(
        self, tenant_id: str, url: str, event_types: list[str], description: str = ""
    ) -> Registered:
        types = self._types(event_types)
        url = self._url(url)
        if self.ws.count_endpoints(tenant_id) >= self.cfg.webhook_max_endpoints:
            raise InvalidInput(
                f"a tenant has at most {self.cfg.webhook_max_endpoints} webhook endpoints "
                "(AGENT_JOBS_WEBHOOK_MAX_ENDPOINTS)"
            )
        secret = signing.new_secret()
        endpoint = self.ws.create_endpoint(tenant_id, url, types, description[:200], secret)
        return Registered(endpoint, secret)

    def endpoints(self, tenant_id: str) -> list[Endpoint]:
        return self.ws.endpoints(tenant_id)

    def get(self, tenant_id: str, endpoint_id: str) -> Endpoint:
        return self.ws.endpoint(tenant_id, endpoint_id)

    def update(
        self,
        tenant_id: str,
        endpoint_id: str,
        *,
        url: str | None = None,
        event_types: list[str] | None = None,
        enabled: bool | None = None,
    ) -> Endpoint:
        self.ws.endpoint(tenant_id, endpoint_id)  # not found before any DNS lookup
        return self.ws.update_endpoint(
            tenant_id,
            endpoint_id,
            url=self._url(url) if url is not None else None,
            event_types=self._types(event_types) if event_types is not None else None,
            enabled=enabled,
        )

    def rotate(self, tenant_id: str, endpoint_id: str) -> Registered:
        secret = signing.new_secret()
        self.ws.rotate_secret(tenant_id, endpoint_id, secret, ROTATION_OVERLAP_S)
        return Registered(self.ws.endpoint(tenant_id, endpoint_id), secret)

    def delete(self, tenant_id: str, endpoint_id: str) -> None:
        self.ws.delete_endpoint(tenant_id, endpoint_id)

    def deliveries(
        self,
        tenant_id: str,
        *,
        status: str | None = None,
        endpoint_id: str | None = None,
        task_id: str | None = None,
        limit: int = 100,
    ) -> list[Delivery]:
        if status is not None and status not in DELIVERY_STATUSES:
            raise InvalidInput(f"status must be one of {', '.join(DELIVERY_STATUSES)}", "status")
        if endpoint_id is not None:
            self.ws.endpoint(tenant_id, endpoint_id)  # another tenant's: not found
        return self.ws.deliveries(
            tenant_id, status=status, endpoint_id=endpoint_id, task_id=task_id, limit=limit
        )

    def replay(
        self, tenant_id: str, *, msg_id: str | None = None, endpoint_id: str | None = None
    ) -> list[int]:
        """Dead deliveries sent again with their own `webhook-id`, published now."""
        if (msg_id is None) == (endpoint_id is None):
            raise InvalidInput("replay one delivery (its message id) or one endpoint's dead ones")
        if endpoint_id is not None:
            self.ws.endpoint(tenant_id, endpoint_id)
        ids = self.ws.replay(tenant_id, msg_id=msg_id, endpoint_id=endpoint_id)
        publish(tenant_id, ids)
        return ids
