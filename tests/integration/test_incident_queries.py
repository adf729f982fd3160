"""Incident queries: every task that used a tool (and version), prompt, model route, workflow or
policy version in a window, with the effects it executed — the refund agent against the real
simulator (Harness: the real orchestrator and executor), on SQLite and Postgres; and the same
query, a dead-letter replay and the switch history through the API for a token with the
`operator` role."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import Status
from agent_jobs.gateway import ScriptedProvider
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.sim import worlds
from agent_jobs.sim.server import SimServer
from agent_jobs.store import Store
from agent_jobs.store.ops import IncidentFilter
from agent_jobs.testing import Harness
from agent_jobs.workflows.refund import (
    WORKFLOW,
    Behaviour,
    RefundRules,
    RefundWorkflow,
    scripted_services,
)
from tests.contract.test_dead_letter_replay import dead_lettered
from tests.integration.api_env import auth, harness_api, token


@pytest.fixture
def sim() -> Iterator[SimServer]:
    with SimServer(worlds.empty()) as server:
        yield server


def refunded(store: Store, sim: SimServer) -> tuple[str, str]:
    """One refund task approved and completed (a write), one that only read: their ids."""
    sim.admin.load(worlds.incident_8472())
    services = scripted_services(sim.base_url, provider=ScriptedProvider(RefundRules(Behaviour())))
    registry = WorkflowRegistry()
    registry.register(RefundWorkflow(services))
    harness = Harness(store, registry)
    message = "Order 8472 was charged twice, and my refund has not arrived."
    request = TaskRequest(workflow=WORKFLOW, input={"message": message, "channel": "chat"})
    task = harness.submit("acme", "req-8472", request, requester="svc-chat")
    assert harness.settle(task.id).status is Status.APPROVAL_WAIT
    waiting = harness.submit("acme", "req-8472-b", request, requester="svc-chat")
    harness.settle(waiting.id)
    [approval] = store.list_approvals("acme", status="pending", task_id=task.id)
    harness.orchestrator.decide_approval(approval.approval_id, "lead-41", grant=True)
    assert harness.settle(task.id).status is Status.COMPLETED
    return task.id, waiting.id


def window(store: Store, **kw: Any) -> IncidentFilter:
    now = store.db_now()
    return IncidentFilter(since=now - timedelta(hours=1), until=now + timedelta(seconds=5), **kw)


def test_tasks_that_used_a_tool_with_the_effects_they_executed(
    store: Store, sim: SimServer
) -> None:
    wrote, read = refunded(store, sim)
    found = {t.task_id: t for t in store.incident_tasks(window(store, tool="refunds.create"))}
    assert set(found) == {wrote}  # the other task never called it
    [effect] = found[wrote].effects
    assert (effect.tool, effect.status) == ("refunds.create", "committed")
    versioned = store.incident_tasks(window(store, tool="refunds.create", tool_version="2"))
    assert [t.task_id for t in versioned] == [wrote]
    assert store.incident_tasks(window(store, tool="refunds.create", tool_version="1")) == []
    readers = {t.task_id for t in store.incident_tasks(window(store, tool="orders.get"))}
    assert readers == {wrote, read}


def test_tasks_by_prompt_route_workflow_and_policy_version(store: Store, sim: SimServer) -> None:
    wrote, read = refunded(store, sim)
    both = {wrote, read}

    def ids(**kw: Any) -> set[str]:
        return {t.task_id for t in store.incident_tasks(window(store, **kw))}

    assert ids(prompt="refund-v7") == both and ids(prompt="refund-v6") == set()
    assert ids(model_route="support-tier2@2026-03") == both
    assert ids(workflow=WORKFLOW) == both and ids(workflow=WORKFLOW.split("@")[0]) == both
    assert ids(workflow="example") == set()
    assert wrote in ids(policy_version="POL-REF-004@4")
    assert ids(policy_version="POL-REF-004@3") == set()
    assert ids(tenant_id="globex") == set()
    later = store.db_now() + timedelta(minutes=5)
    after = IncidentFilter(since=later, until=later + timedelta(hours=1), tool="refunds.create")
    assert store.incident_tasks(after) == []


def test_the_api_answers_operators_of_the_tenant_only(
    sqlite_store: Store, sim: SimServer, tmp_path: Path
) -> None:
    wrote, _ = refunded(sqlite_store, sim)
    api = harness_api(sqlite_store, tmp_path / "ledger.db")
    now = sqlite_store.db_now()
    params = {
        "since": (now - timedelta(hours=1)).isoformat(),
        "until": (now + timedelta(minutes=1)).isoformat(),
        "tool": "refunds.create",
    }
    op = auth(token(api.cfg, "acme", sub="oncall", roles=("operator",)))
    res = api.client.get("/v1/ops/incidents/tasks", params=params, headers=op)
    assert res.status_code == 200, res.text
    [task] = res.json()["tasks"]
    assert task["task_id"] == wrote and task["effects"][0]["status"] == "committed"
    plain = auth(token(api.cfg, "acme", sub="svc"))
    assert (
        api.client.get("/v1/ops/incidents/tasks", params=params, headers=plain).status_code == 403
    )
    other = auth(token(api.cfg, "globex", sub="oncall", roles=("operator",)))
    res = api.client.get("/v1/ops/incidents/tasks", params=params, headers=other)
    assert res.json()["tasks"] == []

    res = api.client.put("/v1/ops/switches/effects_stopped", json={"reason": "INC"}, headers=op)
    assert res.status_code == 200 and res.json()["actor"] == "oncall"
    assert res.json()["tenant_id"] == "acme"
    res = api.client.get("/v1/ops/switches", headers=other)
    assert res.json()["switches"] == []  # another tenant's lever is not theirs to see

    dead = dead_lettered(sqlite_store, "acme")
    body = {"reason": "provider fixed"}
    res = api.client.post(f"/v1/ops/dead-letters/{dead}/replay", json=body, headers=other)
    assert res.status_code == 404
    res = api.client.post(f"/v1/ops/dead-letters/{dead}/replay", json=body, headers=op)
    assert res.json()["replayed"] is True and res.json()["resumed_as"] == "RUNNING"
    res = api.client.post(f"/v1/ops/dead-letters/{dead}/replay", json=body, headers=op)
    assert res.json() == {"task_id": dead, "replayed": False, "reason": "already replayed",
                          "resumed_as": None}  # fmt: skip


def test_the_switch_history_is_the_tenants_and_the_platforms_newest_first(
    sqlite_store: Store, tmp_path: Path
) -> None:
    api = harness_api(sqlite_store, tmp_path / "ledger.db")
    op = auth(token(api.cfg, "acme", sub="oncall", roles=("operator",)))
    other = auth(token(api.cfg, "globex", sub="oncall-g", roles=("operator",)))
    sqlite_store.set_switch("read_only", "", "", True, actor="platform", reason="all tenants")
    body = {"target": "refunds.create", "reason": "INC-1 refunds misfiring"}
    assert api.client.put("/v1/ops/switches/tool_disabled", json=body, headers=op).is_success
    res = api.client.put(
        "/v1/ops/switches/effects_stopped", json={"reason": "theirs"}, headers=other
    )
    assert res.status_code == 200
    clear = {"target": "refunds.create", "reason": "INC-1 fixed"}
    res = api.client.post("/v1/ops/switches/tool_disabled/clear", json=clear, headers=op)
    assert res.status_code == 200

    res = api.client.get("/v1/ops/switches/history", headers=op)
    assert res.status_code == 200, res.text
    changes = res.json()["changes"]
    assert [(c["kind"], c["tenant_id"], c["value"], c["actor"], c["reason"]) for c in changes] == [
        ("tool_disabled", "acme", None, "oncall", "INC-1 fixed"),  # turned off: no value
        ("tool_disabled", "acme", True, "oncall", "INC-1 refunds misfiring"),
        ("read_only", "", True, "platform", "all tenants"),
    ]  # newest first; globex's change is not acme's to see
    assert changes[0]["target"] == "refunds.create" and changes[0]["at"]
    [latest] = api.client.get("/v1/ops/switches/history?limit=1", headers=op).json()["changes"]
    assert latest["reason"] == "INC-1 fixed"
    theirs = api.client.get("/v1/ops/switches/history", headers=other).json()["changes"]
    assert {c["tenant_id"] for c in theirs} == {"", "globex"}
    for bad in ("0", "501"):
        res = api.client.get(f"/v1/ops/switches/history?limit={bad}", headers=op)
        assert res.status_code == 422
    plain = auth(token(api.cfg, "acme", sub="svc"))
    assert api.client.get("/v1/ops/switches/history", headers=plain).status_code == 403
