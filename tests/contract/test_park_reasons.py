"""A parked task says why (invariant 12), on both backends.

Every row in RETRY_WAIT carries one park entry that names why it waits (`core.park`), written
by the step that parked it and cleared when it wakes; RETRY_WAIT's step wakes as that entry says,
whatever other keys are left in the runtime state; a row an earlier release parked (no entry,
only its leftover `resume` / `throttle` keys) still wakes as it meant to; the task's views show
the reason. Checked after every step of generated fault schedules.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import update

from agent_jobs.core.contracts import Action
from agent_jobs.core.park import PARK_KEY, THROTTLES_KEY, Park, ParkReason
from agent_jobs.core.states import TERMINAL, DisplayStatus, Status
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.store.schema import tasks
from tests.contract.test_step_failures import Chaotic, Scripted, events, run

S = Status
R = ParkReason

# The event that parks a task in RETRY_WAIT, and the reasons it may give.
PARKED_BY: dict[str, set[ParkReason]] = {
    "retry_scheduled": {R.RETRY},
    "step_failed": {R.STEP_FAILED},
    "lease_expired": {R.STEP_FAILED},
    "verify_error": {R.VERIFY_ERROR},
    "effect_throttled": {R.THROTTLED, R.HELD_BY_OPERATOR},
}


class Held(Chaotic):
    """`Chaotic`, whose effect may also be held by an operator's lever."""

    def execute(self, inp: wf.StepInput, act: Action) -> wf.EffectOutcome:
        if self.plan and self.plan[0] == "held":
            self.plan.pop(0)
            return wf.EffectThrottled(0.01, "effects stopped by operator", by_operator=True)
        return super().execute(inp, act)


def check_park(store: Any, task_id: str) -> None:
    """Invariant 12 on the row as committed: in RETRY_WAIT one readable park entry, the one the
    step that parked it gave; anywhere else none; never the keys it replaced."""
    row = store.get(task_id)
    runtime = row.state.get("runtime") or {}
    assert "resume" not in runtime and "throttle" not in runtime, runtime
    if row.status is not S.RETRY_WAIT:
        assert row.status in TERMINAL or PARK_KEY not in runtime, (row.status, runtime)
        assert row.view().park is None
        return
    park = Park.model_validate(runtime[PARK_KEY])
    assert row.view().park == park
    entered = [e for e in store.events(task_id) if e.to_status is S.RETRY_WAIT]
    last = entered[-1]
    if last.from_status is not S.RETRY_WAIT:  # its own failure keeps the reason it had
        assert park.reason in PARKED_BY[last.type], (last.type, park)
    if last.type == "effect_throttled":
        held = bool(last.data.get("by_operator"))
        assert park.reason is (R.HELD_BY_OPERATOR if held else R.THROTTLED)
        assert (row.view().display_status is DisplayStatus.STOPPED_BY_OPERATOR) == held
    if park.reason is R.STEP_FAILED:
        assert park.resume is Status(last.data.get("step", last.from_status))


def settle_checked(h: Any, store: Any, task_id: str, rounds: int = 400) -> Any:
    for _ in range(rounds):
        while h.publisher.queue:
            h.run_one()
            check_park(store, task_id)
        row = store.get(task_id)
        if row.status in TERMINAL:
            return row
        h.make_due(task_id)
        h.sweepers.all()
        check_park(store, task_id)
    return store.get(task_id)


FAULTS = st.sampled_from(["ok", "raise", "retry", "unknown", "lookup_failed", "throttle", "held"])


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=st.lists(FAULTS, min_size=0, max_size=40))
def test_every_parked_row_carries_the_reason_its_step_gave(
    sqlite_store: Any, script: list[str]
) -> None:
    h, task = run(sqlite_store, f"t{uuid.uuid4().hex[:8]}", Held(script))
    final = settle_checked(h, sqlite_store, task.id)
    assert final.status in TERMINAL, script
    woken = [e for e in sqlite_store.events(task.id) if e.type == "retry_due"]
    for event in woken:
        park = Park.of(R(event.data["park"]), resume=Status(event.data["resume"]))
        assert event.to_status is park.resume, "it woke where its reason said"


def test_leftover_keys_do_not_decide_how_a_task_wakes(store: Any, tenant: str) -> None:
    """A Retry park next to everything a throttled effect leaves behind (its pending action and
    throttle counters, the previous code's `resume`): it wakes to RUNNING, sends nothing."""
    sent: list[str] = []

    def execute(flow: Scripted, i: wf.StepInput, a: Action) -> wf.EffectOutcome:
        sent.append(a.idempotency_key)
        return wf.EffectThrottled(30, "429")

    h, task = run(store, tenant, Scripted(execute=execute))
    h.run_until_idle()
    parked = store.get(task.id)
    assert Park.model_validate(parked.state["runtime"][PARK_KEY]).reason is R.THROTTLED
    state = parked.state
    state["runtime"][PARK_KEY] = Park.of(R.RETRY, "a transient failure").entry()
    state["runtime"]["resume"] = "EXECUTING"
    rewrite(store, task.id, state)
    wake(h, task.id)
    assert sent == [f"pay:{task.id}"], "nothing resent: the reason said retry"
    assert "resend_after_throttle" not in events(store, task.id)
    (due,) = [e for e in store.events(task.id) if e.type == "retry_due"]
    assert (due.to_status, due.data["park"]) == (S.RUNNING, "retry")


# -- rows an earlier release parked -------------------------------------------------------------


def rewrite(store: Any, task_id: str, state: dict[str, Any]) -> None:
    with store.tx() as conn:
        conn.execute(update(tasks).where(tasks.c.id == task_id).values(state=state))


def wake(h: Any, task_id: str) -> None:
    h.make_due(task_id)
    h.sweepers.all()
    h.run_until_idle()


def as_written_before(runtime: dict[str, Any], **legacy: Any) -> dict[str, Any]:
    """`runtime` as the previous code stored it: no park entry, its throttle counters and
    reason in `throttle`, plus the leftover keys given."""
    out = {k: v for k, v in runtime.items() if k not in (PARK_KEY, THROTTLES_KEY)}
    return {**out, **legacy}


class Ledger:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.applied: list[str] = []
        self.lookups: list[str] = []
        self.throttle_next = True

    def execute(self, flow: Scripted, i: wf.StepInput, a: Action) -> wf.EffectOutcome:
        self.calls.append(a.idempotency_key)
        if self.throttle_next:
            self.throttle_next = False
            return wf.EffectThrottled(30, "429 slow down")
        self.applied.append(a.idempotency_key)
        return wf.EffectApplied({"ref": a.idempotency_key})

    def reconcile(self, flow: Scripted, i: wf.StepInput, a: Action) -> wf.ReconcileResult:
        self.lookups.append(a.idempotency_key)
        return (
            wf.Found({"ref": a.idempotency_key})
            if a.idempotency_key in self.applied
            else wf.NoEffect()
        )


def throttled_row(store: Any, tenant: str) -> tuple[Any, Any, Ledger]:
    ledger = Ledger()
    flow = Scripted(execute=ledger.execute, reconcile=ledger.reconcile, verify_after_effect=False)
    h, task = run(store, tenant, flow)
    h.run_until_idle()
    assert store.get(task.id).status is S.RETRY_WAIT and ledger.calls == [f"pay:{task.id}"]
    return h, task, ledger


THROTTLE = {"count": 1, "waited_s": 30.0, "reason": "429 slow down"}


@pytest.mark.parametrize("by_operator", [False, True], ids=["provider", "operator"])
def test_an_earlier_releases_throttled_row_is_shown_and_resent_with_its_key(
    store: Any, tenant: str, by_operator: bool
) -> None:
    h, task, ledger = throttled_row(store, tenant)
    row = store.get(task.id)
    throttle = {**THROTTLE, "by_operator": True} if by_operator else THROTTLE
    rewrite(
        store,
        task.id,
        {**row.state, "runtime": as_written_before(row.state["runtime"], throttle=throttle)},
    )
    view = store.get(task.id).view()
    assert view.park is not None
    assert view.park.reason is (R.HELD_BY_OPERATOR if by_operator else R.THROTTLED)
    assert (view.display_status is DisplayStatus.STOPPED_BY_OPERATOR) == by_operator
    final = h.settle(task.id)
    assert final.status is S.COMPLETED, events(store, task.id)
    assert ledger.calls == [f"pay:{task.id}"] * 2 and ledger.lookups == []
    assert events(store, task.id).count("resend_after_throttle") == 1
    assert "throttle" not in final.state["runtime"] and PARK_KEY not in final.state["runtime"]


@pytest.mark.parametrize("cancel", [False, True], ids=["woken", "cancelled"])
def test_an_earlier_releases_row_that_failed_in_executing_is_reconciled_not_resent(
    store: Any, tenant: str, cancel: bool
) -> None:
    """D1's row as the previous code left it: throttled, resent and applied, the commit of the
    outcome refused, parked with resume=EXECUTING next to the throttle."""
    h, task, ledger = throttled_row(store, tenant)
    ledger.applied.append(f"pay:{task.id}")  # the resend that went out before the failure
    row = store.get(task.id)
    legacy = as_written_before(row.state["runtime"], throttle=THROTTLE, resume="EXECUTING")
    rewrite(store, task.id, {**row.state, "runtime": legacy})
    park = store.get(task.id).view().park
    assert park is not None and (park.reason, park.resume) == (R.STEP_FAILED, S.EXECUTING)
    if cancel:
        h.orchestrator.cancel(task.id)
    final = h.settle(task.id)
    assert ledger.calls == [f"pay:{task.id}"], "never sent again on a guess"
    assert ledger.lookups == [f"pay:{task.id}"]
    (effect,) = store.effects(task.id)
    assert effect.status == "committed"
    assert final.status is (S.CANCELLED if cancel else S.COMPLETED), events(store, task.id)
    assert final.outcome is not None
    if cancel:
        assert final.outcome["effects_committed"] == [
            {"tool": "ledger.pay", "idempotency_key": f"pay:{task.id}"}
        ]


@pytest.mark.parametrize(
    ("legacy", "wakes_to"),
    [
        ({}, S.RUNNING),
        ({"resume": "VERIFYING"}, S.VERIFYING),
        ({"resume": "VERIFYING", "verify_failures": 1}, S.VERIFYING),
        ({"resume": "RECEIVED"}, S.RECEIVED),
        ({"resume": "EXECUTING"}, S.RUNNING),  # stale: nothing in flight, not a lost lease
    ],
    ids=["retry", "verify-step", "verify-error", "received", "stale-executing"],
)
def test_an_earlier_releases_retry_row_wakes_where_its_keys_meant(
    store: Any, tenant: str, legacy: dict[str, Any], wakes_to: Status
) -> None:
    decided: list[bool] = []

    def decide(flow: Scripted, i: wf.StepInput) -> wf.StepDecision:
        if not decided:
            decided.append(True)
            return wf.Retry("not yet", retry_after_s=60)
        return wf.ToVerify(i.state)

    h, task = run(store, tenant, Scripted(decide=decide))
    h.run_until_idle()
    row = store.get(task.id)
    assert row.status is S.RETRY_WAIT
    rewrite(
        store, task.id, {**row.state, "runtime": as_written_before(row.state["runtime"], **legacy)}
    )
    wake(h, task.id)
    (due,) = [e for e in store.events(task.id) if e.type == "retry_due"]
    assert due.to_status is wakes_to
    final = h.settle(task.id)
    assert final.status is S.COMPLETED, events(store, task.id)
