"""A dead letter's reason through the API, on both backends: a step that keeps raising with an
exception quoting a secret and an address ends FAILED; the tenant's requester reads the task and
its events with both masked, the operator's queue view keeps the reason as it was recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent_jobs.core.states import Status
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.workflows.noop import NoopWorkflow
from tests.integration.api_env import auth, harness_api, token

SECRET = "sk-live-7f3e9a2b"
EMAIL = "asha.k@example.com"


class LeakyWorkflow(NoopWorkflow):
    """Every step raises, quoting what a careless provider client would."""

    name = "leaky"

    def decide(self, inp: wf.StepInput) -> wf.StepDecision:
        raise RuntimeError(f"POST /charge failed: api_key ok, token={SECRET} for {EMAIL}")


def test_a_dead_letters_reason_is_redacted_for_the_tenant_and_kept_for_operators(
    store: Any, tmp_path: Path
) -> None:
    api = harness_api(store, tmp_path / "ledger.db", workflows=(LeakyWorkflow(),))
    requester = auth(token(api.cfg, "acme", "svc-chat"))
    created = api.client.post(
        "/v1/tasks",
        json={"workflow": "leaky@1", "input": {"steps": 1}},
        headers={**requester, "Idempotency-Key": "leaky-1"},
    )
    assert created.status_code == 202, created.text
    task_id = created.json()["task_id"]
    assert api.harness.settle(task_id).status is Status.FAILED

    task = api.client.get(f"/v1/tasks/{task_id}", headers=requester).json()
    assert task["outcome"]["dead_letter"] is True
    assert "RuntimeError: POST /charge failed" in task["outcome"]["reason"]
    events = api.client.get(f"/v1/tasks/{task_id}/events", headers=requester).text
    timeline = api.client.get(f"/v1/console/tasks/{task_id}/timeline", headers=requester).json()
    for shown in (str(task), events, str(timeline)):
        assert SECRET not in shown and EMAIL not in shown
    assert "token=[REDACTED]" in task["outcome"]["reason"]

    operator = auth(token(api.cfg, "acme", "oncall-7", roles=("operator",)))
    [dead] = api.client.get("/v1/console/queues", headers=operator).json()["dead_letters"]
    assert dead["task_id"] == task_id and SECRET in dead["reason"]
