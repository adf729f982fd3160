"""Webhook endpoints, their signing secrets and the delivery outbox: the statements, by meaning.

The outbox rows are written by the transition (`webhook_outbox.record`); here they are claimed,
settled and listed. A delivery is claimed by one guarded statement (pending, due, and no earlier
pending delivery of the same task to the same endpoint: in order per task), which also counts
the attempt and pushes its timer out by the send's lease, so a worker that dies mid-send leaves
a row the sweeper finds due again. Every tenant's query is scoped by its tenant (invariant 7).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    delete,
    func,
    insert,
    literal_column,
    select,
    update,
)

from agent_jobs.core.errors import RecordNotFound
from agent_jobs.store.base import StoreBase
from agent_jobs.store.ids import new_id
from agent_jobs.store.schema import webhook_deliveries, webhook_endpoints, webhook_secrets
from agent_jobs.store.types import db_now, db_now_plus
from agent_jobs.store.webhook_outbox import PRESENCE

_D = webhook_deliveries
_E = webhook_endpoints
_S = webhook_secrets
# Written into the SQL (not bound), as the partial indexes' predicate reads: SQLite uses a
# partial index only for a query that repeats its predicate term for term.
_PENDING: ColumnElement[str] = literal_column("'pending'")


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


@dataclass(frozen=True)
class Delivery:
    id: int
    msg_id: str
    endpoint_id: str
    tenant_id: str
    task_id: str | None
    event_type: str
    body: str
    status: str
    attempts: int
    next_attempt_at: datetime | None
    last_status: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None


@dataclass(frozen=True)
class Claimed:
    """A delivery taken for one attempt, with where it goes and the secrets that sign it."""

    delivery: Delivery
    url: str
    disabled: bool
    secrets: list[str]


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


def _delivery(row: Any) -> Delivery:
    m = row._mapping
    return Delivery(**{f: m[f] for f in Delivery.__dataclass_fields__})


class WebhookStore(StoreBase):
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

    # -- deliveries: the worker's side ------------------------------------------------------------

    def claim_delivery(self, delivery_id: int, lease_s: float) -> Claimed | None:
        """Take one attempt at a pending, due delivery with no earlier pending delivery of its
        task to its endpoint; None when another worker has it, it is not due, done, or waits
        its turn. The attempt is counted now: a worker that dies mid-send has spent it."""
        earlier = _D.alias("earlier")
        blocked = (
            select(earlier.c.id)
            .where(
                (earlier.c.endpoint_id == _D.c.endpoint_id)
                & (earlier.c.task_id == _D.c.task_id)
                & (earlier.c.status == _PENDING)
                & (earlier.c.id < _D.c.id)
            )
            .exists()
        )
        stmt = (
            update(_D)
            .where(
                (_D.c.id == delivery_id)
                & (_D.c.status == _PENDING)
                & (_D.c.next_attempt_at <= db_now())
                & ~blocked
            )
            .values(
                attempts=_D.c.attempts + 1,
                next_attempt_at=db_now_plus(lease_s),
                updated_at=db_now(),
            )
            .returning(*_D.c)
        )
        with self.tx() as conn:
            row = conn.execute(stmt).first()
            if row is None:
                return None
            d = _delivery(row)
            ep = conn.execute(
                select(_E.c.url, _E.c.disabled_at).where(_E.c.id == d.endpoint_id)
            ).one()
            secrets = self.live_secrets(conn, d.endpoint_id)
        return Claimed(d, str(ep.url), ep.disabled_at is not None, secrets)

    def delivered(self, claimed: Delivery, status_code: int) -> int | None:
        """The attempt succeeded: the row is done, its endpoint healthy again. Returns the next
        pending delivery of the same task to the same endpoint, made due now, if any."""
        d = claimed
        with self.tx() as conn:
            conn.execute(
                update(_D)
                .where(_fenced(d))
                .values(
                    status="delivered",
                    delivered_at=db_now(),
                    last_status=status_code,
                    last_error=None,
                    next_attempt_at=None,
                    updated_at=db_now(),
                )
            )
            conn.execute(
                update(_E)
                .where((_E.c.id == d.endpoint_id) & _E.c.failing_since.is_not(None))
                .values(failing_since=None)
            )
            if d.task_id is None:
                return None
            nxt = conn.execute(
                select(_D.c.id)
                .where(
                    (_D.c.endpoint_id == d.endpoint_id)
                    & (_D.c.task_id == d.task_id)
                    & (_D.c.status == _PENDING)
                )
                .order_by(_D.c.id)
                .limit(1)
            ).scalar()
            if nxt is None:
                return None
            conn.execute(
                update(_D)
                .where((_D.c.id == nxt) & (_D.c.attempts == 0))
                .values(next_attempt_at=db_now())
            )
            return int(nxt)

    def failed(
        self,
        claimed: Delivery,
        *,
        status_code: int | None,
        error: str,
        retry_in_s: float | None,
        disable_after_s: float,
    ) -> bool:
        """The attempt failed: retry in `retry_in_s`, or (None) dead-letter it. The endpoint
        counts as failing since its first failure after its last success; failing for
        `disable_after_s` disables it, and its pending deliveries are dead-lettered with it
        (replayable once it is enabled again). Returns whether this disabled it."""
        d = claimed
        values: dict[str, Any] = {
            "last_status": status_code,
            "last_error": error[:300],
            "updated_at": db_now(),
        }
        if retry_in_s is None:
            values.update(status="dead", next_attempt_at=None)
        else:
            values["next_attempt_at"] = db_now_plus(retry_in_s)
        with self.tx() as conn:
            conn.execute(update(_D).where(_fenced(d)).values(**values))
            conn.execute(
                update(_E)
                .where((_E.c.id == d.endpoint_id) & _E.c.failing_since.is_(None))
                .values(failing_since=db_now())
            )
            off = conn.execute(
                update(_E)
                .where(
                    (_E.c.id == d.endpoint_id)
                    & _E.c.disabled_at.is_(None)
                    & (_E.c.failing_since < db_now_plus(-disable_after_s))
                )
                .values(
                    disabled_at=db_now(),
                    disabled_reason=f"failing for {disable_after_s / 3600:g} h: {error[:200]}",
                    updated_at=db_now(),
                )
            ).rowcount
            if off:
                self._bury_pending(conn, d.endpoint_id, "endpoint disabled")
        if off:
            PRESENCE.forget(d.tenant_id)
        return bool(off)

    def bury(self, claimed: Delivery, reason: str) -> None:
        """Dead-letter a claimed delivery without sending it (its endpoint is disabled)."""
        with self.tx() as conn:
            conn.execute(
                update(_D)
                .where(_fenced(claimed))
                .values(status="dead", next_attempt_at=None, last_error=reason, updated_at=db_now())
            )

    def _bury_pending(self, conn: Connection, endpoint_id: str, reason: str) -> None:
        conn.execute(
            update(_D)
            .where((_D.c.endpoint_id == endpoint_id) & (_D.c.status == _PENDING))
            .values(status="dead", next_attempt_at=None, last_error=reason, updated_at=db_now())
        )

    def due_deliveries(self, limit: int) -> list[tuple[str, int]]:
        """(tenant, delivery id) of pending deliveries whose timer is due, oldest first: what
        the sweeper publishes (a claim sorts out duplicates and order)."""
        q = (
            select(_D.c.tenant_id, _D.c.id)
            .where((_D.c.status == _PENDING) & (_D.c.next_attempt_at <= db_now()))
            .order_by(_D.c.next_attempt_at)
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [(str(t), int(i)) for t, i in conn.execute(q)]

    # -- deliveries: the owner's and the operator's side ----------------------------------------

    def deliveries(
        self,
        tenant_id: str,
        *,
        status: str | None = None,
        endpoint_id: str | None = None,
        task_id: str | None = None,
        limit: int = 100,
    ) -> list[Delivery]:
        cond = _D.c.tenant_id == tenant_id
        if status is not None:
            cond = cond & (_D.c.status == status)
        if endpoint_id is not None:
            cond = cond & (_D.c.endpoint_id == endpoint_id)
        if task_id is not None:
            cond = cond & (_D.c.task_id == task_id)
        q = select(_D).where(cond).order_by(_D.c.id.desc()).limit(limit)
        with self.engine.connect() as conn:
            return [_delivery(r) for r in conn.execute(q)]

    def replay(
        self, tenant_id: str, *, msg_id: str | None = None, endpoint_id: str | None = None
    ) -> list[int]:
        """Send dead-lettered deliveries again, with their `webhook-id` (receivers de-duplicate):
        one by its message id, or every one of an endpoint. The ids made due now."""
        cond = (_D.c.tenant_id == tenant_id) & (_D.c.status == "dead")
        if msg_id is not None:
            cond = cond & (_D.c.msg_id == msg_id)
        if endpoint_id is not None:
            cond = cond & (_D.c.endpoint_id == endpoint_id)
        stmt = (
            update(_D)
            .where(cond)
            .values(status="pending", attempts=0, next_attempt_at=db_now(), updated_at=db_now())
            .returning(_D.c.id)
        )
        with self.tx() as conn:
            return sorted(int(i) for i in conn.execute(stmt).scalars())

    def delivery_counts(self, tenant_id: str | None = None) -> dict[str, int]:
        """Deliveries by status (a tenant's, or everyone's for the metrics)."""
        q = select(_D.c.status, func.count()).group_by(_D.c.status)
        if tenant_id is not None:
            q = q.where(_D.c.tenant_id == tenant_id)
        with self.engine.connect() as conn:
            counts = {str(s): int(n) for s, n in conn.execute(q)}
        return {s: counts.get(s, 0) for s in ("pending", "delivered", "dead")}


def _fenced(d: Delivery) -> Any:
    # Only the attempt that claimed it settles it: a zombie's late answer changes nothing.
    return (_D.c.id == d.id) & (_D.c.attempts == d.attempts) & (_D.c.status == _PENDING)


def _insert_secret(conn: Connection, endpoint_id: str, secret: str) -> None:
    conn.execute(
        insert(_S).values(
            id=new_id("whs"), endpoint_id=endpoint_id, secret=secret, created_at=db_now()
        )
    )
