"""The console's page and its JSON views (`/v1/console`), without a browser: security headers,
the script's text-only rendering, cross-site requests refused, tenant walls, and the evidence an
approval card shows (on SQLite and Postgres)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from agent_jobs.console import STATIC_DIR
from agent_jobs.sim import worlds
from tests.browser.scenes import (
    APPROVER,
    INJECTED_ORDER,
    NAME_PAYLOAD,
    NOTE_PAYLOAD,
    REQUESTER,
    injected_world,
    play_incident,
    refund_registry,
    request_for,
    sim_server,
    world_with,
)
from tests.integration.api_env import api_settings, auth, harness_app, token

TENANT = "acme"


@pytest.fixture
def console(store: Any) -> Iterator[tuple[Any, Any, Any]]:
    from fastapi.testclient import TestClient

    cfg = api_settings()
    with sim_server(world_with(worlds.incident_8472, injected_world)) as sim:
        reg = refund_registry(sim.base_url)
        harness, app = harness_app(store, reg, cfg)
        yield TestClient(app), harness, (cfg, sim)


def _approver(cfg: Any, tenant: str = TENANT) -> dict[str, str]:
    return auth(token(cfg, tenant, APPROVER, roles=("approver",)))


def test_the_page_and_its_assets_carry_a_strict_csp(console: tuple[Any, Any, Any]) -> None:
    client, _, _ = console
    for path in ("/console", "/console/static/console.js", "/console/static/console.css"):
        answer = client.get(path)
        assert answer.status_code == 200, path
        csp = answer.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp
        assert "frame-ancestors 'none'" in csp and "unsafe" not in csp
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert "set-cookie" not in answer.headers
    assert client.get("/console/static/../__init__.py").status_code == 404


def test_the_page_loads_nothing_from_elsewhere_and_runs_no_inline_script() -> None:
    html = (STATIC_DIR / "index.html").read_text()
    scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", html, re.S)
    assert scripts and all(
        'src="/console/static/' in attrs and not body.strip() for attrs, body in scripts
    )
    assert not re.search(r"""(?:src|href)=["'](?:https?:)?//""", html)
    assert not re.search(r"\son[a-z]+=", html)  # no inline handlers either


def test_the_script_never_parses_markup() -> None:
    source = (STATIC_DIR / "console.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "new Function", "DOMParser", "createContextualFragment"):  # fmt: skip
        assert sink not in source, sink
    assert "sessionStorage" in source and "document.cookie" not in source


def test_a_cross_site_request_carries_no_credential(console: tuple[Any, Any, Any]) -> None:
    client, harness, (cfg, _) = console
    task = harness.submit(TENANT, "req-x", request_for(INJECTED_ORDER), requester=REQUESTER)
    harness.settle(task.id)
    [approval] = harness.store.list_approvals(TENANT, status="pending")
    # What a forged form on another site can send: a simple POST, cookies, no Authorization.
    forged = client.post(
        f"/v1/approvals/{approval.approval_id}/grant",
        content="note=x",
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "Origin": "https://evil.example",
        },
        cookies={"session": "anything"},
    )
    assert forged.status_code == 401
    assert harness.store.approval(approval.approval_id).status == "pending"
    # Another origin's script would need a preflight for the Authorization header: never allowed.
    preflight = client.options(
        f"/v1/approvals/{approval.approval_id}/grant",
        headers={
            "Origin": "https://evil.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type",
        },
    )
    assert "access-control-allow-origin" not in preflight.headers
    assert client.get("/v1/console/me", headers=_approver(cfg)).json() == {
        "tenant_id": TENANT,
        "subject": APPROVER,
        "roles": ["approver"],
    }


def test_an_approval_card_has_the_action_and_the_evidence(console: tuple[Any, Any, Any]) -> None:
    client, harness, (cfg, _) = console
    task = harness.submit(TENANT, "req-9104", request_for(INJECTED_ORDER), requester=REQUESTER)
    harness.settle(task.id)
    answer = client.get("/v1/console/approvals?status=pending", headers=_approver(cfg))
    assert answer.status_code == 200
    [card] = answer.json()["approvals"]
    assert (card["tool"], card["amount"], card["payment_id"]) == (
        "refunds.create",
        "₹2,000",
        "pay_9104_b",
    )
    assert card["requester"] == REQUESTER and card["policy_version"] == "POL-REF-004@4"
    assert card["args"] == {"payment_id": "pay_9104_b", "amount_minor": 200_000, "currency": "INR"}
    facts = {(f["kind"], f["id"]): f for f in card["evidence"]["facts"]}
    assert facts[("payment", "pay_9104_b")]["fields"]["status"] == "captured"
    assert facts[("payment", "pay_9104_a")]["source"]["tool"] == "payments.list"
    assert facts[("order", "9104")]["source"]["tool"] == "orders.get"
    # The customer's own words come back exactly as written: the page renders them as text.
    order = card["evidence"]["order"]
    assert (order["customer_name"], order["note"]) == (NAME_PAYLOAD, NOTE_PAYLOAD)
    # Roles and walls: a token without the role, and another tenant's approver.
    plain = auth(token(cfg, TENANT, "svc-x"))
    assert client.get("/v1/console/approvals", headers=plain).status_code == 403
    other = client.get("/v1/console/approvals", headers=_approver(cfg, "globex"))
    assert other.json()["approvals"] == []


def test_the_incident_timeline_and_its_walls(console: tuple[Any, Any, Any]) -> None:
    client, harness, (cfg, sim) = console
    incident = play_incident(harness.store, sim, cfg, TENANT)
    mine = auth(token(cfg, TENANT, "oncall"))
    body = client.get(f"/v1/console/tasks/{incident.task_id}/timeline", headers=mine).json()
    assert body["task"]["status"] == "COMPLETED"
    [*_, lost] = body["worker_changes"]
    assert (lost["from_worker"], lost["to_worker"], lost["lease_expired"]) == ("w-07", "w-12", True)
    assert body["model"]["calls"] == 4 and body["model"]["input_tokens"] > 0
    assert [t["outcome"] for t in body["tools"] if t["tool"] == "refunds.create"] == ["unknown"]
    assert body["verdict"]["verified"] is True and "processing" in body["reply"]
    names = [s["name"] for s in body["trace"]["spans"]]
    assert "approval.wait" in names and "reconcile" in names
    theirs = auth(token(cfg, "globex", "oncall"))
    assert (
        client.get(f"/v1/console/tasks/{incident.task_id}/timeline", headers=theirs).status_code
        == 404
    )
    listed = client.get("/v1/console/tasks?status=COMPLETED", headers=theirs).json()
    assert listed["tasks"] == []
    listed = client.get("/v1/console/tasks?status=COMPLETED", headers=mine).json()
    assert [t["task_id"] for t in listed["tasks"]] == [incident.task_id]


def test_the_queue_view_counts_the_callers_tenant_only(console: tuple[Any, Any, Any]) -> None:
    client, harness, (cfg, _) = console
    task = harness.submit(TENANT, "req-9104", request_for(INJECTED_ORDER), requester=REQUESTER)
    harness.settle(task.id)
    ops = ("operator",)
    mine = client.get("/v1/console/queues", headers=auth(token(cfg, TENANT, "ops", roles=ops)))
    assert mine.status_code == 200, mine.text
    assert mine.json()["tenant_id"] == TENANT and mine.json()["by_status"] == {"APPROVAL_WAIT": 1}
    assert mine.json()["in_flight"] == 0 and mine.json()["held"] == 0
    assert mine.json()["dead_letters"] == []
    theirs = client.get("/v1/console/queues", headers=auth(token(cfg, "globex", "ops", roles=ops)))
    assert theirs.json()["by_status"] == {} and theirs.json()["queue"].endswith(".globex")


def test_the_queue_view_needs_the_operator_role(console: tuple[Any, Any, Any]) -> None:
    """Queue depth, in-flight steps and dead-letter reasons are an operator's view: a requester
    or an approver of the same tenant gets 403 and nothing of it."""
    client, _, (cfg, _) = console
    for roles in ((), ("approver",), ("Operator",), ("operators",)):
        answer = client.get(
            "/v1/console/queues", headers=auth(token(cfg, TENANT, "u", roles=roles))
        )
        assert answer.status_code == 403, (roles, answer.text)
        assert answer.json()["error"]["code"] == "forbidden"
        assert "dead_letters" not in answer.text


@pytest.mark.redis
def test_queue_depth_and_oldest_age_come_from_the_broker(redis_url: str, tenant: str) -> None:
    import json
    import time

    import redis

    from agent_jobs.api.console_api import _broker_queue
    from agent_jobs.core.names import ENQUEUED_AT_HEADER, tenant_queue
    from tests.conftest import SESSION_PREFIX

    queue = tenant_queue(SESSION_PREFIX, tenant)
    client = redis.Redis.from_url(redis_url)
    try:
        assert _broker_queue(redis_url, queue) == (0, 0.0)
        for age in (30, 5):  # publishers LPUSH: the oldest is at the tail
            message = {"headers": {ENQUEUED_AT_HEADER: time.time() - age}, "body": ""}
            client.lpush(queue, json.dumps(message))
        depth, oldest = _broker_queue(redis_url, queue)
        assert depth == 2 and oldest is not None and 29 <= oldest < 60
    finally:
        client.delete(queue)
    assert _broker_queue("memory://", queue) == (None, None)
