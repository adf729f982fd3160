"""The webhook delivery outbox: its statements, by meaning (endpoints and secrets:
`webhook_endpoints`).

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
    bindparam,
    func,
    insert,
    literal_column,
    select,
    update,
)

from agent_jobs.core.hashing import sha256_hex
from agent_jobs.store.schema import (
    approvals,
    webhook_deliveries,
    webhook_endpoints,
)
from agent_jobs.store.types import db_now, db_now_plus
from agent_jobs.store.webhook_endpoints import WebhookEndpointStore
from agent_jobs.store.webhook_outbox import (
    APPROVAL_EXPIRING,
    ENDPOINT_DISABLED,
    PRESENCE,
    body_of,
    delivery_values,
    endpoint_disabled_event,
    expiring_event,
)

_D = webhook_deliveries
_E = webhook_endpoints
# Written into the SQL (not bound), as the partial indexes' predicate reads: SQLite uses a
# partial index only for a query that repeats its predicate term for term.
_PENDING: ColumnElement[str] = literal_column("'pending'")


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
class Failed:
    """What a failed attempt did to its endpoint: `disabled` it (failing past the window), and
    the `endpoint.disabled` deliveries written to the tenant's other endpoints, to publish."""

    disabled: bool
    tenant_id: str
    announced: list[int]


@dataclass(frozen=True)
class Claimed:
    """A delivery taken for one attempt, with where it goes and the secrets that sign it."""

    delivery: Delivery
    url: str
    disabled: bool
    secrets: list[str]


def _delivery(row: Any) -> Delivery:
    m = row._mapping
    return Delivery(**{f: m[f] for f in Delivery.__dataclass_fields__})


def _claim_statement() -> Any:
    # Built once: compiling it (an aliased NOT EXISTS) cost more than running it.
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
    return (
        update(_D)
        .where(
            (_D.c.id == bindparam("delivery_id"))
            & (_D.c.status == _PENDING)
            & (_D.c.next_attempt_at <= db_now())
            & ~blocked
        )
        .values(
            attempts=_D.c.attempts + 1,
            next_attempt_at=db_now_plus(bindparam("lease_s")),
            updated_at=db_now(),
        )
        .returning(*_D.c)
    )


_CLAIM = _claim_statement()


class WebhookStore(WebhookEndpointStore):
    """Endpoints and secrets (`WebhookEndpointStore`), and the deliveries."""

    # -- deliveries: the worker's side ------------------------------------------------------------

    def claim_delivery(self, delivery_id: int, lease_s: float) -> Claimed | None:
        """Take one attempt at a pending, due delivery with no earlier pending delivery of its
        task to its endpoint; None when another worker has it, it is not due, done, or waits
        its turn. The attempt is counted now: a worker that dies mid-send has spent it."""
        with self.tx() as conn:
            row = conn.execute(_CLAIM, {"delivery_id": delivery_id, "lease_s": lease_s}).first()
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
                .values(next_attempt_at=db_now(), updated_at=db_now())
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
    ) -> Failed:
        """The attempt failed: retry in `retry_in_s`, or (None) dead-letter it. The endpoint
        counts as failing since its first failure after its last success; failing for
        `disable_after_s` disables it, and its pending deliveries are dead-lettered with it
        (replayable once it is enabled again). Its owner is told in the same transaction: an
        `endpoint.disabled` row for each of the tenant's other enabled endpoints that asks for
        it (publish `Failed.announced` after this returns)."""
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
        announced: list[int] = []
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
                    disabled_reason=f"failing for {_span(disable_after_s)}: {error[:200]}",
                    updated_at=db_now(),
                )
            ).rowcount
            if off:
                buried = self._bury_pending(conn, d.endpoint_id, "endpoint disabled")
                announced = self._announce_disabled(conn, d.endpoint_id, buried)
        if off:
            PRESENCE.forget(d.tenant_id)
        return Failed(bool(off), d.tenant_id, announced)

    def _announce_disabled(self, conn: Connection, endpoint_id: str, buried: int) -> list[int]:
        """`endpoint.disabled` rows to the tenant's other enabled endpoints that want it (the
        disabled one is no longer enabled: it never gets its own)."""
        row = conn.execute(select(_E).where(_E.c.id == endpoint_id)).one()
        wanting = [
            e.id
            for e in conn.execute(
                select(_E.c.id, _E.c.event_types).where(
                    (_E.c.tenant_id == row.tenant_id)
                    & _E.c.disabled_at.is_(None)
                    & (_E.c.id != endpoint_id)
                )
            )
            if ENDPOINT_DISABLED in (e.event_types or ())
        ]
        if not wanting:
            return []
        body = body_of(endpoint_disabled_event(row._mapping, buried))
        rows = [delivery_values(ep, row.tenant_id, None, ENDPOINT_DISABLED, body) for ep in wanting]
        stmt = insert(_D).values(rows).returning(_D.c.id)
        return sorted(int(i) for i in conn.execute(stmt).scalars())

    def bury(self, claimed: Delivery, reason: str) -> None:
        """Dead-letter a claimed delivery without sending it (its endpoint is disabled)."""
        with self.tx() as conn:
            conn.execute(
                update(_D)
                .where(_fenced(claimed))
                .values(status="dead", next_attempt_at=None, last_error=reason, updated_at=db_now())
            )

    def _bury_pending(self, conn: Connection, endpoint_id: str, reason: str) -> int:
        return int(
            conn.execute(
                update(_D)
                .where((_D.c.endpoint_id == endpoint_id) & (_D.c.status == _PENDING))
                .values(status="dead", next_attempt_at=None, last_error=reason, updated_at=db_now())
            ).rowcount
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

    def take_due(self, limit: int, quiet_s: float) -> list[tuple[str, int]]:
        """(tenant, delivery id) of pending deliveries whose timer is due and that nobody
        published since (its publish stamps `updated_at`) or in the last `quiet_s`: what the sweeper
        publishes. A claim sorts out any duplicate and the order."""
        q = self.backend.skip_locked(
            select(_D.c.tenant_id, _D.c.id)
            .where(
                (_D.c.status == _PENDING)
                & (_D.c.next_attempt_at <= db_now())
                # Not published since it fell due (a retry's timer, a lapsed claim), or not
                # in the last `quiet_s` (a new row, or the last sweep's).
                & (
                    (_D.c.updated_at < _D.c.next_attempt_at)
                    | (_D.c.updated_at < db_now_plus(-quiet_s))
                )
            )
            .order_by(_D.c.next_attempt_at)
            .limit(limit)
        )
        with self.tx() as conn:
            due = [(str(t), int(i)) for t, i in conn.execute(q)]
            if due:
                ids = [i for _, i in due]
                conn.execute(update(_D).where(_D.c.id.in_(ids)).values(updated_at=db_now()))
        return due

    def warn_expiring(self, window_s: float) -> list[tuple[str, int]]:
        """`approval.expiring` rows for pending approvals that expire within `window_s`, for
        endpoints that want them: one per (approval, endpoint), whose message id is derived
        from both, so a second sweep (or two at once) adds nothing."""
        a = approvals
        q = select(
            a.c.id, a.c.task_id, a.c.tenant_id, a.c.tool, a.c.tool_version, a.c.args,
            a.c.policy_version, a.c.reason, a.c.expires_at, a.c.status,
        ).where(
            a.c.status.in_(bindparam(None, ["pending", "granted"], expanding=True,
                                     literal_execute=True))
            & (a.c.expires_at <= db_now_plus(window_s))
            & (a.c.expires_at > db_now())
        )  # fmt: skip
        out: list[tuple[str, int]] = []
        with self.tx() as conn:
            for row in conn.execute(q).all():
                if row.status != "pending":
                    continue
                wanting = [
                    e.id
                    for e in conn.execute(
                        select(_E.c.id, _E.c.event_types).where(
                            (_E.c.tenant_id == row.tenant_id) & _E.c.disabled_at.is_(None)
                        )
                    )
                    if APPROVAL_EXPIRING in (e.event_types or ())
                ]
                if not wanting:
                    continue
                body = body_of(expiring_event(row._mapping))
                values = [
                    {
                        **delivery_values(ep, row.tenant_id, row.task_id, APPROVAL_EXPIRING, body),
                        "msg_id": "msg_" + sha256_hex(f"{row.id}|{ep}|expiring")[:40],
                    }
                    for ep in wanting
                ]
                stmt = (
                    self.backend.insert_ignore(_D)
                    .values(values)
                    .on_conflict_do_nothing()
                    .returning(_D.c.id)
                )
                out.extend((row.tenant_id, int(i)) for i in conn.execute(stmt).scalars())
        return out

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


def _span(seconds: float) -> str:
    """A disable window in a person's words: `24 h`, or `90 s` for a shortened one."""
    return f"{seconds / 3600:g} h" if seconds >= 3600 else f"{seconds:g} s"


def _fenced(d: Delivery) -> Any:
    # Only the attempt that claimed it settles it: a zombie's late answer changes nothing.
    return (_D.c.id == d.id) & (_D.c.attempts == d.attempts) & (_D.c.status == _PENDING)
