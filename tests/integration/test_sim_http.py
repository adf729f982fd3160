"""The sim's HTTP contract, route by route and error code by error code, over real sockets."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from agent_jobs.core.clock import FixedClock
from agent_jobs.sim import worlds
from agent_jobs.sim.server import SimServer

KEY = "refund:req-8472:pay_8472_b"
BODY = {"payment_id": "pay_8472_b", "amount_minor": 200_000, "currency": "INR"}


@pytest.fixture
def sim() -> Iterator[SimServer]:
    with SimServer(worlds.incident_8472(), clock=FixedClock()) as server:
        yield server


def get(sim: SimServer, path: str, **params: str) -> requests.Response:
    return requests.get(sim.base_url + path, params=params, timeout=5)


def post_refund(
    sim: SimServer, body: Any = BODY, key: str | None = KEY, **headers: str
) -> requests.Response:
    if key is not None:
        headers["Idempotency-Key"] = key
    return requests.post(sim.base_url + "/refunds", json=body, headers=headers, timeout=5)


def error(r: requests.Response, status: int) -> str:
    """The error code, after checking the contract's error shape."""
    assert r.status_code == status, r.text
    assert r.headers["Content-Type"] == "application/json"
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["message"]
    code: str = body["error"]["code"]
    return code


def test_healthz(sim: SimServer) -> None:
    r = get(sim, "/healthz")
    assert r.status_code == 200 and r.json() == {"ok": True}


def test_get_order(sim: SimServer) -> None:
    r = get(sim, "/orders/8472")
    assert r.status_code == 200
    assert r.json() == {
        "order_id": "8472",
        "customer": {
            "customer_id": "cus_5120",
            "name": "Priya Sharma",
            "email": "priya.sharma@example.com",
        },
        "total_minor": 200_000,
        "currency": "INR",
        "note": "",
        "payment_ids": ["pay_8472_a", "pay_8472_b"],
    }
    assert error(get(sim, "/orders/9999"), 404) == "order_not_found"


def test_list_payments(sim: SimServer) -> None:
    r = get(sim, "/payments", order_id="8472")
    assert r.status_code == 200
    payments = r.json()["payments"]
    assert [p["payment_id"] for p in payments] == ["pay_8472_a", "pay_8472_b"]
    assert set(payments[0]) >= {
        "payment_id",
        "order_id",
        "kind",
        "status",
        "amount_minor",
        "currency",
        "refunded_minor",
        "created_at",
    }
    assert all(p["kind"] == "capture" and p["status"] == "captured" for p in payments)
    assert all(p["amount_minor"] == 200_000 and p["refunded_minor"] == 0 for p in payments)
    assert get(sim, "/payments", order_id="nope").json() == {"payments": []}
    assert error(get(sim, "/payments"), 400) == "invalid_query"
    assert error(get(sim, "/payments", order_id="8472", extra="1"), 400) == "invalid_query"
    post_refund(sim)
    after = get(sim, "/payments", order_id="8472").json()["payments"]
    assert [p["refunded_minor"] for p in after] == [0, 200_000]


def test_create_refund_then_replay(sim: SimServer) -> None:
    r = post_refund(sim, {**BODY, "reason": "duplicate capture"}, Authorization="Bearer t1")
    assert r.status_code == 201
    created = r.json()
    assert created == {
        "refund_id": "rf_3301",
        "payment_id": "pay_8472_b",
        "order_id": "8472",
        "amount_minor": 200_000,
        "currency": "INR",
        "status": "processing",
        "reason": "duplicate capture",
        "idempotency_key": KEY,
        "created_at": "2026-03-14T10:00:00.000Z",
    }
    assert r.headers["Location"] == "/refunds/rf_3301"
    assert r.headers["Idempotent-Replayed"] == "false"
    again = post_refund(sim, {**BODY, "reason": "duplicate capture"})
    assert again.status_code == 200 and again.json() == created
    assert again.headers["Idempotent-Replayed"] == "true"
    assert error(post_refund(sim, {**BODY, "amount_minor": 1}), 422) == "idempotency_key_reused"
    assert len(sim.admin.refunds()) == 1


def test_idempotency_key_header_is_required_and_checked(sim: SimServer) -> None:
    assert error(post_refund(sim, key=None), 400) == "idempotency_key_required"
    assert error(post_refund(sim, key=""), 400) == "idempotency_key_required"
    assert error(post_refund(sim, key="has space"), 400) == "invalid_idempotency_key"
    assert error(post_refund(sim, key="k" * 256), 400) == "invalid_idempotency_key"
    assert sim.admin.refunds() == []


@pytest.mark.parametrize(
    "body",
    [
        {"amount_minor": 200_000, "currency": "INR"},
        {"payment_id": "pay_8472_b", "currency": "INR"},
        {"payment_id": "pay_8472_b", "amount_minor": 200_000},
        {**BODY, "destination_account": "X-99120044"},
        {**BODY, "amount_minor": "200000"},
        {**BODY, "amount_minor": 2000.0},
        {**BODY, "amount_minor": True},
        {**BODY, "amount_minor": 0},
        {**BODY, "amount_minor": -5},
        {**BODY, "currency": "inr"},
        {**BODY, "currency": "RUPEES"},
        {**BODY, "payment_id": 8472},
        {**BODY, "reason": 7},
        [BODY],
        "refund please",
    ],
)
def test_invalid_refund_bodies(sim: SimServer, body: Any) -> None:
    assert error(post_refund(sim, body), 400) == "invalid_body"
    assert sim.admin.refunds() == []


def test_malformed_and_empty_bodies(sim: SimServer) -> None:
    url = sim.base_url + "/refunds"
    headers = {"Idempotency-Key": KEY, "Content-Type": "application/json"}
    r = requests.post(url, data=b"{not json", headers=headers, timeout=5)
    assert error(r, 400) == "invalid_body"
    assert error(requests.post(url, headers=headers, timeout=5), 400) == "invalid_body"


def test_refund_refusals(sim: SimServer) -> None:
    assert error(post_refund(sim, {**BODY, "payment_id": "pay_x"}), 404) == "payment_not_found"
    assert error(post_refund(sim, {**BODY, "currency": "USD"}), 422) == "currency_mismatch"
    assert error(post_refund(sim, {**BODY, "amount_minor": 200_001}), 422) == "exceeds_refundable"
    assert post_refund(sim).status_code == 201
    second = post_refund(sim, key="another-key")
    assert error(second, 409) == "already_refunded"
    assert "rf_3301" in second.json()["error"]["message"]

    sim.admin.load(worlds.auth_hold_lookalike())
    hold = {**BODY, "payment_id": "pay_9101_b"}
    assert error(post_refund(sim, hold), 409) == "payment_not_captured"

    sim.admin.load(worlds.already_refunded())
    done = {**BODY, "payment_id": "pay_9102_b"}
    assert error(post_refund(sim, done, key="fresh"), 409) == "already_refunded"

    sim.admin.load(worlds.amount_above_captured())
    above = {**BODY, "payment_id": "pay_9103_b"}
    assert error(post_refund(sim, above), 422) == "exceeds_refundable"
    assert post_refund(sim, {**above, "amount_minor": 150_000}).status_code == 201


def test_refund_lookups(sim: SimServer) -> None:
    assert get(sim, "/refunds", idempotency_key=KEY).json() == {"refunds": []}
    created = post_refund(sim).json()
    assert get(sim, "/refunds", idempotency_key=KEY).json() == {"refunds": [created]}
    assert get(sim, "/refunds", payment_id="pay_8472_b").json() == {"refunds": [created]}
    assert get(sim, "/refunds", payment_id="pay_8472_a").json() == {"refunds": []}
    both = get(sim, "/refunds", payment_id="pay_8472_a", idempotency_key=KEY)
    assert both.json() == {"refunds": []}
    assert get(sim, "/refunds/rf_3301").json() == created
    assert error(get(sim, "/refunds/rf_9"), 404) == "refund_not_found"
    assert error(get(sim, "/refunds"), 400) == "invalid_query"
    assert error(get(sim, "/refunds", status="processing"), 400) == "invalid_query"
    twice = requests.get(sim.base_url + "/refunds?payment_id=a&payment_id=b", timeout=5)
    assert error(twice, 400) == "invalid_query"


def test_policies(sim: SimServer) -> None:
    latest = get(sim, "/policies/POL-REF-004").json()
    assert latest["doc_id"] == "POL-REF-004" and latest["version"] == 4
    assert set(latest) >= {"doc_id", "version", "title", "published_at", "chunks"}
    text = " ".join(c["text"] for c in latest["chunks"])
    for must in ("INR 1,000", "5 to 7 business days", "Never refund to a different account"):
        assert must in text
    assert all(set(c) == {"chunk_id", "text"} for c in latest["chunks"])
    v3 = get(sim, "/policies/POL-REF-004/versions/3").json()
    assert v3["version"] == 3 and "INR 5,000" in " ".join(c["text"] for c in v3["chunks"])
    assert error(get(sim, "/policies/POL-NONE"), 404) == "policy_not_found"
    assert error(get(sim, "/policies/POL-REF-004/versions/7"), 404) == "policy_version_not_found"
    assert error(get(sim, "/policies/POL-REF-004/versions/v4"), 404) == "policy_version_not_found"
    assert error(get(sim, "/policies/POL-NONE/versions/v4"), 404) == "policy_not_found"


def test_policy_search(sim: SimServer) -> None:
    r = get(sim, "/policies/search", q="refund approval INR 1,000")
    assert r.status_code == 200
    passages = r.json()["passages"]
    assert passages[0]["doc_id"] == "POL-REF-004" and passages[0]["chunk_id"] == "c0003"
    assert set(passages[0]) == {"doc_id", "version", "chunk_id", "text", "score"}
    assert all(p["version"] == 4 for p in passages if p["doc_id"] == "POL-REF-004")
    scores = [p["score"] for p in passages]
    assert scores == sorted(scores, reverse=True)
    again = get(sim, "/policies/search", q="refund approval INR 1,000").json()["passages"]
    assert again == passages
    comms = get(sim, "/policies/search", q="refund status", doc_id="POL-COM-002").json()
    assert {p["doc_id"] for p in comms["passages"]} == {"POL-COM-002"}
    assert len(get(sim, "/policies/search", q="refund", limit="2").json()["passages"]) == 2
    assert get(sim, "/policies/search", q="zebra").json() == {"passages": []}
    assert error(get(sim, "/policies/search"), 400) == "invalid_query"
    assert error(get(sim, "/policies/search", q="x", limit="0"), 400) == "invalid_query"
    assert error(get(sim, "/policies/search", q="x", limit="many"), 400) == "invalid_query"


def test_unknown_routes_and_methods(sim: SimServer) -> None:
    assert error(get(sim, "/nope"), 404) == "not_found"
    assert error(get(sim, "/orders/8472/items"), 404) == "not_found"
    r = requests.delete(sim.base_url + "/orders/8472", timeout=5)
    assert error(r, 405) == "method_not_allowed"
    assert r.headers["Allow"] == "GET"


def test_admin_world_reset_and_load(sim: SimServer) -> None:
    post_refund(sim)
    dumped = sim.admin.dump()
    assert [r["refund_id"] for r in dumped["refunds"]] == ["rf_3301"]
    assert dumped["next_refund_seq"] == 3302
    sim.admin.reset()
    assert error(get(sim, "/orders/8472"), 404) == "order_not_found"
    assert sim.admin.dump() == {
        "orders": [],
        "payments": [],
        "refunds": [],
        "policies": [],
        "next_refund_seq": 1,
    }
    r = requests.put(sim.base_url + "/admin/world", json=dumped, timeout=5)
    assert r.status_code == 200 and r.json()["refunds"] == 1
    assert sim.admin.dump() == dumped
    bad = {**dumped, "payments": [{"payment_id": "p"}]}
    r = requests.put(sim.base_url + "/admin/world", json=bad, timeout=5)
    assert error(r, 400) == "invalid_body"
    assert sim.admin.dump() == dumped  # a refused load changes nothing


def test_admin_faults_routes(sim: SimServer) -> None:
    armed = sim.admin.arm("refunds.create", "delay", delay_s=0.01, times=3)
    assert armed["fault_id"] and armed["remaining"] == 3 and armed["delay_s"] == 0.01
    assert [f["fault_id"] for f in sim.admin.faults()] == [armed["fault_id"]]
    assert sim.admin.clear_faults() == 1
    assert sim.admin.faults() == []
    r = requests.post(
        sim.base_url + "/admin/faults",
        json={"operation": "refunds.create", "fault": "meteor"},
        timeout=5,
    )
    assert error(r, 400) == "invalid_body"


def test_request_log_records_keys_and_credentials_without_the_secret(sim: SimServer) -> None:
    post_refund(sim, Authorization="Bearer secret-one")
    post_refund(sim, Authorization="Bearer secret-two")
    get(sim, "/orders/8472")
    # Status and outcome are filled in once a response is written, which can be just after
    # the caller read it: wait for the entries to complete.
    calls = sim.admin.requests("refunds.create", min_count=2)
    assert [(c["method"], c["path"], c["idempotency_key"], c["status"]) for c in calls] == [
        ("POST", "/refunds", KEY, 201),
        ("POST", "/refunds", KEY, 200),
    ]
    assert all(c["authorization"] and c["outcome"] == "responded" for c in calls)
    assert calls[0]["authorization_sha256"] != calls[1]["authorization_sha256"]
    assert calls[0]["body"] == BODY
    assert "secret" not in str(sim.admin.requests())
    (order,) = sim.admin.requests("orders.get")
    assert order["authorization"] is False and order["idempotency_key"] is None
    assert error(get(sim, "/orders/1"), 404) == "order_not_found"
    assert sim.admin.requests("orders.get", min_count=2)[-1]["error_code"] == "order_not_found"
    sim.admin.clear_requests()
    assert sim.admin.requests("refunds.create") == []


def test_request_log_long_poll_reports_when_unsatisfied(sim: SimServer) -> None:
    r = get(sim, "/admin/requests", operation="refunds.create", min_count="1", wait_s="0")
    assert r.json() == {"requests": [], "satisfied": False}
    with pytest.raises(TimeoutError):
        sim.admin.requests("refunds.create", min_count=1, wait_s=0)
    assert error(get(sim, "/admin/requests", min_count="x"), 400) == "invalid_query"


def test_reset_also_disarms_faults_and_clears_the_log(sim: SimServer) -> None:
    sim.admin.arm("orders.get", "error_before_commit")
    sim.admin.reset()
    assert sim.admin.faults() == []
    assert sim.admin.requests("admin.faults.arm") == []


def test_chunked_bodies_are_read(sim: SimServer) -> None:
    parts = iter([json.dumps(BODY)[:10].encode(), json.dumps(BODY)[10:].encode()])
    r = requests.post(
        sim.base_url + "/refunds", data=parts, headers={"Idempotency-Key": KEY}, timeout=5
    )
    assert r.status_code == 201 and r.json()["payment_id"] == "pay_8472_b"
    assert sim.admin.requests("refunds.create")[0]["body"] == BODY


def test_request_framing_errors_are_json_and_close_the_connection(sim: SimServer) -> None:
    host, port = sim.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"POST /refunds HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n\r\n")
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 413") and b"body_too_large" in reply
    assert b"Connection: close" in reply
    assert sim.admin.refunds() == []
