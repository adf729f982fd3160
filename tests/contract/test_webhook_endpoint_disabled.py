"""An endpoint failing past the disable window is disabled and its owner told, on SQLite and
Postgres: its pending deliveries are dead-lettered, an `endpoint.disabled` event reaches the
tenant's other endpoint that asks for it, signed (verified with `standardwebhooks` unchanged),
never the disabled one nor an endpoint that did not ask; `GET /v1/webhooks` and the CLI's list
show when and why. The window is shortened by its setting; time moves in SQL, never by sleeping.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from agent_jobs.cli.webhooks import _endpoint_line
from agent_jobs.notify.delivery import deliver
from agent_jobs.store import Store
from agent_jobs.store.guard import Guard
from agent_jobs.store.schema import webhook_deliveries, webhook_endpoints
from agent_jobs.store.types import db_now_plus
from agent_jobs.store.webhooks import WebhookStore
from tests.contract.support import S, running, to
from tests.integration.api_env import HarnessApi, api_settings, auth, harness_api, token
from tests.webhook_receiver import Receiver, receiver

WINDOW_S = 90.0  # AGENT_JOBS_WEBHOOK_DISABLE_AFTER_S, shortened from a day
CFG = api_settings(
    webhook_allow_networks=("127.0.0.1/32",),
    webhook_allow_http=True,
    webhook_disable_after_s=WINDOW_S,
)
D = webhook_deliveries
TENANT = "tenant-a"


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[int]]]:
    """What is handed to the queue after each commit (no Celery here)."""
    from agent_jobs.store import webhook_outbox

    seen: list[tuple[str, list[int]]] = []
    monkeypatch.setattr("agent_jobs.store.webhook_outbox._notifiers", [])
    webhook_outbox.on_commit(lambda tenant, ids: seen.append((tenant, ids)))
    return seen


@pytest.fixture
def api(store: Store, tmp_path: Path) -> HarnessApi:
    return harness_api(store, tmp_path / "ledger.db", CFG)


def _register(api: HarnessApi, url: str, *types: str) -> tuple[str, str]:
    r = api.client.post(
        "/v1/webhooks",
        json={"url": url, "event_types": list(types)},
        headers=auth(token(api.cfg, TENANT)),
    )
    assert r.status_code == 201, r.text
    return r.json()["endpoint"]["id"], r.json()["secret"]


def _escalate(store: Store) -> str:
    lease = running(store, TENANT)
    store.transition(Guard.lease(lease), to(S.ESCALATED, "gave_up"))
    return lease.task_id


def _rows(store: Store) -> list[Any]:
    with store.engine.connect() as conn:
        return list(conn.execute(select(D).order_by(D.c.id)))


def _types(rec: Receiver) -> list[str]:
    return [r.payload["type"] for r in rec.received]


def test_a_disabled_endpoints_owner_is_told_on_its_other_endpoint(
    api: HarnessApi, store: Store, published: list[tuple[str, list[int]]]
) -> None:
    ws = WebhookStore(store.engine)
    with receiver() as down, receiver() as up, receiver() as quiet:
        # The failing endpoint asks for endpoint.disabled too: it must never get its own.
        failing, _ = _register(api, down.url, "task.escalated", "endpoint.disabled")
        told, secret = _register(api, up.url, "endpoint.disabled")
        _register(api, quiet.url, "task.escalated")  # did not ask: not told
        _escalate(store)
        _escalate(store)
        down.status = 500
        first = next(r.id for r in _rows(store) if r.endpoint_id == failing)
        assert deliver(ws, CFG, first, rand=lambda: 0.5).outcome == "retry"
        # Still inside the window: failing, not disabled.
        with store.tx() as conn:
            conn.execute(update(D).values(next_attempt_at=db_now_plus(-1.0)))
        assert deliver(ws, CFG, first, rand=lambda: 0.5).outcome == "retry"
        assert ws.endpoint(TENANT, failing).disabled_at is None
        # Past it: the next failure disables it.
        with store.tx() as conn:
            conn.execute(
                update(webhook_endpoints)
                .where(webhook_endpoints.c.id == failing)
                .values(failing_since=db_now_plus(-(WINDOW_S + 1.0)))
            )
            conn.execute(update(D).values(next_attempt_at=db_now_plus(-1.0)))
        published.clear()
        assert deliver(ws, CFG, first, rand=lambda: 0.5).outcome == "dead"

        rows = _rows(store)
        mine = [r for r in rows if r.endpoint_id == failing]
        assert [(r.event_type, r.status) for r in mine] == [("task.escalated", "dead")] * 2
        [notice] = [r for r in rows if r.event_type == "endpoint.disabled"]
        assert notice.endpoint_id == told and notice.task_id is None
        assert published == [(TENANT, [notice.id])]  # committed, then handed to the queue
        assert deliver(ws, CFG, notice.id).outcome == "delivered"
        # Exactly as signed: the stored body, byte for byte, verified with the library.
        [payload] = up.verified(secret)
        assert up.received[0].body == notice.body.encode()
        assert up.received[0].msg_id == notice.msg_id
        assert "endpoint.disabled" not in _types(down) and _types(quiet) == []
        assert down.url not in notice.body  # never the URL (it may carry the receiver's token)

    data = payload["data"]
    assert payload["type"] == "endpoint.disabled"
    assert data["endpoint_id"] == failing and data["dead_lettered"] == 2
    assert data["disabled_at"] and data["failing_since"]
    assert data["reason"].startswith("failing for 90 s: HTTP 500")
    assert data["links"]["endpoint"] == f"/v1/webhooks/{failing}"

    # Where the owner looks: the API's list and the CLI's.
    listed = api.client.get("/v1/webhooks", headers=auth(token(api.cfg, TENANT))).json()
    shown = {e["id"]: e for e in listed["endpoints"]}
    assert shown[failing]["enabled"] is False and shown[failing]["disabled_at"]
    assert shown[failing]["disabled_reason"] == data["reason"]
    assert shown[told]["disabled_at"] is None and shown[told]["enabled"] is True
    line = _endpoint_line(ws.endpoint(TENANT, failing))
    assert "DISABLED (failing for 90 s: HTTP 500" in line and ") since 20" in line

    # Disabled once: later failures (a late answer, another task) announce nothing more.
    _escalate(store)
    assert [r.event_type for r in _rows(store)].count("endpoint.disabled") == 1


def test_no_other_endpoint_asking_writes_no_notice(
    api: HarnessApi, store: Store, published: list[tuple[str, list[int]]]
) -> None:
    ws = WebhookStore(store.engine)
    with receiver() as down:
        failing, _ = _register(api, down.url, "task.escalated", "endpoint.disabled")
        _escalate(store)
        down.status = 503
        [row] = _rows(store)
        assert deliver(ws, CFG, row.id).outcome == "retry"
        with store.tx() as conn:
            conn.execute(update(webhook_endpoints).values(failing_since=db_now_plus(-1e6)))
            conn.execute(update(D).values(next_attempt_at=db_now_plus(-1.0)))
        published.clear()
        assert deliver(ws, CFG, row.id).outcome == "dead"
    assert ws.endpoint(TENANT, failing).disabled_at is not None
    assert [(r.event_type, r.status) for r in _rows(store)] == [("task.escalated", "dead")]
    assert published == []
    assert json.loads(row.body)["type"] == "task.escalated"
