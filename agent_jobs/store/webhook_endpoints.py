"""Webhook endpoints and their signing secrets: a tenant's, and only its own (invariant 7).

Registering, changing or removing one makes this process forget whether the tenant has any
(`webhook_outbox.PRESENCE`), so its next transition records events at once; other processes
notice within `PRESENCE_TTL_S`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select, update

from agent_jobs.core.errors import RecordNotFound
from agent_jobs.store.base import StoreBase
from agent_jobs.store.ids import new_id
from agent_jobs.store.schema import webhook_deliveries, webhook_endpoints, webhook_secrets
from agent_jobs.store.types import db_now, db_now_plus
from agent_jobs.store.webhook_outbox import PRESENCE

_D = webhook_deliveries
_E = webhook_endpoints
_S = webhook_secrets


@dataclass(frozen=True)
class Endpoint:
    id: str
    tenant_id: str
    url: str
    event_types: list[str]
    description: str
    failing_since: datetime | None
    disabled_at: datetime | None
    disabled_reason: str | None
    created_at: datetime


def _endpoint(row: Any) -> Endpoint:
    m = row._mapping
    return Endpoint(
        id=m["id"],
        tenant_id=m["tenant_id"],
        url=m["url"],
        event_types=list(m["event_types"] or []),
        description=m["description"],
        failing_since=m["failing_since"],
        disabled_at=m["disabled_at"],
        disabled_reason=m["disabled_reason"],
        created_at=m["created_at"],
    )


class WebhookEndpointStore(StoreBase):
    # -- endpoints -------------------------------------------------------------------------------

    def create_endpoint(
        self, tenant_id: str, url: str, event_types: list[str], description: str, secret: str
    ) -> Endpoint:
        endpoint_id = new_id("whe")
        with self.tx() as conn:
            conn.execute(
                insert(_E).values(
                    id=endpoint_id,
                    tenant_id=tenant_id,
                    url=url,
                    event_types=event_types,
                    description=description,
                    created_at=db_now(),
                    updated_at=db_now(),
                )
            )
            _insert_secret(conn, endpoint_id, secret)
            row = conn.execute(select(_E).where(_E.c.id == endpoint_id)).one()
        PRESENCE.forget(tenant_id)
        return _endpoint(row)

    def count_endpoints(self, tenant_id: str) -> int:
        with self.engine.connect() as conn:
            q = select(func.count()).select_from(_E).where(_E.c.tenant_id == tenant_id)
            return int(conn.execute(q).scalar_one())

    def endpoints(self, tenant_id: str) -> list[Endpoint]:
        q = select(_E).where(_E.c.tenant_id == tenant_id).order_by(_E.c.created_at)
        with self.engine.connect() as conn:
            return [_endpoint(r) for r in conn.execute(q)]

    def endpoint(self, tenant_id: str, endpoint_id: str) -> Endpoint:
        """The tenant's endpoint, or `RecordNotFound` (another tenant's is not found either)."""
        q = select(_E).where((_E.c.id == endpoint_id) & (_E.c.tenant_id == tenant_id))
        with self.engine.connect() as conn:
            row = conn.execute(q).first()
        if row is None:
            raise RecordNotFound(f"webhook endpoint {endpoint_id} not found")
        return _endpoint(row)

    def update_endpoint(
        self,
        tenant_id: str,
        endpoint_id: str,
        *,
        url: str | None = None,
        event_types: list[str] | None = None,
        enabled: bool | None = None,
    ) -> Endpoint:
        values: dict[str, Any] = {"updated_at": db_now()}
        if url is not None:
            values["url"] = url
        if event_types is not None:
            values["event_types"] = event_types
        if enabled is True:
            values.update(disabled_at=None, disabled_reason=None, failing_since=None)
        elif enabled is False:
            values.update(disabled_at=db_now(), disabled_reason="disabled by its owner")
        cond = (_E.c.id == endpoint_id) & (_E.c.tenant_id == tenant_id)
        with self.tx() as conn:
            if conn.execute(update(_E).where(cond).values(**values)).rowcount == 0:
                raise RecordNotFound(f"webhook endpoint {endpoint_id} not found")
            row = conn.execute(select(_E).where(cond)).one()
        PRESENCE.forget(tenant_id)
        return _endpoint(row)

    def delete_endpoint(self, tenant_id: str, endpoint_id: str) -> None:
        cond = (_E.c.id == endpoint_id) & (_E.c.tenant_id == tenant_id)
        with self.tx() as conn:
            # Its secrets and deliveries go with it (ON DELETE CASCADE; SQLite's is explicit).
            owned = select(_E.c.id).where(cond).scalar_subquery()
            conn.execute(delete(_S).where(_S.c.endpoint_id == owned))
            conn.execute(delete(_D).where(_D.c.endpoint_id == owned))
            if conn.execute(delete(_E).where(cond)).rowcount == 0:
                raise RecordNotFound(f"webhook endpoint {endpoint_id} not found")
        PRESENCE.forget(tenant_id)

    # -- secrets -----------------------------------------------------------------------------------

    def rotate_secret(
        self, tenant_id: str, endpoint_id: str, secret: str, overlap_s: float
    ) -> None:
        """`secret` signs from now on; the current ones keep signing beside it for `overlap_s`
        (receivers move to the new one without a gap: every message carries both signatures)."""
        self.endpoint(tenant_id, endpoint_id)  # the tenant's wall
        with self.tx() as conn:
            conn.execute(
                update(_S)
                .where((_S.c.endpoint_id == endpoint_id) & _S.c.expires_at.is_(None))
                .values(expires_at=db_now_plus(overlap_s))
            )
            conn.execute(
                delete(_S).where((_S.c.endpoint_id == endpoint_id) & (_S.c.expires_at < db_now()))
            )
            _insert_secret(conn, endpoint_id, secret)

    def live_secrets(self, conn: Connection, endpoint_id: str) -> list[str]:
        q = (
            select(_S.c.secret)
            .where(
                (_S.c.endpoint_id == endpoint_id)
                & (_S.c.expires_at.is_(None) | (_S.c.expires_at > db_now()))
            )
            .order_by(_S.c.created_at.desc())
        )
        return [str(s) for s in conn.execute(q).scalars()]


def _insert_secret(conn: Connection, endpoint_id: str, secret: str) -> None:
    conn.execute(
        insert(_S).values(
            id=new_id("whs"), endpoint_id=endpoint_id, secret=secret, created_at=db_now()
        )
    )
