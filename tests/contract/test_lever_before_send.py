"""A lever pulled between the policy's decision and the send is obeyed (found by the simulator,
seed 283 of `agent-jobs simulate --scenario agent` on the code before; issue 29, invariant 11).

The policy decided "allow", the intent committed, and in that moment an operator turned the
autonomy lever to 0 (every effect needs a person): the effect went out without one, under a
decision the levers of the send no longer allowed. Now the decision is asked again when the
switches changed since it was made; one that no longer stands is held like any lever's hold,
and on waking a person is asked. On both backends, asserting what the ledger received.
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


@pytest.fixture(autouse=True)
def restore_switches() -> Iterator[None]:
    previous = install(StaticSwitches())
    yield
    install(previous)


def test_autonomy_turned_to_zero_after_the_decision_holds_the_send_for_a_person(
    store: Any, tenant: str
) -> None:
    sent: list[str] = []
    decisions: list[str] = []
    action = Action(tool="ledger.pay", tool_version="1", args={"amount_minor": 4900},
                    idempotency_key="pay:lever")  # fmt: skip

    def authorize(self: Scripted, i: wf.StepInput, a: Action) -> wf.Authorization:
        cap = autonomy_threshold_minor(i.tenant_id)
        kind = "needs_approval" if cap is not None else "allow"
        decisions.append(kind)
        if len(decisions) == 1:
            # The operator turns autonomy to 0 right after this decision, before the send.
            install(switched(autonomy_threshold=(("",), 0)))
        return wf.Authorization(kind, "P@1", reason="autonomy cap" if cap is not None else "")

    def execute(self: Scripted, i: wf.StepInput, a: Action) -> wf.EffectOutcome:
        sent.append(a.idempotency_key)
        return wf.EffectApplied({"ref": a.idempotency_key})

    flow = Scripted(
        decide=lambda self, i: (
            wf.Act(action, {**i.state, "phase": "done"})
            if i.state.get("phase") != "done"
            else wf.ToVerify(i.state)
        ),
        authorize=authorize,
        execute=execute,
        reconcile=lambda self, i, a: wf.NoEffect(),
    )
    h, task = run(store, tenant, flow)
    waiting = h.settle(task.id)
    assert sent == [], f"sent without a person: {events(store, task.id)}"
    assert waiting.status is S.APPROVAL_WAIT, events(store, task.id)
    (asked,) = store.list_approvals(tenant)
    h.orchestrator.decide_approval(asked.approval_id, "oncall-lead", grant=True)
    final = h.settle(task.id)
    assert final.status is S.COMPLETED, events(store, task.id)
    assert sent == ["pay:lever"]
