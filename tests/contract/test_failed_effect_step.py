"""A step that fails in EXECUTING after its intent committed may have sent the effect (issue 29,
defect D1 "blind resend"), on both backends.

The database refuses the commit of the effect's outcome with an error that is not an outage (a
lock or statement timeout, a deadlock): the call went out and was applied, but nothing says so.
Its outcome is unknown, so it goes through EXEC_UNKNOWN and a reconcile read by its key
(invariants 4 and 11): never resent blind (here after a throttled first call, whose leftover
throttle record once made RETRY_WAIT resend it), never cancelled while the effect row still reads
`intent`, and no leftover "resume where it failed" that escalates the task later. Each test
asserts what the system of record received.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import exc as sa_exc

from agent_jobs.core.contracts import Action
from agent_jobs.core.states import Status
from agent_jobs.orchestrator import workflow as wf
from tests.contract.test_step_failures import Scripted, events, run
from tests.contract.test_step_failures import action as pay

S = Status


class LockTimeout(Exception):
    """What the driver raises when a statement waited past `lock_timeout` (SQLSTATE 55P03):
    an answer from a server that is there, not an outage."""

    pgcode = "55P03"


class Deadlock(Exception):
    pgcode = "40P01"


ERRORS = {
    "lock-timeout": lambda: sa_exc.OperationalError(
        "UPDATE tasks", {}, LockTimeout("canceling statement due to lock timeout")
    ),
    "deadlock": lambda: sa_exc.DBAPIError("UPDATE effects", {}, Deadlock("deadlock detected")),
}


class Ledger:
    """The system of record: every call it received, what it applied, every lookup."""

    def __init__(self, throttle_first: bool) -> None:
        self.calls: list[str] = []
        self.applied: list[str] = []
        self.lookups: list[str] = []
        self._throttle = throttle_first

    def execute(self, flow: Scripted, inp: wf.StepInput, act: Action) -> wf.EffectOutcome:
        self.calls.append(act.idempotency_key)
        if self._throttle:
            self._throttle = False
            return wf.EffectThrottled(0.1, "429 Too Many Requests")
        self.applied.append(act.idempotency_key)
        return wf.EffectApplied({"ref": act.idempotency_key})

    def reconcile(self, flow: Scripted, inp: wf.StepInput, act: Action) -> wf.ReconcileResult:
        self.lookups.append(act.idempotency_key)
        if act.idempotency_key in self.applied:
            return wf.Found({"ref": act.idempotency_key})
        return wf.NoEffect()


def refuse_commit_once(
    monkeypatch: pytest.MonkeyPatch, store: Any, event: str, error: Callable[[], Exception]
) -> list[str]:
    """The commit of the first patch named `event` is refused by the database (rolled back,
    nothing written), as a lock timeout or a deadlock would; every other commit goes through."""
    real = store.transition
    refused: list[str] = []

    def transition(guard: Any, patch: Any, **kw: Any) -> Any:
        if patch.event == event and not refused:
            refused.append(patch.event)
            raise error()
        return real(guard, patch, **kw)

    monkeypatch.setattr(store, "transition", transition)
    return refused


def scenario(
    store: Any,
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
    *,
    throttle_first: bool,
    error: str = "lock-timeout",
    **hooks: Any,
) -> tuple[Any, Any, Ledger]:
    ledger = Ledger(throttle_first)
    h, task = run(
        store,
        tenant,
        Scripted(execute=ledger.execute, reconcile=ledger.reconcile, **hooks),
    )
    refused = refuse_commit_once(monkeypatch, store, "effect_committed", ERRORS[error])
    h.run_until_idle()
    if throttle_first:  # the throttled wait, then the resend whose outcome cannot be recorded
        assert store.get(task.id).status is S.RETRY_WAIT
        h.make_due(task.id)
        h.sweepers.all()
        h.run_until_idle()
    assert refused == ["effect_committed"], "the scenario must refuse the outcome's commit"
    assert ledger.applied == [f"pay:{task.id}"], "the effect was applied once"
    return h, task, ledger


@pytest.mark.parametrize("error", sorted(ERRORS))
@pytest.mark.parametrize("throttle_first", [True, False], ids=["after-throttle", "first-send"])
def test_an_effect_whose_outcome_commit_failed_is_reconciled_never_resent(
    store: Any, tenant: str, monkeypatch: pytest.MonkeyPatch, throttle_first: bool, error: str
) -> None:
    h, task, ledger = scenario(
        store, tenant, monkeypatch, throttle_first=throttle_first, error=error
    )
    final = h.settle(task.id)
    key = f"pay:{task.id}"
    assert ledger.applied == [key], f"sent again without a look: {ledger.calls}"
    assert len(ledger.calls) == (2 if throttle_first else 1)
    assert ledger.lookups == [key], "the unknown outcome is read back by its key"
    assert final.status is S.COMPLETED, events(store, task.id)
    (effect,) = store.effects(task.id)
    assert (effect.status, effect.attempts) == ("committed", 1)
    names = events(store, task.id)
    assert names.count("reconciled_found") == 1
    assert names.count("resend_after_throttle") == (1 if throttle_first else 0)


@pytest.mark.parametrize("throttle_first", [True, False], ids=["after-throttle", "first-send"])
def test_a_cancel_while_the_outcome_is_unknown_waits_for_the_effect_and_reports_it(
    store: Any, tenant: str, monkeypatch: pytest.MonkeyPatch, throttle_first: bool
) -> None:
    """DESIGN: EXECUTING and EXEC_UNKNOWN cannot be cancelled mid-flight. The cancel is
    honoured once the effect is resolved, and the outcome names the effect that stands."""
    # After the effect the task works on in RUNNING (no verify yet), where the cancel is seen.
    h, task, ledger = scenario(
        store, tenant, monkeypatch, throttle_first=throttle_first, verify_after_effect=False
    )
    h.orchestrator.cancel(task.id)
    final = h.settle(task.id)
    key = f"pay:{task.id}"
    assert ledger.applied == [key]
    (effect,) = store.effects(task.id)
    assert effect.status == "committed", f"the applied effect was left {effect.status!r}"
    assert final.status is S.CANCELLED
    assert final.outcome is not None
    assert final.outcome["effects_committed"] == [{"tool": "ledger.pay", "idempotency_key": key}]


def test_a_task_that_failed_in_executing_is_not_escalated_later_by_a_leftover_resume(
    store: Any, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the effect, the workflow asks for one ordinary retry (a `Retry` decision). Waking
    from it goes back to RUNNING, not to EXECUTING as a stale "resume" once said, which read as
    a lost lease on an effect whose record was gone, and escalated a healthy task."""
    retried: list[bool] = []

    def decide(flow: Scripted, i: wf.StepInput) -> wf.StepDecision:
        phase = i.state.get("phase")
        if phase == "read":
            return wf.Observe({**i.state, "phase": "act"})
        if phase == "act":
            return wf.Act(pay(i.task_id), {**i.state, "phase": "after"})
        if not retried:
            retried.append(True)
            return wf.Retry("the ledger's report is not ready yet", retry_after_s=0.05)
        return wf.ToVerify(i.state)

    h, task, ledger = scenario(
        store, tenant, monkeypatch, throttle_first=True, decide=decide, verify_after_effect=False
    )
    final = h.settle(task.id)
    assert retried == [True]
    assert final.status is S.COMPLETED, (final.outcome, events(store, task.id))
    assert ledger.applied == [f"pay:{task.id}"]
