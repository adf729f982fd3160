"""Invariant 7 at the API: the tenant is the token's; another tenant's task or approval is a 404 on
every endpoint (exactly like one that does not exist), and nothing of it changes or leaks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.api_env import HarnessApi, auth, harness_api, token

pytestmark = pytest.mark.postgres

BIG = {"account": "acc_9", "amount_minor": 150_000}  # above the example's approval threshold


@pytest.fixture
def api(pg_store: Any, tmp_path: Path) -> HarnessApi:
    return harness_api(pg_store, tmp_path / "ledger.db")


def _parked_task_of_b(api: HarnessApi) -> tuple[str, str]:
    """Tenant B's task waiting on an approval: (task id, approval id)."""
    b = token(api.cfg, "tenant-b", "svc-b")
    r = api.client.post(
        "/v1/tasks",
        json={"workflow": "example@1", "input": BIG},
        headers=auth(b, **{"Idempotency-Key": "b-1"}),
    )
    assert r.status_code == 202
    api.harness.run_until_idle()
    task = api.client.get(f"/v1/tasks/{r.json()['task_id']}", headers=auth(b)).json()
    assert task["display_status"] == "awaiting_approval"
    return task["task_id"], task["approval_id"]


def test_every_endpoint_answers_404_for_another_tenants_ids(api: HarnessApi) -> None:
    task_id, approval_id = _parked_task_of_b(api)
    a = token(api.cfg, "tenant-a", "mallory", roles=("approver",))
    calls = [
        ("GET", f"/v1/tasks/{task_id}"),
        ("GET", f"/v1/tasks/{task_id}/events"),
        ("POST", f"/v1/tasks/{task_id}/cancel"),
        ("POST", f"/v1/approvals/{approval_id}/grant"),
        ("POST", f"/v1/approvals/{approval_id}/deny"),
    ]
    for method, path in calls:
        r = api.client.request(method, path, headers=auth(a))
        assert r.status_code == 404, (method, path, r.text)
        assert r.json()["error"]["code"] == "not_found"
        # The same answer as for an id that does not exist at all: nothing to tell them apart.
        missing = path.replace(task_id, "tsk_missing").replace(approval_id, "apr_missing")
        other = api.client.request(method, missing, headers=auth(a))
        assert other.status_code == 404
        assert "tenant-b" not in r.text and "svc-b" not in r.text

    listed = api.client.get(f"/v1/approvals?task_id={task_id}", headers=auth(a))
    assert listed.status_code == 200 and listed.json() == {"approvals": []}
    assert api.client.get("/v1/approvals", headers=auth(a)).json() == {"approvals": []}

    # Nothing of B's changed: not cancelled, the approval still pending and undecided.
    b = token(api.cfg, "tenant-b", "svc-b")
    task = api.client.get(f"/v1/tasks/{task_id}", headers=auth(b)).json()
    assert task["status"] == "APPROVAL_WAIT" and task["cancel_requested"] is False
    approval = api.store.approval(approval_id)
    assert approval.status == "pending" and approval.approver is None


def test_idempotency_keys_are_per_tenant(api: HarnessApi) -> None:
    task_id, _ = _parked_task_of_b(api)
    a = token(api.cfg, "tenant-a", "svc-a")
    # Tenant A reuses B's key with another payload: its own new task, not B's, and no 422.
    r = api.client.post(
        "/v1/tasks",
        json={"workflow": "noop@1", "input": {"steps": 1}},
        headers=auth(a, **{"Idempotency-Key": "b-1"}),
    )
    assert r.status_code == 202
    assert r.json()["task_id"] != task_id
    assert api.store.get(r.json()["task_id"]).tenant_id == "tenant-a"


def test_the_body_cannot_name_a_tenant(api: HarnessApi) -> None:
    a = token(api.cfg, "tenant-a", "svc-a")
    r = api.client.post(
        "/v1/tasks",
        json={"workflow": "noop@1", "input": {}, "tenant_id": "tenant-b"},
        headers=auth(a, **{"Idempotency-Key": "t-1"}),
    )
    assert r.status_code == 422
    assert api.store.list_tasks("tenant-b") == []
    # A tenant named inside the input is just data: the task is still the token's tenant's.
    r = api.client.post(
        "/v1/tasks",
        json={"workflow": "noop@1", "input": {"tenant": "tenant-b"}},
        headers=auth(a, **{"Idempotency-Key": "t-2"}),
    )
    assert r.status_code == 202
    assert api.store.get(r.json()["task_id"]).tenant_id == "tenant-a"
    assert api.store.list_tasks("tenant-b") == []
