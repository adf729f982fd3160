"""Throttling over HTTP, end to end from the sim's faults to the refund workflow's hooks:
a 429 (or a 503 with `Retry-After`) on `POST /refunds` applied nothing and becomes the
orchestrator's `Throttled`, not `Unknown`; the same key later makes the refund; a throttled
reconcile lookup is a failed lookup, not "not found"; a read throttled briefly is waited out."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from agent_jobs.core.contracts import Action
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.sim import worlds
from agent_jobs.sim.server import SimServer
from agent_jobs.workflows.refund import RefundWorkflow, scripted_services
from agent_jobs.workflows.refund import state as st
from agent_jobs.workflows.refund.toolcalls import run_reads
from tests.unit.test_refund_workflow import step_input

ARGS = {"payment_id": "pay_8472_b", "amount_minor": 200_000, "currency": "INR"}
ACTION = Action(
    tool="refunds.create", tool_version="2", args=ARGS, idempotency_key="refund:req-8472:pay_8472_b"
)


@pytest.fixture
def sim() -> Iterator[SimServer]:
    with SimServer(worlds.incident_8472()) as s:
        yield s


def approved_state() -> dict[str, Any]:
    state = st.initial_state("Order 8472 was charged twice", "chat", None, "req-8472")
    action = ACTION.model_dump(mode="json")
    state["proposal"] = {"action": action, "action_hash": ACTION.action_hash}
    state["runtime"] = {"approval_id": "apr_5521"}
    return state


def test_a_throttled_refund_is_throttled_not_unknown_and_the_same_key_succeeds_later(
    sim: SimServer,
) -> None:
    workflow = RefundWorkflow(scripted_services(sim.base_url))
    sim.admin.arm("refunds.create", "throttle", retry_after="2")
    out = workflow.execute(step_input(approved_state()), ACTION)
    assert isinstance(out, wf.EffectThrottled) and out.retry_after_s == 2.0
    assert out.reason.startswith("rate_limited")
    assert sim.admin.refunds() == []  # nothing was applied
    # Status and fault are filled in once the response is written, which can be just after the
    # caller read it: wait for the entry to complete.
    [entry] = sim.admin.requests("refunds.create", min_count=1)
    assert (entry["status"], entry["fault"]) == (429, "throttle")

    again = workflow.execute(step_input(approved_state()), ACTION)
    assert isinstance(again, wf.EffectApplied) and again.result["refund"]["refund_id"] == "rf_3301"
    keys = [e["idempotency_key"] for e in sim.admin.requests("refunds.create")]
    assert keys == [ACTION.idempotency_key] * 2


def test_a_503_is_a_throttle_only_when_it_says_when(sim: SimServer) -> None:
    workflow = RefundWorkflow(scripted_services(sim.base_url))
    sim.admin.arm("refunds.create", "error_before_commit", retry_after="garbage, not a delay")
    out = workflow.execute(step_input(approved_state()), ACTION)
    assert isinstance(out, wf.EffectThrottled) and out.retry_after_s is None  # no usable hint
    sim.admin.arm("refunds.create", "error_before_commit")
    assert isinstance(workflow.execute(step_input(approved_state()), ACTION), wf.EffectUnknown)


def test_a_throttled_reconcile_lookup_is_a_failed_lookup_not_not_found(sim: SimServer) -> None:
    workflow = RefundWorkflow(scripted_services(sim.base_url))
    # Longer than the read's timeout: not waited out in the worker, reported at once.
    sim.admin.arm("refunds.get_by_key", "throttle", retry_after="120")
    found = workflow.reconcile(step_input(approved_state()), ACTION)
    assert found == wf.LookupFailed("rate_limited")
    assert len(sim.admin.requests("refunds.get_by_key")) == 1
    assert workflow.reconcile(step_input(approved_state()), ACTION) == wf.NoEffect()


def test_a_read_throttled_briefly_is_waited_out(sim: SimServer) -> None:
    services = scripted_services(sim.base_url)
    sim.admin.arm("orders.get", "throttle", retry_after="0.2")
    [result] = run_reads(
        services,
        step_input(approved_state()),
        [{"tool": "orders.get", "args": {"order_id": "8472"}}],
        "investigate",
        "req-8472",
    )
    assert result.outcome.kind == "ok"
    done = sim.admin.requests("orders.get", min_count=2)  # both completed (see above)
    assert [e["status"] for e in done] == [429, 200]


def test_retry_after_is_refused_on_faults_that_cannot_carry_it(sim: SimServer) -> None:
    for fault in ("error_after_commit", "drop_after_commit"):
        with pytest.raises(requests.HTTPError):
            sim.admin.arm("refunds.create", fault, retry_after="1")
    armed = sim.admin.arm("orders.get", "throttle", retry_after="Sat, 14 Mar 2026 10:00:30 GMT")
    assert armed["retry_after"] == "Sat, 14 Mar 2026 10:00:30 GMT"
    r = requests.get(sim.base_url + "/orders/8472", timeout=5)
    assert r.status_code == 429 and r.headers["Retry-After"] == armed["retry_after"]
    assert r.json()["error"]["code"] == "rate_limited"
