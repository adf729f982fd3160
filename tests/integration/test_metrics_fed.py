"""Issue 4 item 7: the agent-level metrics are fed by a real run, not just declared. One refund
of seed 004 through the orchestrator, the executor and the gateway moves the counters of policy
decisions, model calls, tokens, cost and tool calls — and "unauthorised actions executed" stays 0.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from prometheus_client import REGISTRY

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import Status
from agent_jobs.obs.metrics import PrometheusObserver
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.sim import worlds
from agent_jobs.sim.server import SimServer
from agent_jobs.testing import Harness
from agent_jobs.workflows.refund import WORKFLOW, RefundWorkflow, scripted_services


def _value(name: str, **labels: str) -> float:
    return float(REGISTRY.get_sample_value(name, labels) or 0.0)


def _agent_counters(route: str) -> dict[str, float]:
    return {
        "policy": _value("agent_jobs_policy_decisions_total", policy="POL-REF-004@4",
                         decision="needs_approval"),
        "calls": _value("agent_jobs_model_calls_total", route=route, outcome="ok"),
        "tokens": _value("agent_jobs_model_tokens_total", route=route, kind="input"),
        "refunds": _value("agent_jobs_tool_calls_total", tool="refunds.create", outcome="ok"),
        "unauthorised": _value("agent_jobs_unauthorised_actions_executed_total"),
        "created": _value("agent_jobs_tasks_created_total", workflow=WORKFLOW, via="python"),
    }  # fmt: skip


def test_a_refund_run_feeds_the_agent_metrics(sqlite_store: Any) -> None:
    observer = PrometheusObserver()
    route = "support-tier2@2026-03"
    before = _agent_counters(route)
    with SimServer(worlds.incident_8472()) as sim:
        services = dataclasses.replace(scripted_services(sim.base_url), observer=observer)
        registry = WorkflowRegistry()
        registry.register(RefundWorkflow(services))
        h = Harness(sqlite_store, registry, observer=observer)
        message = {"message": "Order 8472 was charged twice.", "channel": "chat"}
        request = TaskRequest(workflow=WORKFLOW, input=message)
        task = h.submit("acme", "req-8472", request, requester="svc-chat")
        parked = h.settle(task.id)
        assert parked.status is Status.APPROVAL_WAIT
        approval = sqlite_store.list_approvals("acme", status="pending", task_id=task.id)[0]
        h.orchestrator.decide_approval(approval.approval_id, "lead-41", grant=True)
        assert h.settle(task.id).status is Status.COMPLETED
    after = _agent_counters(route)
    assert after["policy"] >= before["policy"] + 2  # the decision, and its revalidation on resume
    assert after["calls"] >= before["calls"] + 4
    assert after["tokens"] > before["tokens"]
    assert after["refunds"] == before["refunds"] + 1
    assert after["created"] == before["created"] + 1
    assert after["unauthorised"] == before["unauthorised"]  # none in this run (others may count)
