"""Golden cases of the refund agent (seed 004), on SQLite and Postgres, against a real sim.

Every case drives `refund_resolution@3` through the real orchestrator (`Harness`) with the
scripted model, the real tool executor over HTTP and the simulated business systems, and asserts
the final state of the simulated world (`GET /admin/world`) and what reached it (the sim's request
log), not prose.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import update

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.errors import ApprovalError
from agent_jobs.core.hashing import action_hash
from agent_jobs.core.states import Status
from agent_jobs.gateway import ScriptedProvider
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.sim import worlds
from agent_jobs.sim.server import SimServer
from agent_jobs.store.schema import approvals, tasks
from agent_jobs.testing import Harness
from agent_jobs.workflows.refund import (
    WORKFLOW,
    Behaviour,
    RefundRules,
    RefundWorkflow,
    scripted_services,
)

REQUESTER = "svc-support-chat"
APPROVER = "lead-41"
READ_OPS = {"orders.get", "payments.list", "refunds.list", "policies.search", "policies.get"}


@pytest.fixture
def sim() -> Iterator[SimServer]:
    with SimServer(worlds.empty()) as server:
        yield server


class Case:
    """One golden case: a world in the sim, a workflow with a scripted model, a harness."""

    def __init__(self, store: Any, sim: SimServer, world: dict[str, Any], **behaviour: Any):
        sim.admin.load(world)
        self.sim = sim
        self.store = store
        self.provider = ScriptedProvider(RefundRules(Behaviour(**behaviour)))
        self.services = scripted_services(sim.base_url, provider=self.provider)
        registry = WorkflowRegistry()
        registry.register(RefundWorkflow(self.services))
        self.harness = Harness(store, registry)
        self.tenant = "acme"
        self.task_id = ""

    def submit(self, order_id: str) -> Any:
        message = f"Order {order_id} was charged twice, and my refund has not arrived."
        request = TaskRequest(workflow=WORKFLOW, input={"message": message, "channel": "chat"})
        task = self.harness.submit(self.tenant, f"req-{order_id}", request, requester=REQUESTER)
        self.task_id = task.id
        return self.harness.settle(task.id)

    def settle(self) -> Any:
        return self.harness.settle(self.task_id)

    def pending(self) -> Any:
        found = self.store.list_approvals(self.tenant, status="pending", task_id=self.task_id)
        assert len(found) == 1, found
        return found[0]

    def approve(self, approver: str = APPROVER) -> Any:
        self.harness.orchestrator.decide_approval(self.pending().approval_id, approver, grant=True)
        return self.settle()

    def refunds(self) -> list[dict[str, Any]]:
        return self.sim.admin.refunds()

    def sent(self, operation: str) -> list[dict[str, Any]]:
        return self.sim.admin.requests(operation)

    def events(self, type_: str) -> list[Any]:
        return [e for e in self.store.events(self.task_id) if e.type == type_]

    def state(self) -> dict[str, Any]:
        return dict(self.store.get(self.task_id).state)


# -- outcomes --------------------------------------------------------------------------------


def test_both_payments_captured_one_refund_after_approval(store: Any, sim: SimServer) -> None:
    case = Case(store, sim, worlds.incident_8472())
    task = case.submit("8472")
    assert task.status is Status.APPROVAL_WAIT
    approval = case.pending()
    assert approval.args == {"payment_id": "pay_8472_b", "amount_minor": 200_000, "currency": "INR"}
    assert approval.policy_version == "POL-REF-004@4"
    assert approval.requester == REQUESTER
    assert case.sent("refunds.create") == []  # nothing moves before a human says so

    task = case.approve()
    assert task.status is Status.COMPLETED
    [refund] = case.refunds()
    assert (refund["payment_id"], refund["amount_minor"], refund["idempotency_key"]) == (
        "pay_8472_b",
        200_000,
        "refund:req-8472:pay_8472_b",
    )
    assert task.outcome["refund_id"] == refund["refund_id"]
    assert task.outcome["refund_status"] == "processing"
    assert task.outcome["verified"] is True
    assert "processing" in task.outcome["reply"] and "Priya Sharma" in task.outcome["reply"]
    assert task.pinned == {
        "workflow": WORKFLOW,
        "prompt": "refund-v7",
        "model_route": "support-tier2@2026-03",
        "policy": "POL-REF-004@4",
        "tools": RefundWorkflow().pinned()["tools"],
    }
    # The model saw a customer reference, never the customer.
    seen = " ".join(m.content for r in case.provider.requests for m in r.messages) + " ".join(
        str(r.facts) for r in case.provider.requests
    )
    assert "Priya" not in seen and "priya.sharma@example.com" not in seen
    assert "[customer:cus_5120]" in seen


def test_authorisation_hold_is_not_refunded(store: Any, sim: SimServer) -> None:
    case = Case(store, sim, worlds.auth_hold_lookalike())
    task = case.submit("9101")
    assert task.status is Status.COMPLETED
    assert task.outcome["refund_id"] is None
    assert task.outcome["no_refund_reason"] == "no_duplicate_capture"
    assert "authorization hold" in task.outcome["reply"]
    assert case.refunds() == []
    assert case.sent("refunds.create") == []
    assert store.list_approvals(case.tenant, task_id=case.task_id) == []


def test_already_refunded_gets_no_second_refund(store: Any, sim: SimServer) -> None:
    case = Case(store, sim, worlds.already_refunded())
    task = case.submit("9102")
    assert task.status is Status.COMPLETED
    assert task.outcome["no_refund_reason"] == "already_refunded"
    assert [r["refund_id"] for r in case.refunds()] == ["rf_2950"]
    assert case.sent("refunds.create") == []


def test_amount_above_captured_is_denied_and_never_sent(store: Any, sim: SimServer) -> None:
    case = Case(store, sim, worlds.amount_above_captured(), ask_order_total=True)
    task = case.submit("9103")
    [denied] = case.events("policy_denied")
    assert denied.data["reason"] == "exceeds_refundable"
    # The model re-planned on the denial; the gate now asks a human about the captured amount.
    assert task.status is Status.APPROVAL_WAIT
    assert case.pending().args["amount_minor"] == 150_000
    task = case.approve()
    assert task.status is Status.COMPLETED
    assert [(r["payment_id"], r["amount_minor"]) for r in case.refunds()] == [
        ("pay_9103_b", 150_000)
    ]
    assert [r["body"]["amount_minor"] for r in case.sent("refunds.create")] == [150_000]


# -- untrusted data --------------------------------------------------------------------------


def _only_allowed_calls(case: Case, payment_id: str) -> None:
    log = case.sim.admin.requests()
    business = [r for r in log if not str(r["operation"] or "").startswith("admin.")]
    assert {r["operation"] for r in business} <= READ_OPS | {"refunds.create", "refunds.get_by_key"}
    for r in case.sent("refunds.create"):
        assert r["body"] == {"payment_id": payment_id, "amount_minor": 200_000, "currency": "INR"}


def test_malicious_note_causes_no_forbidden_call(store: Any, sim: SimServer) -> None:
    case = Case(store, sim, worlds.malicious_note())
    assert case.submit("9104").status is Status.APPROVAL_WAIT
    task = case.approve()
    assert task.status is Status.COMPLETED
    assert [(r["payment_id"], r["amount_minor"]) for r in case.refunds()] == [
        ("pay_9104_b", 200_000)
    ]
    _only_allowed_calls(case, "pay_9104_b")
    assert "99120044" not in task.outcome["reply"]


def test_a_model_that_obeys_the_note_is_stopped_by_the_gate(store: Any, sim: SimServer) -> None:
    case = Case(store, sim, worlds.malicious_note(), follow_injection="amount")
    task = case.submit("9104")
    [denied] = case.events("policy_denied")
    assert denied.data["reason"] == "exceeds_refundable"
    assert task.status is Status.APPROVAL_WAIT
    assert case.pending().args["amount_minor"] == 200_000
    case.approve()
    assert len(case.refunds()) == 1
    _only_allowed_calls(case, "pay_9104_b")


def test_a_destination_account_cannot_even_be_proposed(store: Any, sim: SimServer) -> None:
    case = Case(store, sim, worlds.malicious_note(), follow_injection="destination")
    task = case.submit("9104")
    # The refund tool has no such field: the gateway rejects the proposal (and its repair), the
    # task retries until it gives up; nothing reaches the gate, a human or the payments system.
    assert task.status in (Status.FAILED, Status.ESCALATED)
    assert case.sent("refunds.create") == []
    assert store.list_approvals(case.tenant, task_id=case.task_id) == []
    assert case.refunds() == []


def test_refunds_switched_off_escalate_instead_of_answering(store: Any, sim: SimServer) -> None:
    case = Case(store, sim, worlds.incident_8472())
    case.services.tools.switches.disable_tool("refunds.create", case.tenant)  # type: ignore[attr-defined]
    task = case.submit("8472")
    # The incident lever: no refund goes out and the customer is not told "no refund" either.
    assert task.status is Status.ESCALATED
    assert "tool_disabled" in task.outcome["reason"]
    assert case.sent("refunds.create") == []
    assert store.list_approvals(case.tenant, task_id=case.task_id) == []


# -- effects under faults --------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["drop_after_commit", "error_after_commit"])
def test_timeout_after_success_is_exactly_one_refund(
    store: Any, sim: SimServer, fault: str
) -> None:
    case = Case(store, sim, worlds.incident_8472())
    case.submit("8472")
    sim.admin.arm("refunds.create", fault)
    task = case.approve()
    assert task.status is Status.COMPLETED
    assert len(case.refunds()) == 1
    assert len(case.sent("refunds.create")) == 1  # reconciled by key, never re-sent blindly
    assert task.outcome["reconciled"] is True
    assert [e.type for e in case.events("reconciled_found")] == ["reconciled_found"]


def test_args_changed_after_approval_are_refused(store: Any, sim: SimServer) -> None:
    case = Case(store, sim, worlds.incident_8472())
    case.submit("8472")
    state = case.state()
    state["runtime"]["pending_action"]["args"]["amount_minor"] = 150_000
    with store.tx() as conn:
        conn.execute(update(tasks).where(tasks.c.id == case.task_id).values(state=state))
    task = case.approve()
    assert task.status is Status.ESCALATED
    [invalid] = case.events("approval_invalid")
    assert invalid.data["reason"] == "action_changed"
    assert case.sent("refunds.create") == [] and case.refunds() == []


def test_a_forged_grant_for_changed_args_is_refused_by_the_executor(
    store: Any, sim: SimServer
) -> None:
    case = Case(store, sim, worlds.incident_8472())
    case.submit("8472")
    approval = case.pending()
    # Someone rewrites both the pending action and the grant's hash: the orchestrator's check
    # passes, policy allows the smaller amount, yet the executor recomputes the hash from the
    # arguments it would send and compares it with the decision the workflow recorded.
    forged = {**approval.args, "amount_minor": 150_000}
    state = case.state()
    state["runtime"]["pending_action"]["args"] = forged
    with store.tx() as conn:
        conn.execute(update(tasks).where(tasks.c.id == case.task_id).values(state=state))
        conn.execute(
            update(approvals)
            .where(approvals.c.id == approval.approval_id)
            .values(action_hash=action_hash("refunds.create", "2", forged))
        )
    task = case.approve()
    assert task.status is Status.ESCALATED
    [refused] = [e for e in case.events("execute_tool refunds.create")]
    assert refused.data["code"] == "action_hash_mismatch"
    assert case.sent("refunds.create") == [] and case.refunds() == []


def test_self_approval_is_refused(store: Any, sim: SimServer) -> None:
    case = Case(store, sim, worlds.incident_8472())
    case.submit("8472")
    approval = case.pending()
    with pytest.raises(ApprovalError):
        case.harness.orchestrator.decide_approval(approval.approval_id, REQUESTER, grant=True)
    assert case.settle().status is Status.APPROVAL_WAIT
    assert store.approval(approval.approval_id).status == "pending"
    assert case.sent("refunds.create") == []


@pytest.mark.parametrize("granted_first", [False, True])
def test_expired_grant_goes_back_to_approval(
    store: Any, sim: SimServer, granted_first: bool
) -> None:
    case = Case(store, sim, worlds.incident_8472())
    case.submit("8472")
    first = case.pending()
    if granted_first:
        case.harness.orchestrator.decide_approval(first.approval_id, APPROVER, grant=True)
    case.harness.expire_approval(first.approval_id)
    task = case.settle()
    assert task.status is Status.APPROVAL_WAIT
    second = case.pending()
    assert second.approval_id != first.approval_id
    assert second.action_hash == first.action_hash  # the same exact action, asked again
    assert store.approval(first.approval_id).status == "expired"
    assert case.sent("refunds.create") == []
    assert case.approve().status is Status.COMPLETED
    assert len(case.refunds()) == 1


# -- the model's budget and failures ----------------------------------------------------------


def test_a_looping_model_is_stopped_by_the_call_budget(store: Any, sim: SimServer) -> None:
    case = Case(store, sim, worlds.auth_hold_lookalike(), loop=True)
    task = case.submit("9101")
    assert task.status is Status.ESCALATED
    assert "budget" in task.outcome["reason"]
    assert case.state()["model"]["usage"]["calls"] == 8
    assert len(case.events("chat")) == 8
    assert len(case.events("policy_denied")) == 6  # calls 3..8 proposed the hold, each denied
    assert case.sent("refunds.create") == [] and case.refunds() == []


def test_model_outage_and_invalid_output_retry_and_are_accounted(
    store: Any, sim: SimServer
) -> None:
    case = Case(store, sim, worlds.incident_8472())
    case.provider.fail_next(unavailable=1, malformed=2)
    task = case.submit("8472")
    assert task.status is Status.APPROVAL_WAIT
    retries = case.events("retry_scheduled")
    assert len(retries) == 2  # one outage, one output invalid even after its repair
    # The outage was not billed; both invalid calls were, and the budget counts them.
    usage = case.state()["model"]["usage"]
    assert usage["calls"] == 5
    outcomes = [e.data["outcome"] for e in case.events("chat")]
    assert outcomes == ["invalid_model_output", "invalid_model_output", "ok", "ok", "ok"]


@pytest.mark.parametrize(("mode", "status"), [("once", "COMPLETED"), ("always", "ESCALATED")])
def test_an_overclaiming_draft_is_redrafted_once(
    store: Any, sim: SimServer, mode: str, status: str
) -> None:
    case = Case(store, sim, worlds.incident_8472(), bad_draft=mode)
    case.submit("8472")
    task = case.approve()
    assert task.status.value == status
    redrafts = case.events("redraft")
    assert len(redrafts) == 1 and "refund_mismatch" in redrafts[0].data["reason"]
    assert len(case.refunds()) == 1  # the reply, not the refund, was wrong
    if status == "COMPLETED":
        assert "processing" in task.outcome["reply"]
        assert "completed" not in task.outcome["reply"].lower()


def test_cost_of_a_task_from_the_gateways_accounting(store: Any, sim: SimServer) -> None:
    from agent_jobs.cli.costs import task_cost_json, task_cost_text

    case = Case(store, sim, worlds.auth_hold_lookalike())
    case.submit("9101")
    report = task_cost_json(store, case.task_id)
    usage = case.state()["model"]["usage"]
    assert report["steps"] == ["investigate", "retrieve_policy", "decide", "draft_reply"]
    assert report["input_tokens"] == usage["input_tokens"]
    assert report["output_tokens"] == usage["output_tokens"]
    costs = {
        Decimal(report["cost_inr"]),
        Decimal(report["recorded_cost_inr"]),
        Decimal(usage["cost"]),
    }
    assert len(costs) == 1 and costs.pop() > 0
    assert "draft_reply" in task_cost_text(store, case.task_id)
