"""A worker that pauses between committing an approved intent and sending it does not send on a
grant that ran out meanwhile (issue 29: found by the simulator, Postgres seed 53 — the clock
moved 3,979 s between the intent's commit and the send of a grant of 1,800 s, the keeper
renewing the lease all along), on both backends.

The last check before the send is on the worker's own clock: the grant's time left, read with
the database's clock when the grant was checked, against how long the worker has taken since.
Not sent; the intent is closed as not applied and a person is asked again. Each test asserts
what the system of record received.
"""

from __future__ import annotations

from typing import Any

import pytest

from agent_jobs.core.clock import FixedClock
from agent_jobs.core.contracts import Action
from agent_jobs.core.patch import Patch
from agent_jobs.core.states import Status
from agent_jobs.orchestrator import workflow as wf
from tests.contract.test_resend_authorised_again import payout
from tests.contract.test_step_failures import Scripted, events, run

S = Status
GRANT_TTL_S = 600.0


class Ledger:
    def __init__(self) -> None:
        self.received: list[str] = []

    def execute(self, flow: Scripted, inp: wf.StepInput, act: Action) -> wf.EffectOutcome:
        self.received.append(act.idempotency_key)
        return wf.EffectApplied({"ref": act.idempotency_key})

    def reconcile(self, flow: Scripted, inp: wf.StepInput, act: Action) -> wf.ReconcileResult:
        if act.idempotency_key in self.received:
            return wf.Found({"ref": act.idempotency_key})
        return wf.NoEffect()


def start(
    store: Any, tenant: str, monkeypatch: pytest.MonkeyPatch, pause_s: float
) -> tuple[Any, Any, Ledger, list[float]]:
    """A payout a person must approve, on a worker whose clock the test moves: `pause_s` passes
    right after each intent's commit (the worker stalls there; the keeper renews its lease),
    as long as `pauses` holds a value."""
    ledger = Ledger()
    flow = Scripted(
        decide=lambda self, i: (
            wf.Act(payout(i.task_id), {**i.state, "phase": "done"})
            if i.state.get("phase") != "done"
            else wf.ToVerify(i.state)
        ),
        authorize=lambda self, i, a: wf.Authorization(
            "needs_approval", "P@1", reason="large payout", ttl_s=GRANT_TTL_S
        ),
        execute=ledger.execute,
        reconcile=ledger.reconcile,
    )
    h, task = run(store, tenant, flow)
    clock = FixedClock()
    h.orchestrator.steps.monotonic = clock.monotonic
    pauses = [pause_s]
    transition = store.transition

    def paused_after_intent(guard: Any, patch: Patch, **kw: Any) -> Any:
        done = transition(guard, patch, **kw)
        if patch.to is S.EXECUTING and pauses:
            clock.advance(pauses.pop())
        return done

    monkeypatch.setattr(store, "transition", paused_after_intent)
    h.run_until_idle()
    return h, task, ledger, pauses


def test_a_grant_that_ran_out_while_the_worker_paused_after_the_intent_is_not_sent_on(
    store: Any, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    h, task, ledger, _ = start(store, tenant, monkeypatch, pause_s=GRANT_TTL_S + 1)
    (first,) = store.list_approvals(tenant)
    h.orchestrator.decide_approval(first.approval_id, "oncall-lead", grant=True)
    waiting = h.settle(task.id)

    assert ledger.received == [], "sent on a grant that had run out"
    assert waiting.status is S.APPROVAL_WAIT, events(store, task.id)
    assert store.approval(first.approval_id).status == "used"
    (effect,) = store.effects(task.id)
    assert effect.status == "failed", "nothing left: the intent is closed as not applied"
    again = [a for a in store.list_approvals(tenant) if a.approval_id != first.approval_id]
    assert [a.status for a in again] == ["pending"]
    assert again[0].action_hash == payout(task.id).action_hash

    # A person grants it again; this time the worker does not pause: sent once, same key.
    h.orchestrator.decide_approval(again[0].approval_id, "oncall-lead", grant=True)
    final = h.settle(task.id)
    assert final.status is S.COMPLETED, events(store, task.id)
    assert ledger.received == [f"pay:{task.id}"]
    assert [e.status for e in store.effects(task.id)] == ["committed"]


def test_a_pause_the_grant_outlasts_sends_at_once(
    store: Any, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    h, task, ledger, pauses = start(store, tenant, monkeypatch, pause_s=GRANT_TTL_S - 5)
    (first,) = store.list_approvals(tenant)
    h.orchestrator.decide_approval(first.approval_id, "oncall-lead", grant=True)
    final = h.settle(task.id)
    assert pauses == [], "the worker did pause after the intent"
    assert final.status is S.COMPLETED, events(store, task.id)
    assert ledger.received == [f"pay:{task.id}"]
    assert len(store.list_approvals(tenant)) == 1
