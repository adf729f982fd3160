"""A plan's group of approvals through the API and the CLI, and hostile arguments in a group
(on SQLite and Postgres): listed in the plan's order, decided in one decision by any of its ids,
never by the requester; what a person is shown is stored as the content rule says, and the
events name the actions by hash only."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, cast

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_jobs.api.app import create_app
from agent_jobs.cli import main
from agent_jobs.core.states import Status
from agent_jobs.core.text import clean_json
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.queue.runtime import set_runtime
from agent_jobs.testing import AgentHarness, FakeSystem, ScriptedModel, final_draft
from tests.integration.api_env import ShimRuntime, api_settings, auth, token
from tests.integration.test_agent_plan_approval import harness, sent
from tests.integration.test_agent_two_effects import helpdesk

S = Status


def api_over(h: AgentHarness) -> TestClient:
    cfg = api_settings()
    reg = WorkflowRegistry()
    reg.register(h.crashing)
    return TestClient(create_app(ShimRuntime(cfg, h.store, h.orchestrator, reg), cfg))


def test_the_api_lists_a_group_in_plan_order_and_decides_it_once(store: Any) -> None:
    h, devices, shop = harness(store)
    client, cfg = api_over(h), api_settings()
    task = h.submit_input({})
    assert h.settle(task.id).status is S.APPROVAL_WAIT
    alice = auth(token(cfg, "acme", "alice", roles=("approver",)))
    listed = client.get("/v1/approvals?status=pending", headers=alice).json()["approvals"]
    assert len(listed) == 2 and len({a["group_id"] for a in listed}) == 1
    head = listed[0]["group_id"]
    member = next(a["approval_id"] for a in listed if a["approval_id"] != head)
    group = client.get(f"/v1/approvals/{member}/group", headers=alice).json()["approvals"]
    assert [(a["approval_id"], a["tool"]) for a in group] == [
        (head, "devices.disable"), (member, "orders.create")]  # fmt: skip
    assert group[1]["args"] == {"device_id": "LT-7", "price_minor": 1500_00, "currency": "EUR"}
    # The requester, even with the approver role, decides none of it.
    own = auth(token(cfg, "acme", "tester", roles=("approver",)))
    r = client.post(f"/v1/approvals/{member}/grant", headers=own)
    assert r.status_code == 403 and r.json()["error"]["code"] == "self_approval"
    r = client.post(f"/v1/approvals/{member}/grant", json={"note": "plan ok"}, headers=alice)
    assert r.status_code == 200 and r.json()["status"] == "granted"
    after = client.get(f"/v1/approvals/{head}/group", headers=alice).json()["approvals"]
    assert [(a["status"], a["approver"]) for a in after] == [("granted", "alice")] * 2
    again = client.post(f"/v1/approvals/{head}/deny", headers=alice)
    assert again.status_code == 409  # decided once, as a whole
    assert h.settle(task.id).status is S.COMPLETED
    assert (devices.applied, shop.applied) == (1, 1)
    assert sent(store, task.id) == ["devices.disable", "orders.create"]
    other = auth(token(cfg, "globex", "bob", roles=("approver",)))
    assert client.get(f"/v1/approvals/{head}/group", headers=other).status_code == 404


@dataclass
class _CliRuntime:
    store: Any
    orchestrator: Any
    pid: int


@pytest.mark.parametrize("verb", ["approve", "deny"])
def test_the_cli_decides_the_group_by_task_id(
    store: Any, verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    h, devices, shop = harness(store)
    task = h.submit_input({})
    assert h.settle(task.id).status is S.APPROVAL_WAIT
    set_runtime(cast(Any, _CliRuntime(store, h.orchestrator, os.getpid())))
    try:
        assert main([verb, task.id, "--as", "tester", "--tenant", "acme"]) != 0
        assert "requester" in capsys.readouterr().err
        assert main([verb, task.id, "--as", "lead-41", "--tenant", "acme"]) == 0
    finally:
        set_runtime(None)
    lines = capsys.readouterr().out.splitlines()
    status = "granted" if verb == "approve" else "denied"
    assert len(lines) == 2 and f" {status} by lead-41 " in lines[0]
    assert lines[1].startswith("  with ") and f" {status} orders.create " in lines[1]
    done = h.settle(task.id)
    assert done.status is S.COMPLETED, done.outcome
    expected = (1, 1) if verb == "approve" else (0, 0)
    assert (devices.applied, shop.applied) == expected


HOSTILE = st.one_of(
    st.text(min_size=1, max_size=40),
    st.sampled_from(["\x00", "E\x00UR", "\u202eRUE", "\ufeff\u200b", "\U0001f4b6" * 50]),
    st.integers(200_000, 1_200_000).map(lambda n: "E" * n),
)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(currency=HOSTILE)
def test_hostile_arguments_in_a_group_are_stored_as_the_content_rule_says(
    store: Any, currency: str
) -> None:
    proposed = {"device_id": "LT-7", "price_minor": 1500_00, "currency": currency}

    def rules(request: Any) -> dict[str, Any]:
        if request.facts["notes"] or request.facts["effects"]:
            return final_draft("Nothing done.", {"type": "not_ordered", "device_id": "LT-7"})
        return {"kind": "tool_calls", "rationale": "", "calls": [
            {"tool": "devices.disable", "args": {"device_id": "LT-7"}},
            {"tool": "orders.create", "args": proposed}]}  # fmt: skip

    devices, shop = FakeSystem(), FakeSystem()
    agent = helpdesk(devices, shop)
    agent.approve_plan = True
    h = AgentHarness(store, agent, ScriptedModel(rules=rules))
    task = h.submit_input({}, key=f"req-{uuid.uuid4().hex}")
    parked = h.settle(task.id)
    assert (devices.applied, shop.applied) == (0, 0)  # nothing is sent before a person decides
    rows = store.list_approvals("acme", task_id=task.id)
    if parked.status is S.APPROVAL_WAIT:
        group = store.approval_group(rows[0].approval_id, "acme")
        assert [a.tool for a in group] == ["devices.disable", "orders.create"]
        assert group[1].args == clean_json(proposed)  # as a single approval's args are kept
        assert all(len(a.reason) <= 500 for a in group)
    else:  # refused before any person was asked (the model's answer was too large, say)
        assert rows == [] and parked.status is not S.EXECUTING
    # Events name the actions by tool and hash, never by their arguments.
    logged = json.dumps([e.data for e in store.events(task.id)], ensure_ascii=False)
    assert len(currency) < 8 or currency not in logged
