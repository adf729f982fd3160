"""Every path back to EXECUTING asks the policy and the levers in force at that moment (issue 29,
defect D2 "a lever bypassed"; invariant 11), on both backends.

An effect allowed before an operator turned the autonomy lever to 0 (`agent-jobs ops autonomy
0`: every effect needs a person) was resent after a throttle, or retried after "reconcile found
nothing", without a person. Now each resend is authorised again: needs_approval (and no
still-valid grant for this exact action) parks it for a person; deny does not send it. Each test
asserts what the system of record received.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent_jobs.core.contracts import Action
from agent_jobs.core.states import Status
from agent_jobs.ops import autonomy_threshold_minor
from agent_jobs.ops.live import install
from agent_jobs.ops.switches import StaticSwitches
from agent_jobs.orchestrator import workflow as wf
from tests.contract.test_ops_switches import switched
from tests.contract.test_step_failures import Scripted, events, run

S = Status
# How each path leaves the effect before it goes back to EXECUTING.
PATHS = ["throttled", "reconciled-not-found"]


@pytest.fixture(autouse=True)
def restore_switches() -> Iterator[None]:
    previous = install(StaticSwitches())
    yield
    install(previous)


def lever_off_to_zero() -> None:
    """`agent-jobs ops autonomy 0`: from now on every effect needs a person."""
    install(switched(autonomy_threshold=(("",), 0)))


def payout(task_id: str) -> Action:
    return Action(
        tool="ledger.pay",
        tool_version="1",
        args={"amount_minor": 4900},
        idempotency_key=f"pay:{task_id}",
    )


class Policy:
    """The workflow's policy as real ones are written: allow, unless the operator's autonomy cap
    says a person must look, or the policy now denies this action."""

    def __init__(self) -> None:
        self.denies = False
        self.asked = 0

    def authorize(self, flow: Scripted, inp: wf.StepInput, act: Action) -> wf.Authorization:
        self.asked += 1
        if self.denies:
            return wf.Authorization("deny", "P@2", reason="payouts suspended")
        cap = autonomy_threshold_minor(inp.tenant_id)
        if cap is not None and int(act.args["amount_minor"]) >= cap:
            return wf.Authorization("needs_approval", "P@1", reason=f"operator autonomy cap {cap}")
        return wf.Authorization("allow", "P@1")


class Ledger:
    """The system of record. Its first answer leaves the effect unapplied, in the way `path`
    names: a 429 (throttled), or a timeout whose lookup then finds nothing. `meanwhile` runs
    during that first call: the lever or the policy changes while the call is out."""

    def __init__(self, path: str, meanwhile: Any) -> None:
        self.path = path
        self.calls: list[str] = []
        self.applied: list[str] = []
        self.meanwhile = meanwhile

    def execute(self, flow: Scripted, inp: wf.StepInput, act: Action) -> wf.EffectOutcome:
        self.calls.append(act.idempotency_key)
        if len(self.calls) == 1:
            self.meanwhile()
            if self.path == "throttled":
                return wf.EffectThrottled(0.1, "429 Too Many Requests")
            return wf.EffectUnknown("timeout")
        self.applied.append(act.idempotency_key)
        return wf.EffectApplied({"ref": act.idempotency_key})

    def reconcile(self, flow: Scripted, inp: wf.StepInput, act: Action) -> wf.ReconcileResult:
        if act.idempotency_key in self.applied:
            return wf.Found({"ref": act.idempotency_key})
        return wf.NoEffect()


def start(
    store: Any, tenant: str, path: str, meanwhile: Any, policy: Policy | None = None
) -> tuple[Any, Any, Ledger]:
    ledger = Ledger(path, meanwhile)
    flow = Scripted(
        decide=lambda self, i: (
            wf.Act(payout(i.task_id), {**i.state, "phase": "done"})
            if i.state.get("phase") != "done"
            else wf.ToVerify(i.state)
        ),
        authorize=(policy or Policy()).authorize,
        execute=ledger.execute,
        reconcile=ledger.reconcile,
    )
    h, task = run(store, tenant, flow)
    h.run_until_idle()
    return h, task, ledger


def wake(h: Any, task_id: str) -> Any:
    """The task's timer falls due and the sweepers wake it (a throttle's Retry-After)."""
    if h.store.get(task_id).status in (S.RETRY_WAIT, S.EXEC_UNKNOWN):
        h.make_due(task_id)
        h.sweepers.all()
        h.run_until_idle()
    return h.store.get(task_id)


@pytest.mark.parametrize("path", PATHS)
def test_the_autonomy_lever_turned_to_zero_is_asked_again_before_the_effect_goes_out_again(
    store: Any, tenant: str, path: str
) -> None:
    h, task, ledger = start(store, tenant, path, meanwhile=lever_off_to_zero)
    waiting = wake(h, task.id)
    assert ledger.calls == [f"pay:{task.id}"], "sent again without a person"
    assert waiting.status is S.APPROVAL_WAIT, events(store, task.id)
    (asked,) = store.list_approvals(tenant)
    pending = Action.model_validate(waiting.state["runtime"]["pending_action"])
    assert asked.status == "pending" and asked.action_hash == pending.action_hash
    assert pending.idempotency_key == f"pay:{task.id}", "the same key, once a person says so"
    (effect,) = store.effects(task.id)
    # A 429 says nothing was applied: the intent is closed while a person looks. A lookup that
    # found nothing after an unanswered send does not (it can lag): the effect stays unknown.
    expected = "failed" if path == "throttled" else "unknown"
    assert effect.status == expected, f"{path}: {effect.status}"

    h.orchestrator.decide_approval(asked.approval_id, "oncall-lead", grant=True)
    final = h.settle(task.id)
    assert final.status is S.COMPLETED, events(store, task.id)
    assert ledger.applied == [f"pay:{task.id}"]
    assert store.approval(asked.approval_id).status == "used"
    (effect,) = store.effects(task.id)
    assert effect.status == "committed"


@pytest.mark.parametrize("path", PATHS)
def test_an_action_the_policy_now_denies_is_not_sent_again(
    store: Any, tenant: str, path: str
) -> None:
    policy = Policy()

    def policy_changes() -> None:
        policy.denies = True

    h, task, ledger = start(store, tenant, path, meanwhile=policy_changes, policy=policy)
    final = h.settle(wake(h, task.id).id)
    assert ledger.calls == [f"pay:{task.id}"] and ledger.applied == []
    assert final.status is S.ESCALATED, events(store, task.id)
    assert final.outcome is not None and "denies" in final.outcome["reason"]
    assert "policy_denied_on_retry" in events(store, task.id)
    (effect,) = store.effects(task.id)
    if path == "throttled":
        assert effect.status == "failed"
    else:  # the key whose unanswered send may have applied is named, the effect left unknown
        assert final.outcome["idempotency_key"] == f"pay:{task.id}"
        assert effect.status == "unknown"


@pytest.mark.parametrize("path", PATHS)
def test_a_cancel_while_a_person_looks_at_the_resend_leaves_no_open_intent(
    store: Any, tenant: str, path: str
) -> None:
    h, task, ledger = start(store, tenant, path, meanwhile=lever_off_to_zero)
    assert wake(h, task.id).status is S.APPROVAL_WAIT
    h.orchestrator.cancel(task.id)
    final = h.settle(task.id)
    (effect,) = store.effects(task.id)
    if path == "throttled":
        assert final.status is S.CANCELLED and ledger.applied == []
        assert effect.status == "failed", f"left {effect.status!r} under a cancelled task"
    else:  # the unanswered send may have applied (a lookup can lag): a person confirms
        assert final.status is S.ESCALATED, events(store, task.id)
        assert final.outcome is not None and final.outcome["idempotency_key"] == f"pay:{task.id}"
        assert effect.status == "unknown"
    (asked,) = store.list_approvals(tenant)
    assert asked.status == "void"


def test_a_grant_that_still_covers_the_action_lets_a_throttled_resend_go_without_asking_again(
    store: Any, tenant: str
) -> None:
    """The lever was at 0 from the start: a person granted this exact action, and the grant
    (consumed with the intent) still stands when the throttle's wait ends."""
    lever_off_to_zero()
    h, task, ledger = start(store, tenant, "throttled", meanwhile=lambda: None)
    (granted,) = store.list_approvals(tenant)
    h.orchestrator.decide_approval(granted.approval_id, "oncall-lead", grant=True)
    h.run_until_idle()
    assert ledger.calls == [f"pay:{task.id}"] and store.get(task.id).status is S.RETRY_WAIT
    final = h.settle(task.id)
    assert final.status is S.COMPLETED, events(store, task.id)
    assert ledger.applied == [f"pay:{task.id}"]
    assert len(store.list_approvals(tenant)) == 1, "not asked twice for one action"


def test_a_grant_that_expired_during_the_throttle_wait_is_asked_for_again(
    store: Any, tenant: str
) -> None:
    lever_off_to_zero()
    h, task, ledger = start(store, tenant, "throttled", meanwhile=lambda: None)
    (granted,) = store.list_approvals(tenant)
    h.orchestrator.decide_approval(granted.approval_id, "oncall-lead", grant=True)
    h.run_until_idle()
    h.expire_approval(granted.approval_id)
    waiting = wake(h, task.id)
    assert ledger.calls == [f"pay:{task.id}"], "sent on a grant that had expired"
    assert waiting.status is S.APPROVAL_WAIT
    assert {a.approval_id for a in store.list_approvals(tenant, status="pending")} == {
        waiting.state["runtime"]["approval_id"]
    }
