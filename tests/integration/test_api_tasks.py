"""The task and approval endpoints on real Postgres, with steps run inline by the harness:
display statuses, the redacted trace, cancel semantics, approvals, limits and probes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.core.states import Status
from tests.integration.api_env import HarnessApi, api_settings, auth, harness_api, token

pytestmark = pytest.mark.postgres

BIG = {"account": "acc_1", "amount_minor": 150_000}  # needs approval
SMALL = {"account": "acc_2", "amount_minor": 5_000}  # allowed by policy


@pytest.fixture
def api(pg_store: Any, tmp_path: Path) -> HarnessApi:
    return harness_api(pg_store, tmp_path / "ledger.db")


def submit(api: HarnessApi, tok: str, key: str, workflow: str, inp: dict[str, Any]) -> Any:
    return api.client.post(
        "/v1/tasks",
        json={"workflow": workflow, "input": inp},
        headers=auth(tok, **{"Idempotency-Key": key}),
    )


def test_submit_answers_202_with_location_and_trace(api: HarnessApi) -> None:
    tok = token(api.cfg, "acme", "svc")
    r = submit(api, tok, "req-8472", "noop@1", {"steps": 2})
    assert r.status_code == 202
    body = r.json()
    assert set(body) == {"task_id", "status", "trace_id"}
    assert body["status"] == "RECEIVED" and len(body["trace_id"]) == 32
    assert r.headers["Location"] == f"/v1/tasks/{body['task_id']}"
    row = api.store.get(body["task_id"])
    assert (row.tenant_id, row.requester, row.idempotency_key) == ("acme", "svc", "req-8472")
    api.harness.run_until_idle()
    task = api.client.get(r.headers["Location"], headers=auth(tok)).json()
    assert task["status"] == "COMPLETED" and task["display_status"] == "completed"
    assert task["outcome"] == {"steps": 2}


def test_idempotency_key_is_required_and_checked(api: HarnessApi) -> None:
    tok = token(api.cfg, "acme")
    r = api.client.post("/v1/tasks", json={"workflow": "noop@1"}, headers=auth(tok))
    assert r.status_code == 400 and r.json()["error"]["code"] == "missing_idempotency_key"
    r = submit(api, tok, "has space", "noop@1", {})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_idempotency_key"
    assert api.store.list_tasks("acme") == []


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"workflow": "nope@1"}, "unknown_workflow"),
        ({"workflow": "not a workflow"}, "invalid_input"),
        ({"workflow": "noop@1", "input": []}, "invalid_request"),
        ({"workflow": "noop@1", "input": {"a": nested(40)}}, "invalid_input"),
        ({"input": {}}, "invalid_request"),
    ],
)
def test_invalid_requests_are_422_and_create_nothing(
    api: HarnessApi, body: dict[str, Any], code: str
) -> None:
    r = api.client.post(
        "/v1/tasks", json=body, headers=auth(token(api.cfg, "acme"), **{"Idempotency-Key": "k"})
    )
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == code
    assert api.store.list_tasks("acme") == []


def test_what_storage_cannot_hold_is_cleaned_by_the_content_rule(api: HarnessApi) -> None:
    # JSON can spell a NUL, a lone surrogate and (Python's parser) NaN; Postgres holds none of
    # them. The content rule keeps the rest as given: U+FFFD for the characters, null for NaN.
    r = api.client.post(
        "/v1/tasks",
        content=b'{"workflow": "noop@1", "input": {"x": NaN, "s": "a\\u0000b\\ud800", '
        b'"b": "\xe2\x80\xae"}}',
        headers=auth(
            token(api.cfg, "acme"), **{"Idempotency-Key": "k", "Content-Type": "application/json"}
        ),
    )
    assert r.status_code == 202, r.text
    stored = api.store.get(r.json()["task_id"]).input
    assert stored == {"x": None, "s": "a\ufffdb\ufffd", "b": "\u202e"}


def test_awaiting_approval_and_the_pending_action_without_arguments(api: HarnessApi) -> None:
    tok = token(api.cfg, "acme", "svc")
    task_id = submit(api, tok, "k1", "example@1", BIG).json()["task_id"]
    api.harness.run_until_idle()
    task = api.client.get(f"/v1/tasks/{task_id}", headers=auth(tok)).json()
    assert task["status"] == "APPROVAL_WAIT" and task["display_status"] == "awaiting_approval"
    assert task["approval_id"].startswith("apr_")
    pending = task["pending_action"]
    assert set(pending) == {"tool", "tool_version", "action_hash", "idempotency_key"}
    assert pending["action_hash"].startswith("sha256:")
    assert "acc_1" not in str(task)  # the arguments are the approver's business only


def test_events_are_the_redacted_trace(api: HarnessApi) -> None:
    tok = token(api.cfg, "acme", "svc")
    task_id = submit(api, tok, "k1", "example@1", BIG).json()["task_id"]
    api.harness.run_until_idle()
    # A workflow event carrying raw arguments and personal data, as a careless emitter might.
    api.store.append_event(
        task_id,
        "execute_tool ledger.transfer",
        {
            "args": {"account": "acc_1", "amount_minor": 150_000},
            "email": "asha@example.com",
            "note": "mail asha@example.com about acc_1",
        },
    )
    r = api.client.get(f"/v1/tasks/{task_id}/events", headers=auth(tok))
    assert r.status_code == 200
    events = r.json()["events"]
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)
    assert events[0]["type"] == "created" and events[0]["to_status"] == "RECEIVED"
    last = events[-1]["data"]
    assert last["args"]["redacted"] is True and last["args"]["hash"].startswith("sha256:")
    assert last["email"] == "[REDACTED:pii]"
    assert "asha@example.com" not in r.text and "150000" not in r.text
    later = api.client.get(
        f"/v1/tasks/{task_id}/events?after_seq={events[-2]['seq']}", headers=auth(tok)
    )
    assert [e["seq"] for e in later.json()["events"]] == [events[-1]["seq"]]


def test_cancel_of_a_received_task_is_honoured_at_the_next_step(api: HarnessApi) -> None:
    tok = token(api.cfg, "acme")
    task_id = submit(api, tok, "k1", "noop@1", {"steps": 5}).json()["task_id"]
    r = api.client.post(f"/v1/tasks/{task_id}/cancel", headers=auth(tok))
    assert r.status_code == 202
    assert r.json() == {
        "task_id": task_id,
        "status": "RECEIVED",
        "display_status": "cancel_requested",
        "cancel_requested": True,
    }
    api.harness.run_until_idle()
    task = api.client.get(f"/v1/tasks/{task_id}", headers=auth(tok)).json()
    assert task["status"] == "CANCELLED" and task["display_status"] == "cancelled"
    again = api.client.post(f"/v1/tasks/{task_id}/cancel", headers=auth(tok))
    assert again.status_code == 409 and again.json()["error"]["code"] == "task_finished"


def test_cancel_wakes_a_task_parked_on_an_approval(api: HarnessApi) -> None:
    tok = token(api.cfg, "acme")
    task_id = submit(api, tok, "k1", "example@1", BIG).json()["task_id"]
    api.harness.run_until_idle()
    r = api.client.post(f"/v1/tasks/{task_id}/cancel", headers=auth(tok))
    assert r.status_code == 202 and r.json()["display_status"] == "cancel_requested"
    api.harness.run_until_idle()
    assert api.store.get(task_id).status is Status.CANCELLED
    assert api.backend.lookup("payout:acme:k1") is None  # nothing was paid


def test_cancel_while_the_effect_is_unknown_cannot_recall_it(api: HarnessApi) -> None:
    tok = token(api.cfg, "acme")
    api.backend.arm("transfer", "drop_after_commit")  # committed, then the answer is lost
    task_id = submit(api, tok, "k1", "example@1", SMALL).json()["task_id"]
    # One message at a time, stopping where the outcome of the transfer is unknown.
    while api.store.get(task_id).status is not Status.EXEC_UNKNOWN:
        assert api.harness.publisher.queue, "the task never reached EXEC_UNKNOWN"
        api.harness.run_one()
    r = api.client.post(f"/v1/tasks/{task_id}/cancel", headers=auth(tok))
    assert r.status_code == 202
    assert r.json()["status"] == "EXEC_UNKNOWN"
    assert r.json()["display_status"] == "cancel_requested"  # not "cancelled": it may have run
    final = api.harness.settle(task_id)
    # Reconciliation found the transfer: the effect stands, the task completes (not CANCELLED)
    # and its outcome says the cancel came too late.
    task = api.client.get(f"/v1/tasks/{task_id}", headers=auth(tok)).json()
    assert final.status is Status.COMPLETED and task["status"] == "COMPLETED"
    assert task["outcome"]["cancel_requested_too_late"] is True
    assert api.backend.lookup("payout:acme:k1") is not None


@pytest.fixture
def parked(api: HarnessApi) -> Iterator[tuple[HarnessApi, str, str]]:
    tok = token(api.cfg, "acme", "svc")
    task_id = submit(api, tok, "k1", "example@1", BIG).json()["task_id"]
    api.harness.run_until_idle()
    yield api, task_id, api.store.get(task_id).view().approval_id or ""


def test_approver_grants_and_the_task_completes(parked: tuple[HarnessApi, str, str]) -> None:
    api, task_id, approval_id = parked
    alice = token(api.cfg, "acme", "alice", roles=("approver",))
    listed = api.client.get("/v1/approvals?status=pending", headers=auth(alice)).json()
    assert [a["approval_id"] for a in listed["approvals"]] == [approval_id]
    shown = listed["approvals"][0]
    assert shown["args"] == {"account": "acc_1", "amount_minor": 150_000, "currency": "EUR"}
    assert shown["requester"] == "svc" and "tenant_id" not in shown
    r = api.client.post(
        f"/v1/approvals/{approval_id}/grant", json={"note": "checked"}, headers=auth(alice)
    )
    assert r.status_code == 200
    assert r.json()["status"] == "granted" and r.json()["approver"] == "alice"
    api.harness.run_until_idle()
    assert api.store.get(task_id).status is Status.COMPLETED
    again = api.client.post(f"/v1/approvals/{approval_id}/deny", headers=auth(alice))
    assert again.status_code == 409 and again.json()["error"]["code"] == "approval_refused"


def test_deny_ends_the_example_task(parked: tuple[HarnessApi, str, str]) -> None:
    api, task_id, approval_id = parked
    bob = token(api.cfg, "acme", "bob", roles=("approver",))
    r = api.client.post(f"/v1/approvals/{approval_id}/deny", headers=auth(bob))
    assert r.status_code == 200 and r.json()["status"] == "denied"
    api.harness.run_until_idle()
    assert api.store.get(task_id).status is Status.FAILED
    assert api.backend.lookup("payout:acme:k1") is None


def test_approvals_need_the_role_and_never_the_requester(
    parked: tuple[HarnessApi, str, str],
) -> None:
    api, _, approval_id = parked
    plain = token(api.cfg, "acme", "carol")
    assert api.client.get("/v1/approvals", headers=auth(plain)).status_code == 403
    r = api.client.post(f"/v1/approvals/{approval_id}/grant", headers=auth(plain))
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    # The requester holding the approver role still cannot approve its own task's action.
    requester = token(api.cfg, "acme", "svc", roles=("approver",))
    r = api.client.post(f"/v1/approvals/{approval_id}/grant", headers=auth(requester))
    assert r.status_code == 403 and r.json()["error"]["code"] == "self_approval"
    assert api.store.approval(approval_id).status == "pending"
    long_note = api.client.post(
        f"/v1/approvals/{approval_id}/grant",
        json={"note": "x" * 201},
        headers=auth(token(api.cfg, "acme", "dave", roles=("approver",))),
    )
    assert long_note.status_code == 422
    assert api.store.approval(approval_id).status == "pending"


def test_body_limit_applies_to_declared_and_streamed_bodies(pg_store: Any, tmp_path: Path) -> None:
    api = harness_api(pg_store, tmp_path / "ledger.db", api_settings(api_max_body_bytes=2048))
    headers = auth(token(api.cfg, "acme"), **{"Idempotency-Key": "big"})
    big = {"workflow": "noop@1", "input": {"pad": "x" * 4096}}
    r = api.client.post("/v1/tasks", json=big, headers=headers)
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit counts the stream
        yield b'{"workflow": "noop@1", "input": {"pad": "'
        for _ in range(8):
            yield b"y" * 512
        yield b'"}}'

    r = api.client.post(
        "/v1/tasks", content=chunks(), headers={**headers, "Content-Type": "application/json"}
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"
    assert api.store.list_tasks("acme") == []


def test_health_and_readiness(api: HarnessApi, pg_store: Any, tmp_path: Path) -> None:
    assert api.client.get("/healthz").json() == {"status": "ok"}
    ready = api.client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {
        "status": "ready",
        "checks": {"database": "ok", "broker": "ok", "schema": "ok"},
    }
    down = harness_api(
        pg_store,
        tmp_path / "ledger2.db",
        api_settings(broker_url="redis://127.0.0.1:1/0"),  # nothing listens on port 1
    )
    r = down.client.get("/readyz")
    assert r.status_code == 503
    assert r.json() == {
        "status": "unavailable",
        "checks": {"database": "ok", "broker": "unavailable", "schema": "ok"},
        "reason": "broker unreachable",
    }


def test_an_api_over_a_database_not_at_head_is_not_ready(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from agent_jobs.store import Store
    from agent_jobs.store.migrate import head_revisions, upgrade

    store = Store.from_url(f"sqlite:///{tmp_path / 'old.db'}")
    try:
        (head,) = head_revisions()
        upgrade(store.engine, f"{head}-1")  # one revision behind, as after a deploy without it
        with caplog.at_level("ERROR", logger="agent_jobs.api.app"):
            api = harness_api(store, tmp_path / "ledger.db")
        started = [r.getMessage() for r in caplog.records if "not ready" in r.getMessage()]
        assert len(started) == 1 and "agent-jobs db upgrade" in started[0]
        r = api.client.get("/readyz")
        assert r.status_code == 503
        body = r.json()
        assert body["checks"] == {"database": "ok", "broker": "ok", "schema": "not_at_head"}
        assert "\n" not in body["reason"] and f"not at head {head}" in body["reason"]
        upgrade(store.engine)  # the migration lands: ready, without a restart
        assert api.client.get("/readyz").status_code == 200
    finally:
        store.dispose()


def test_an_unreachable_database_is_503_not_500(tmp_path: Path) -> None:
    from agent_jobs.store import Store

    down = Store.from_url("postgresql://postgres@127.0.0.1:1/nothing")  # nothing listens there
    api = harness_api(down, tmp_path / "ledger.db")
    tok = token(api.cfg, "acme")
    for method, path, extra in [
        ("GET", "/v1/tasks/tsk_1", {}),
        ("POST", "/v1/tasks", {"json": {"workflow": "noop@1"}}),
    ]:
        r = api.client.request(method, path, headers=auth(tok, **{"Idempotency-Key": "k"}), **extra)
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "unavailable"
    ready = api.client.get("/readyz")
    assert ready.status_code == 503 and ready.json()["checks"]["database"] == "unavailable"
    down.dispose()
