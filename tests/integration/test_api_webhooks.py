"""`/v1/webhooks` over the real store: register, hear about an approval with what an approver
needs (and no argument besides the amount), verified with `standardwebhooks`; the SSRF guard at
registration; tenants are walls; replay is an operator's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_jobs.notify.delivery import deliver
from agent_jobs.store.webhooks import WebhookStore
from tests.integration.api_env import HarnessApi, api_settings, auth, harness_api, token
from tests.webhook_receiver import receiver

pytestmark = pytest.mark.postgres

BIG = {"account": "acc_9", "amount_minor": 150_000}  # above the example's approval threshold
LOCAL = {"webhook_allow_networks": ("127.0.0.1/32",), "webhook_allow_http": True}


@pytest.fixture
def api(pg_store: Any, tmp_path: Path) -> HarnessApi:
    return harness_api(pg_store, tmp_path / "ledger.db", api_settings(**LOCAL))


def _deliver_all(api: HarnessApi) -> list[str]:
    ws = WebhookStore(api.store.engine)
    found = ws.deliveries("tenant-a", status="pending") + ws.deliveries(
        "tenant-b", status="pending"
    )
    return [deliver(ws, api.cfg, d.id).outcome for d in sorted(found, key=lambda d: d.id)]


def test_an_approval_reaches_a_registered_endpoint_signed(api: HarnessApi) -> None:
    a = token(api.cfg, "tenant-a", "svc-a")
    with receiver() as rec:
        r = api.client.post(
            "/v1/webhooks",
            json={"url": rec.url, "event_types": ["approval.requested", "task.completed"]},
            headers=auth(a),
        )
        assert r.status_code == 201, r.text
        secret, endpoint = r.json()["secret"], r.json()["endpoint"]
        assert secret.startswith("whsec_") and endpoint["enabled"] is True
        listed = api.client.get("/v1/webhooks", headers=auth(a)).json()
        assert [e["id"] for e in listed["endpoints"]] == [endpoint["id"]]
        assert "secret" not in str(listed["endpoints"])  # shown once only
        sub = api.client.post(
            "/v1/tasks",
            json={"workflow": "example@1", "input": BIG},
            headers=auth(a, **{"Idempotency-Key": "k-1"}),
        )
        task_id = sub.json()["task_id"]
        api.harness.run_until_idle()
        assert _deliver_all(api) == ["delivered"]
        [payload] = rec.verified(secret)
    data = payload["data"]
    assert payload["type"] == "approval.requested"
    assert data["task_id"] == task_id
    assert data["action"]["amount_minor"] == 150_000
    assert data["policy_reason"]
    assert data["links"]["console"].startswith("/console/")
    assert "acc_9" not in rec.received[0].body.decode()  # the argument is never sent
    counts = api.client.get("/v1/webhooks", headers=auth(a)).json()["deliveries"]
    assert counts == {"pending": 0, "delivered": 1, "dead": 0}
    deliveries = api.client.get(f"/v1/webhooks/deliveries?task_id={task_id}", headers=auth(a))
    [d] = deliveries.json()["deliveries"]
    assert (d["status"], d["msg_id"]) == ("delivered", rec.received[0].msg_id)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "https://127.0.0.1/x", "event_types": ["task.completed"]}, "url"),
        ({"url": "https://169.254.169.254/x", "event_types": ["task.completed"]}, "url"),
        ({"url": "http://[::1]:8080/x", "event_types": ["task.completed"]}, "url"),
        ({"url": "https://hooks.example.com/x", "event_types": ["task.exploded"]}, None),
        ({"url": "https://hooks.example.com/x", "event_types": []}, None),
    ],
)
def test_registration_refuses_unsafe_urls_and_unknown_types(
    pg_store: Any, tmp_path: Path, body: dict[str, Any], field: str | None
) -> None:
    strict = harness_api(pg_store, tmp_path / "ledger.db", api_settings())
    r = strict.client.post("/v1/webhooks", json=body, headers=auth(token(strict.cfg, "t1")))
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    if field is not None:
        assert err["code"] == "invalid_input" and err.get("field") == field
    assert (
        strict.client.get("/v1/webhooks", headers=auth(token(strict.cfg, "t1"))).json()["endpoints"]
        == []
    )


def test_another_tenants_endpoint_is_a_404_everywhere(api: HarnessApi) -> None:
    b = token(api.cfg, "tenant-b", "svc-b")
    with receiver() as rec:
        made = api.client.post(
            "/v1/webhooks",
            json={"url": rec.url, "event_types": ["task.completed"]},
            headers=auth(b),
        ).json()
    endpoint_id = made["endpoint"]["id"]
    a = token(api.cfg, "tenant-a", "mallory", roles=("operator",))
    for method, path, body in [
        ("GET", f"/v1/webhooks/{endpoint_id}", None),
        ("PATCH", f"/v1/webhooks/{endpoint_id}", {"enabled": False}),
        ("DELETE", f"/v1/webhooks/{endpoint_id}", None),
        ("POST", f"/v1/webhooks/{endpoint_id}/rotate", None),
        ("POST", f"/v1/webhooks/{endpoint_id}/replay", None),
        ("GET", f"/v1/webhooks/deliveries?endpoint_id={endpoint_id}", None),
    ]:
        r = api.client.request(method, path, json=body, headers=auth(a))
        assert r.status_code == 404, (method, path, r.text)
        assert r.json()["error"]["code"] == "not_found"
    assert api.client.get("/v1/webhooks", headers=auth(a)).json()["endpoints"] == []
    still = api.client.get(f"/v1/webhooks/{endpoint_id}", headers=auth(b)).json()
    assert still["enabled"] is True


def test_replay_is_an_operators_and_rotation_keeps_the_old_secret(api: HarnessApi) -> None:
    a = token(api.cfg, "tenant-a", "svc-a")
    with receiver() as rec:
        made = api.client.post(
            "/v1/webhooks",
            json={"url": rec.url, "event_types": ["task.completed"]},
            headers=auth(a),
        ).json()
        endpoint_id, old = made["endpoint"]["id"], made["secret"]
        r = api.client.post(f"/v1/webhooks/{endpoint_id}/replay", headers=auth(a))
        assert r.status_code == 403
        op = token(api.cfg, "tenant-a", "oncall", roles=("operator",))
        r = api.client.post(f"/v1/webhooks/{endpoint_id}/replay", headers=auth(op))
        assert r.json() == {"replayed": 0}
        new = api.client.post(f"/v1/webhooks/{endpoint_id}/rotate", headers=auth(a)).json()
        assert new["secret"] != old
        api.client.post(
            "/v1/tasks",
            json={"workflow": "example@1", "input": {"account": "acc_1", "amount_minor": 100}},
            headers=auth(a, **{"Idempotency-Key": "k-2"}),
        )
        api.harness.run_until_idle()
        assert _deliver_all(api) == ["delivered"]
        assert rec.verified(old) == rec.verified(new["secret"])
        off = api.client.patch(
            f"/v1/webhooks/{endpoint_id}", json={"enabled": False}, headers=auth(a)
        ).json()
        assert off["enabled"] is False and off["disabled_reason"] == "disabled by its owner"
        assert api.client.delete(f"/v1/webhooks/{endpoint_id}", headers=auth(a)).status_code == 204
        assert api.client.get(f"/v1/webhooks/{endpoint_id}", headers=auth(a)).status_code == 404
