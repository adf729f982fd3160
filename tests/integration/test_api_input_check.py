"""Issue 9: a workflow's input is validated at submit, not by a worker later. A refused input is a
422 `invalid_input` naming the field, creates nothing and does not consume the idempotency key:
the corrected payload under the same key succeeds. The same holds for the Celery-native intake,
where the refusal is recorded as a rejected submission."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_jobs.core.errors import InvalidInput
from agent_jobs.core.names import rejected_submission_id
from agent_jobs.workflows.noop import NoopWorkflow
from tests.integration.api_env import HarnessApi, auth, harness_api, live_runtime, token

pytestmark = pytest.mark.postgres


class CheckedNoop(NoopWorkflow):
    """The noop workflow with the optional `check_input` hook."""

    name = "checked"

    def check_input(self, input: dict[str, Any]) -> None:
        steps = input.get("steps")
        if isinstance(steps, bool) or not isinstance(steps, int) or not 0 <= steps <= 10:
            raise InvalidInput("input.steps must be an integer from 0 to 10", field="input.steps")


@pytest.fixture
def api(pg_store: Any, tmp_path: Path) -> HarnessApi:
    return harness_api(pg_store, tmp_path / "ledger.db", workflows=(CheckedNoop(),))


def post(api: HarnessApi, tok: str, key: str, body: Any) -> Any:
    return api.client.post("/v1/tasks", json=body, headers=auth(tok, **{"Idempotency-Key": key}))


def test_a_typo_is_422_with_the_field_and_the_corrected_payload_then_succeeds(
    api: HarnessApi,
) -> None:
    tok = token(api.cfg, "acme", "svc")
    typo = post(api, tok, "order-1", {"workflow": "checked@1", "input": {"stpes": 2}})
    assert typo.status_code == 422
    assert typo.json() == {
        "error": {
            "code": "invalid_input",
            "message": "input.steps must be an integer from 0 to 10",
            "field": "input.steps",
        }
    }
    assert api.store.list_tasks("acme") == []  # nothing created

    fixed = post(api, tok, "order-1", {"workflow": "checked@1", "input": {"steps": 2}})
    assert fixed.status_code == 202, fixed.text  # the key was not consumed
    api.harness.run_until_idle()
    task = api.store.get(fixed.json()["task_id"])
    assert task.status.value == "COMPLETED" and task.idempotency_key == "order-1"


def test_request_shape_errors_name_their_field(api: HarnessApi) -> None:
    tok = token(api.cfg, "acme", "svc")
    cases = [
        ({"workflow": "checked@1", "input": {"steps": "x\x00y"}}, "input.steps"),
        ({"workflow": "nope@1", "input": {}}, "workflow"),
        ({"workflow": "checked@1", "input": "no"}, "input"),
        ({"workflow": "checked@1", "input": {}, "tenant": "other"}, "tenant"),
    ]
    for body, field in cases:
        r = post(api, tok, "k", body)
        assert r.status_code == 422, (body, r.text)
        if field is not None:
            assert r.json()["error"]["field"] == field, (body, r.text)
    assert api.store.list_tasks("acme") == []


@pytest.mark.redis
def test_the_celery_intake_records_the_refusal_and_keeps_the_key(
    pg_database: str, pg_store: Any, redis_url: str, tenant: str
) -> None:
    from agent_jobs.api.submit_task import submit

    with live_runtime(pg_database) as runtime:
        runtime.workflows.register(CheckedNoop())
        tok = token(runtime.settings, tenant, "svc-orders")
        bad = {"workflow": "checked@1", "input": {"steps": "two"}}
        result = submit.apply(
            kwargs={"idempotency_key": "order-9", "request": bad, "token": tok}, task_id="m-bad"
        ).result
        assert result["rejected"] == "invalid_input" and "input.steps" in result["message"]
        [record] = runtime.store.rejected_submissions(record_id=rejected_submission_id("m-bad"))
        assert (record.reason_code, record.tenant_id, record.idempotency_key) == (
            "invalid_input",
            tenant,
            "order-9",
        )
        assert runtime.store.list_tasks(tenant) == []

        good = {"workflow": "checked@1", "input": {"steps": 1}}
        result = submit.apply(
            kwargs={"idempotency_key": "order-9", "request": good, "token": tok}, task_id="m-ok"
        ).result
        assert result["created"] is True
        assert runtime.store.get_by_key(tenant, "order-9").id == result["task_id"]
