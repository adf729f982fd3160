"""An effect whose send was never answered, and whose lookup then found nothing, is not given
up as "not applied" (found by the simulator, seed 294 of `agent-jobs simulate --scenario
example` on the code before; issue 29).

A lookup can lag: the system applied the effect, but a read right after does not see it yet.
"Not found" is then enough to send again under the same key (the system applies a key once),
never to close the intent as failed. Before, a lever that held the resend, then a cancel, ended
the task CANCELLED with the effect `failed` while the ledger had applied it: an applied effect
recorded on no task. Now giving the action up (a cancel, a denial, an expiry, a policy that
denies) escalates, naming the key, the effect left unknown. On both backends; each test asserts
what the ledger applied.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent_jobs.core.contracts import Action
from agent_jobs.core.states import Status
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


class LaggingLedger:
    """Applies the first send and times out; its lookups do not see the effect yet."""

    def __init__(self, meanwhile: Any) -> None:
        self.sends: list[str] = []
        self.applied: list[str] = []
        self.meanwhile = meanwhile

    def execute(self, flow: Scripted, inp: wf.StepInput, act: Action) -> wf.EffectOutcome:
        self.sends.append(act.idempotency_key)
        if act.idempotency_key not in self.applied:
            self.applied.append(act.idempotency_key)
        self.meanwhile()
        return wf.EffectUnknown("timeout")

    def reconcile(self, flow: Scripted, inp: wf.StepInput, act: Action) -> wf.ReconcileResult:
        return wf.NoEffect()  # lagging: the applied effect is not visible yet


def effects_stopped() -> None:
    install(switched(effects_stopped=(("",), True)))


def start(store: Any, tenant: str) -> tuple[Any, Any, LaggingLedger]:
    ledger = LaggingLedger(effects_stopped)
    action = Action(tool="ledger.pay", tool_version="1", args={"amount_minor": 4900},
                    idempotency_key="pay:unconfirmed")  # fmt: skip
    flow = Scripted(
        decide=lambda self, i: (
            wf.Act(action, {**i.state, "phase": "done"})
            if i.state.get("phase") != "done"
            else wf.ToVerify(i.state)
        ),
        authorize=lambda self, i, a: wf.Authorization("allow", "P@1"),
        execute=ledger.execute,
        reconcile=ledger.reconcile,
    )
    h, task = run(store, tenant, flow)
    h.run_until_idle()
    return h, task, ledger


def test_a_cancel_while_a_lever_holds_the_resend_escalates_naming_the_key(
    store: Any, tenant: str
) -> None:
    h, task, ledger = start(store, tenant)
    # Reconcile finds nothing; the retry under the same key is held by the lever.
    for _ in range(3):
        if h.store.get(task.id).status is S.RETRY_WAIT:
            break
        h.make_due(task.id)
        h.sweepers.all()
        h.run_until_idle()
    held = h.store.get(task.id)
    assert held.status is S.RETRY_WAIT, events(store, task.id)
    assert ledger.applied == ["pay:unconfirmed"] and ledger.sends == ["pay:unconfirmed"]
    h.orchestrator.cancel(task.id)
    final = h.settle(task.id)
    assert final.status is S.ESCALATED, events(store, task.id)
    assert final.outcome is not None and final.outcome["idempotency_key"] == "pay:unconfirmed"
    assert "abandoned_unconfirmed_effect" in events(store, task.id)
    (effect,) = store.effects(task.id)
    assert effect.status == "unknown", "the ledger applied it: it must not read 'failed'"
    assert ledger.sends == ["pay:unconfirmed"], "not sent again after the cancel"


class LagThenRefuse:
    """Applies the first send and times out; the next lookup does not see it yet; the resend is
    refused before anything is done (503); lookups after that see the effect."""

    def __init__(self) -> None:
        self.sends: list[str] = []
        self.applied: list[str] = []
        self.lookups = 0

    def execute(self, flow: Scripted, inp: wf.StepInput, act: Action) -> wf.EffectOutcome:
        self.sends.append(act.idempotency_key)
        if len(self.sends) == 1:
            self.applied.append(act.idempotency_key)
            return wf.EffectUnknown("timeout")
        return wf.EffectRejected("unavailable", "503 before anything was done")

    def reconcile(self, flow: Scripted, inp: wf.StepInput, act: Action) -> wf.ReconcileResult:
        self.lookups += 1
        if self.lookups == 1 or act.idempotency_key not in self.applied:
            return wf.NoEffect()  # the first lookup lags
        return wf.Found({"ref": act.idempotency_key})


def test_a_refused_resend_does_not_make_an_unanswered_send_not_applied(
    store: Any, tenant: str
) -> None:
    """Seed 294 again, on the code of the first fix: the resend after a lagging lookup was
    answered 503, read as "not applied", and the task FAILED with the effect `failed` though the
    first send had applied it. A refusal speaks for its own request only: the outcome stays
    unknown, is reconciled again, and is found."""
    ledger = LagThenRefuse()
    action = Action(tool="ledger.pay", tool_version="1", args={"amount_minor": 4900},
                    idempotency_key="pay:refused-resend")  # fmt: skip
    flow = Scripted(
        decide=lambda self, i: (
            wf.Act(action, {**i.state, "phase": "done"})
            if i.state.get("phase") != "done"
            else wf.ToVerify(i.state)
        ),
        authorize=lambda self, i, a: wf.Authorization("allow", "P@1"),
        execute=ledger.execute,
        reconcile=ledger.reconcile,
    )
    h, task = run(store, tenant, flow)
    final = h.settle(task.id)
    assert final.status is S.COMPLETED, events(store, task.id)
    (effect,) = store.effects(task.id)
    assert effect.status == "committed"
    assert ledger.applied == ["pay:refused-resend"]
    assert ledger.sends == ["pay:refused-resend", "pay:refused-resend"]
