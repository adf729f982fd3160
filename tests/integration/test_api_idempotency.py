"""`Idempotency-Key` conformance: the same payload names the same task, another payload is a 422
that creates nothing, and 20 concurrent requests with one key create exactly one task."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.api_env import HarnessApi, auth, harness_api, serve, token

pytestmark = pytest.mark.postgres

BODY = {"workflow": "noop@1", "input": {"steps": 3}}


@pytest.fixture
def api(pg_store: Any, tmp_path: Path) -> HarnessApi:
    return harness_api(pg_store, tmp_path / "ledger.db")


def test_same_key_same_payload_returns_the_existing_task(api: HarnessApi) -> None:
    headers = auth(token(api.cfg, "acme"), **{"Idempotency-Key": "req-1"})
    first = api.client.post("/v1/tasks", json=BODY, headers=headers)
    assert first.status_code == 202 and "Idempotent-Replayed" not in first.headers
    api.harness.run_until_idle()  # the task moves on; a replay reports where it is now
    again = api.client.post("/v1/tasks", json=BODY, headers=headers)
    assert again.status_code == 202
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["task_id"] == first.json()["task_id"]
    assert again.headers["Location"] == first.headers["Location"]
    assert again.json()["status"] == "COMPLETED"
    assert len(api.store.list_tasks("acme")) == 1


def test_key_order_and_whitespace_do_not_make_a_different_payload(api: HarnessApi) -> None:
    headers = auth(
        token(api.cfg, "acme"), **{"Idempotency-Key": "req-2", "Content-Type": "application/json"}
    )
    a = api.client.post(
        "/v1/tasks", content=b'{"workflow":"noop@1","input":{"a":1,"b":2}}', headers=headers
    )
    b = api.client.post(
        "/v1/tasks", content=b'{ "input": {"b": 2, "a": 1}, "workflow": "noop@1" }', headers=headers
    )
    assert a.status_code == b.status_code == 202
    assert a.json()["task_id"] == b.json()["task_id"]


def test_same_key_different_payload_is_422_and_creates_nothing(api: HarnessApi) -> None:
    headers = auth(token(api.cfg, "acme"), **{"Idempotency-Key": "req-3"})
    first = api.client.post("/v1/tasks", json=BODY, headers=headers)
    other = api.client.post(
        "/v1/tasks", json={"workflow": "noop@1", "input": {"steps": 4}}, headers=headers
    )
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    tasks = api.store.list_tasks("acme")
    assert [t.id for t in tasks] == [first.json()["task_id"]]
    assert tasks[0].input == {"steps": 3}  # the first payload, untouched


def test_twenty_concurrent_requests_with_one_key_create_one_task(api: HarnessApi) -> None:
    tok = token(api.cfg, "acme")
    n = 20
    barrier = threading.Barrier(n)
    results: list[tuple[int, str]] = []
    lock = threading.Lock()

    with serve(api.app) as base:

        def post() -> None:
            session = requests.Session()
            barrier.wait()
            r = session.post(
                f"{base}/v1/tasks",
                json=BODY,
                headers=auth(tok, **{"Idempotency-Key": "burst"}),
                timeout=30,
            )
            with lock:
                results.append((r.status_code, r.json().get("task_id", r.text)))

        threads = [threading.Thread(target=post) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)

    assert len(results) == n
    assert {status for status, _ in results} == {202}
    assert len({task_id for _, task_id in results}) == 1
    tasks = api.store.list_tasks("acme")
    assert len(tasks) == 1 and tasks[0].id == results[0][1]
    created = [e for e in api.store.events(tasks[0].id) if e.type == "created"]
    assert len(created) == 1
