"""The simulated systems' state: orders, payments, refunds and policies behind one lock.

Every public method is atomic: it takes the lock, checks, mutates, writes the state file (when there
is one) and only then releases. That is what makes twenty concurrent `POST /refunds` with one key
create exactly one refund, and what makes a committed refund survive a restart.
"""

from __future__ import annotations

import threading
from pathlib import Path

from agent_jobs.core.clock import Clock, SystemClock
from agent_jobs.sim import search, statefile
from agent_jobs.sim.errors import SimError
from agent_jobs.sim.models import (
    Json,
    Order,
    Payment,
    PolicyVersion,
    Refund,
    RefundRequest,
    WorldData,
)


class World:
    """Orders, payments, refunds and policy documents, with the payments system's refund rules."""

    def __init__(
        self,
        data: WorldData | None = None,
        *,
        clock: Clock | None = None,
        state_file: Path | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._clock: Clock = clock or SystemClock()
        self._state_file = state_file
        self._orders: dict[str, Order] = {}
        self._payments: dict[str, Payment] = {}
        self._refunds: dict[str, Refund] = {}
        self._refund_by_key: dict[str, str] = {}
        self._policies: dict[str, dict[int, PolicyVersion]] = {}
        self._next_refund_seq = 1
        self._install(data or WorldData())

    # -- admin -------------------------------------------------------------------------------

    def load(self, data: WorldData) -> None:
        """Replace the whole world (and the state file) with `data`."""
        with self._lock:
            self._install(data)
            self._save()

    def reset(self) -> None:
        """Empty the world."""
        self.load(WorldData())

    def dump(self) -> WorldData:
        """The full state, every refund ever created included; `load(dump())` is the identity."""
        with self._lock:
            return self._snapshot()

    # -- orders and payments -----------------------------------------------------------------

    def get_order(self, order_id: str) -> Json:
        with self._lock:
            order = self._orders.get(order_id)
            if order is None:
                raise SimError(404, "order_not_found", f"order {order_id!r} does not exist")
            body = order.model_dump(mode="json")
            body["payment_ids"] = [p.payment_id for p in self._payments_of(order_id)]
            return body

    def list_payments(self, order_id: str) -> list[Json]:
        """The order's payments, oldest first. An unknown order simply has none."""
        with self._lock:
            return [self._payment_json(p) for p in self._payments_of(order_id)]

    # -- refunds -----------------------------------------------------------------------------

    def create_refund(self, idempotency_key: str, request: RefundRequest) -> tuple[Json, bool]:
        """Create a refund, or replay the one created under this key. Returns (refund, replayed).

        Only successes are remembered under a key: a refused request leaves nothing behind, so a
        caller that saw nothing may retry with the same key once the cause is gone.
        """
        with self._lock:
            existing_id = self._refund_by_key.get(idempotency_key)
            if existing_id is not None:
                existing = self._refunds[existing_id]
                if _same_request(existing, request):
                    return self._refund_json(existing), True
                raise SimError(
                    422,
                    "idempotency_key_reused",
                    f"idempotency key {idempotency_key!r} already created {existing.refund_id} "
                    f"({existing.amount_minor} {existing.currency} on {existing.payment_id}) "
                    "with a different body",
                )
            payment = self._refundable_payment(request)
            refund = Refund(
                refund_id=self._take_refund_id(),
                payment_id=payment.payment_id,
                amount_minor=request.amount_minor,
                currency=request.currency,
                status="processing",
                reason=request.reason,
                idempotency_key=idempotency_key,
                created_at=_iso(self._clock),
            )
            self._refunds[refund.refund_id] = refund
            self._refund_by_key[idempotency_key] = refund.refund_id
            self._save()
            return self._refund_json(refund), False

    def find_refunds(
        self, *, idempotency_key: str | None = None, payment_id: str | None = None
    ) -> list[Json]:
        """Refunds matching every given filter, oldest first."""
        with self._lock:
            found = [
                r
                for r in self._refunds.values()
                if (idempotency_key is None or r.idempotency_key == idempotency_key)
                and (payment_id is None or r.payment_id == payment_id)
            ]
            return [self._refund_json(r) for r in found]

    def get_refund(self, refund_id: str) -> Json:
        with self._lock:
            refund = self._refunds.get(refund_id)
            if refund is None:
                raise SimError(404, "refund_not_found", f"refund {refund_id!r} does not exist")
            return self._refund_json(refund)

    # -- policies ----------------------------------------------------------------------------

    def get_policy(self, doc_id: str, version: int | None = None) -> Json:
        """A policy document: the latest version, or the one asked for."""
        with self._lock:
            versions = self._policies.get(doc_id)
            if not versions:
                raise SimError(
                    404, "policy_not_found", f"policy document {doc_id!r} does not exist"
                )
            if version is None:
                return versions[max(versions)].model_dump(mode="json")
            found = versions.get(version)
            if found is None:
                raise SimError(
                    404,
                    "policy_version_not_found",
                    f"policy {doc_id!r} has no version {version}; it has {sorted(versions)}",
                )
            return found.model_dump(mode="json")

    def search_policies(self, query: str, *, doc_id: str | None, limit: int) -> list[Json]:
        """Passages of the latest version of each document, best first (see `search`)."""
        with self._lock:
            latest = [v[max(v)] for d, v in self._policies.items() if doc_id in (None, d)]
        passages = [
            search.Passage(p.doc_id, p.version, c.chunk_id, c.text)
            for p in latest
            for c in p.chunks
        ]
        return [
            {
                "doc_id": h.passage.doc_id,
                "version": h.passage.version,
                "chunk_id": h.passage.chunk_id,
                "text": h.passage.text,
                "score": h.score,
            }
            for h in search.rank(query, passages, limit)
        ]

    # -- internals (call with the lock held) -------------------------------------------------

    def _install(self, data: WorldData) -> None:
        self._orders = {o.order_id: o for o in data.orders}
        self._payments = {p.payment_id: p for p in data.payments}
        self._refunds = {r.refund_id: r for r in data.refunds}
        self._refund_by_key = {r.idempotency_key: r.refund_id for r in data.refunds}
        self._policies = {}
        for p in data.policies:
            self._policies.setdefault(p.doc_id, {})[p.version] = p
        self._next_refund_seq = data.next_refund_seq

    def _snapshot(self) -> WorldData:
        return WorldData(
            orders=list(self._orders.values()),
            payments=list(self._payments.values()),
            refunds=list(self._refunds.values()),
            policies=[p for versions in self._policies.values() for p in versions.values()],
            next_refund_seq=self._next_refund_seq,
        )

    def _save(self) -> None:
        if self._state_file is not None:
            statefile.write(self._state_file, self._snapshot())

    def _payments_of(self, order_id: str) -> list[Payment]:
        found = [p for p in self._payments.values() if p.order_id == order_id]
        return sorted(found, key=lambda p: (p.created_at, p.payment_id))

    def _refunded_minor(self, payment_id: str) -> int:
        return sum(
            r.amount_minor
            for r in self._refunds.values()
            if r.payment_id == payment_id and r.counts
        )

    def _payment_json(self, payment: Payment) -> Json:
        body = payment.model_dump(mode="json")
        body["refunded_minor"] = self._refunded_minor(payment.payment_id)
        return body

    def _refund_json(self, refund: Refund) -> Json:
        body = refund.model_dump(mode="json")
        body["order_id"] = self._payments[refund.payment_id].order_id
        return body

    def _refundable_payment(self, request: RefundRequest) -> Payment:
        """The payment to refund, after the payments system's rules; each refusal is a SimError."""
        payment = self._payments.get(request.payment_id)
        if payment is None:
            raise SimError(
                404, "payment_not_found", f"payment {request.payment_id!r} does not exist"
            )
        if not payment.refundable:
            raise SimError(
                409,
                "payment_not_captured",
                f"payment {payment.payment_id} is a {payment.kind} with status {payment.status}: "
                "only captured money can be refunded",
            )
        if request.currency != payment.currency:
            raise SimError(
                422,
                "currency_mismatch",
                f"payment {payment.payment_id} is in {payment.currency}, "
                f"the refund asks for {request.currency}",
            )
        prior = [
            r for r in self._refunds.values() if r.payment_id == payment.payment_id and r.counts
        ]
        if prior:
            raise SimError(
                409,
                "already_refunded",
                f"payment {payment.payment_id} already has refund {prior[0].refund_id} "
                f"under another idempotency key",
            )
        refundable = payment.amount_minor - self._refunded_minor(payment.payment_id)
        if request.amount_minor > refundable:
            raise SimError(
                422,
                "exceeds_refundable",
                f"refund of {request.amount_minor} exceeds the {refundable} {payment.currency} "
                f"still refundable on payment {payment.payment_id}",
            )
        return payment

    def _take_refund_id(self) -> str:
        # A loaded world may already hold rf_<n> ids past the counter; skip rather than collide.
        while True:
            refund_id = f"rf_{self._next_refund_seq}"
            self._next_refund_seq += 1
            if refund_id not in self._refunds:
                return refund_id


def _same_request(refund: Refund, request: RefundRequest) -> bool:
    return (
        refund.payment_id == request.payment_id
        and refund.amount_minor == request.amount_minor
        and refund.currency == request.currency
        and refund.reason == request.reason
    )


def _iso(clock: Clock) -> str:
    return clock.now().isoformat(timespec="milliseconds").replace("+00:00", "Z")
