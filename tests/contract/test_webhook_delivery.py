"""Webhook delivery on SQLite and Postgres, to a real HTTP receiver on 127.0.0.1: signed per
Standard Webhooks (verified with the `standardwebhooks` library unchanged), retried on the
schedule, in order per task, dead-lettered and replayed with the same `webhook-id`. Time moves
in SQL, never by sleeping."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select, update

from agent_jobs.config import Settings
from agent_jobs.notify import sender
from agent_jobs.notify.delivery import deliver
from agent_jobs.notify.retry import MAX_ATTEMPTS
from agent_jobs.notify.service import WebhookService
from agent_jobs.notify.sweeper import sweep_webhooks
from agent_jobs.notify.urls import UrlPolicy
from agent_jobs.store import Store
from agent_jobs.store.guard import Guard
from agent_jobs.store.schema import webhook_deliveries, webhook_endpoints
from agent_jobs.store.types import db_now_plus
from agent_jobs.store.webhooks import WebhookStore
from tests.contract.support import S, action, park_for_approval, running, to
from tests.webhook_receiver import receiver

CFG = Settings().with_overrides(
    webhook_allow_networks=("127.0.0.1/32",), webhook_allow_http=True, sweep_interval_s=0.5
)
D = webhook_deliveries


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[int]]]:
    """What the outbox hands the queue after each commit (no Celery here)."""
    seen: list[tuple[str, list[int]]] = []
    monkeypatch.setattr("agent_jobs.store.webhook_outbox._notifiers", [])
    from agent_jobs.store import webhook_outbox

    webhook_outbox.on_commit(lambda tenant, ids: seen.append((tenant, ids)))
    return seen


def _register(store: Store, tenant: str, url: str, *types: str) -> tuple[WebhookService, str, str]:
    svc = WebhookService(WebhookStore(store.engine), CFG)
    reg = svc.register(tenant, url, list(types) or ["task.completed", "task.escalated"])
    return svc, reg.endpoint.id, reg.secret


def _escalate(store: Store, tenant: str) -> str:
    lease = running(store, tenant)
    store.transition(Guard.lease(lease), to(S.ESCALATED, "gave_up"))
    return lease.task_id


def _rows(store: Store) -> list[Any]:
    with store.engine.connect() as conn:
        return list(conn.execute(select(D).order_by(D.c.id)))


def _all_due(store: Store) -> None:
    """Every pending delivery's timer falls due now (an hour, a day: whatever it waited)."""
    with store.tx() as conn:
        conn.execute(
            update(D)
            .where(D.c.status == "pending")
            .values(next_attempt_at=db_now_plus(-1.0), updated_at=db_now_plus(-3600.0))
        )


def _drain(store: Store) -> list[str]:
    """What a worker does with every due delivery, in id order, until none is sent."""
    ws = WebhookStore(store.engine)
    outcomes = []
    for _ in range(100):
        ids = [r.id for r in _rows(store) if r.status == "pending"]
        done = [deliver(ws, CFG, i, rand=lambda: 0.5).outcome for i in ids]
        outcomes += [o for o in done if o != "skipped"]
        if all(o == "skipped" for o in done):
            break
    return outcomes


def test_a_delivery_verifies_with_standardwebhooks_unchanged(
    store: Store, tenant: str, published: list[tuple[str, list[int]]]
) -> None:
    with receiver() as rec:
        _, _, secret = _register(store, tenant, rec.url)
        task_id = _escalate(store, tenant)
        [(who, ids)] = published
        assert who == tenant
        attempt = deliver(WebhookStore(store.engine), CFG, ids[0])
        assert attempt.outcome == "delivered"
        [payload] = rec.verified(secret)
    assert payload["type"] == "task.escalated"
    assert payload["data"]["task_id"] == task_id
    [row] = _rows(store)
    assert row.status == "delivered" and rec.received[0].msg_id == row.msg_id
    assert rec.received[0].headers["content-type"] == "application/json"


def test_rotation_signs_with_both_secrets_until_the_overlap_ends(
    store: Store, tenant: str, published: list[tuple[str, list[int]]]
) -> None:
    with receiver() as rec:
        svc, endpoint, old = _register(store, tenant, rec.url)
        new = svc.rotate(tenant, endpoint).secret
        _escalate(store, tenant)
        assert _drain(store) == ["delivered"]
        sigs = rec.received[0].headers["webhook-signature"].split(" ")
        assert len(sigs) == 2 and all(s.startswith("v1,") for s in sigs)
        assert rec.verified(old) and rec.verified(new)


def test_receiver_down_for_an_hour_every_event_arrives_in_order(
    store: Store, tenant: str, published: list[tuple[str, list[int]]]
) -> None:
    """Two events of one task (an approval asked for, then the end) and one of another; the
    receiver answers 503 for over an hour of simulated time. Each round tries only the first
    pending event of each task (the order rule); when it answers again every event arrives,
    in order per task, each id accepted once, duplicates only with the same id."""
    with receiver() as rec:
        _, _, secret = _register(store, tenant, rec.url, "approval.requested", "task.escalated")
        first = _parked_then_escalated(store, tenant)
        other = _escalate(store, tenant)
        rec.status = 503
        for _ in range(5):  # 5 s, 5 min, 30 min, 2 h: past an hour of backoff
            _drain(store)
            _all_due(store)
        assert rec.received and all(r.headers["x-answered"] == "503" for r in rec.received)
        assert {r.payload["type"] for r in rec.received} == {"approval.requested", "task.escalated"}
        assert {
            r.payload["data"]["task_id"]
            for r in rec.received
            if r.payload["type"] == "task.escalated"
        } == {other}
        rec.status = 200
        _all_due(store)
        _drain(store)
        accepted = rec.accepted()
        assert len(rec.verified(secret)) == len(rec.received)
    got = [(r.payload["data"]["task_id"], r.payload["type"]) for r in accepted]
    assert sorted(got) == sorted(
        [(first, "approval.requested"), (first, "task.escalated"), (other, "task.escalated")]
    )
    assert [t for task, t in got if task == first] == ["approval.requested", "task.escalated"]
    assert len({r.msg_id for r in accepted}) == 3
    assert {r.msg_id for r in rec.received} == {r.msg_id for r in accepted}
    assert {r.status for r in _rows(store)} == {"delivered"}


def _parked_then_escalated(store: Store, tenant: str) -> str:
    """A task that asks for an approval, then escalates (the sweeper's path, its own
    transaction): two events, in that order."""
    from agent_jobs.store.transition import apply

    lease = running(store, tenant)
    parked = store.transition(Guard.lease(lease), park_for_approval(action(), f"apr_{tenant}"))
    assert parked.task is not None
    with store.tx() as conn:
        apply(store.backend, conn, Guard.seen(parked.task), to(S.ESCALATED, "expired"))
    return lease.task_id


def test_in_order_per_task_a_later_event_waits_for_the_earlier(
    store: Store, tenant: str, published: list[tuple[str, list[int]]]
) -> None:
    with receiver() as rec:
        _register(store, tenant, rec.url, "approval.requested", "task.escalated")
        _parked_then_escalated(store, tenant)
        ws = WebhookStore(store.engine)
        first, second = (r.id for r in _rows(store))
        rec.status = 500
        assert deliver(ws, CFG, first).outcome == "retry"
        _all_due(store)
        assert deliver(ws, CFG, second).outcome == "skipped"  # waits its turn
        rec.status = 204
        attempt = deliver(ws, CFG, first)
        assert (attempt.outcome, attempt.next_id) == ("delivered", second)
        assert deliver(ws, CFG, second).outcome == "delivered"
        kinds = [r.payload["type"] for r in rec.accepted()]
    assert kinds == ["approval.requested", "task.escalated"]


def test_dead_letter_after_the_schedule_then_replay_with_the_same_id(
    store: Store, tenant: str, published: list[tuple[str, list[int]]]
) -> None:
    with receiver() as rec:
        svc, _, secret = _register(store, tenant, rec.url)
        _escalate(store, tenant)
        rec.status = 410
        ws = WebhookStore(store.engine)
        [row] = _rows(store)
        for _ in range(MAX_ATTEMPTS):
            _all_due(store)
            deliver(ws, CFG, row.id)
        [row] = _rows(store)
        assert (row.status, row.attempts, row.last_status) == ("dead", MAX_ATTEMPTS, 410)
        assert [d.msg_id for d in svc.deliveries(tenant, status="dead")] == [row.msg_id]
        assert svc.deliveries(tenant + "x", status="dead") == []  # a wall
        rec.status = 200
        published.clear()
        assert svc.replay(tenant, msg_id=row.msg_id) == [row.id]
        assert published == [(tenant, [row.id])]
        assert deliver(ws, CFG, row.id).outcome == "delivered"
        assert rec.accepted()[0].msg_id == row.msg_id
        assert rec.verified(secret)


def test_worker_dead_mid_send_the_sweeper_sends_it_again_with_the_same_id(
    store: Store, tenant: str, published: list[tuple[str, list[int]]]
) -> None:
    """A claim whose worker died (no settle) holds the row for its lease only; then the sweeper
    publishes it again and the receiver sees the same webhook-id twice at most."""
    with receiver() as rec:
        _register(store, tenant, rec.url)
        _escalate(store, tenant)
        ws = WebhookStore(store.engine)
        [row] = _rows(store)
        claimed = ws.claim_delivery(row.id, 60.0)
        assert claimed is not None  # ...and the worker dies here
        published.clear()
        assert sweep_webhooks(ws, CFG) == 0  # its lease holds
        with store.tx() as conn:  # the claim was 61 s ago: its 60 s lease lapsed
            conn.execute(
                update(D).values(next_attempt_at=db_now_plus(-1.0), updated_at=db_now_plus(-61.0))
            )
        assert sweep_webhooks(ws, CFG) == 1
        assert published == [(tenant, [row.id])]
        assert sweep_webhooks(ws, CFG) == 0  # published: not again before the quiet time
        assert deliver(ws, CFG, row.id).outcome == "delivered"
        # The dead worker's late answer changes nothing (fenced by its attempt).
        ws.failed(claimed.delivery, status_code=None, error="late", retry_in_s=1.0,
                  disable_after_s=86400)  # fmt: skip
        assert _rows(store)[0].status == "delivered"
        assert [r.msg_id for r in rec.accepted()] == [row.msg_id]


def test_an_endpoint_failing_for_a_day_is_disabled_and_its_pending_dead_lettered(
    store: Store, tenant: str, published: list[tuple[str, list[int]]]
) -> None:
    with receiver() as rec:
        svc, endpoint, _ = _register(store, tenant, rec.url)
        _escalate(store, tenant)
        _escalate(store, tenant)
        rec.status = 500
        ws = WebhookStore(store.engine)
        first = _rows(store)[0].id
        assert deliver(ws, CFG, first).outcome == "retry"
        with store.tx() as conn:
            conn.execute(update(webhook_endpoints).values(failing_since=db_now_plus(-86401.0)))
        _all_due(store)
        assert deliver(ws, CFG, first).outcome == "dead"
        ep = svc.get(tenant, endpoint)
        assert ep.disabled_at is not None and "failing for 24 h" in (ep.disabled_reason or "")
        assert {r.status for r in _rows(store)} == {"dead"}
        _escalate(store, tenant)  # no new event for a disabled endpoint
        assert len(_rows(store)) == 2
        rec.status = 204
        svc.update(tenant, endpoint, enabled=True)
        assert len(svc.replay(tenant, endpoint_id=endpoint)) == 2
        assert _drain(store) == ["delivered", "delivered"]


def test_connect_time_check_refuses_a_name_rebound_inside(store: Store, tenant: str) -> None:
    """Registered while the name resolved outside; it now resolves to a private address: the
    attempt is refused before any connection, and retried later like any failure."""
    answers = {"host": "93.184.216.34"}

    def resolver(host: str, port: int, **_: Any) -> list[tuple[Any, ...]]:
        return [(2, 1, 6, "", (answers["host"], port))]

    svc = WebhookService(WebhookStore(store.engine), Settings(), resolver=resolver)
    svc.register(tenant, "https://hooks.example.com/x", ["task.escalated"])
    answers["host"] = "10.1.2.3"
    _escalate(store, tenant)
    [row] = _rows(store)
    sent: list[Any] = []

    def post(url: str, headers: dict[str, str], body: bytes, policy: UrlPolicy, t: float) -> Any:
        answer = sender.post(url, headers, body, policy, t, resolver=resolver)
        sent.append(answer)
        return answer

    attempt = deliver(WebhookStore(store.engine), Settings(), row.id, post=post)
    assert attempt.outcome == "retry"
    assert sent[0].error.startswith("refused: hooks.example.com resolves to 10.1.2.3")


def test_an_approval_close_to_expiry_is_announced_once_per_endpoint(
    store: Store, tenant: str, published: list[tuple[str, list[int]]]
) -> None:
    """The sweeper writes `approval.expiring` for a pending approval within five minutes of
    its expiry, once (two sweeps, or two at once, add nothing), and sends it."""
    with receiver() as rec:
        _, _, secret = _register(store, tenant, rec.url, "approval.expiring")
        lease = running(store, tenant)
        store.transition(Guard.lease(lease), park_for_approval(action(), f"apr_x{tenant}", 3600))
        ws = WebhookStore(store.engine)
        assert sweep_webhooks(ws, CFG) == 0  # an hour left: not yet
        from agent_jobs.store.schema import approvals

        with store.tx() as conn:
            conn.execute(update(approvals).values(expires_at=db_now_plus(120.0)))
        assert sweep_webhooks(ws, CFG) == 1
        assert sweep_webhooks(ws, CFG) == 0
        [row] = _rows(store)
        assert row.event_type == "approval.expiring"
        assert deliver(ws, CFG, row.id).outcome == "delivered"
        [payload] = rec.verified(secret)
    assert payload["data"]["approval_id"] == f"apr_x{tenant}"
    assert payload["data"]["action"]["amount_minor"] == 1200
