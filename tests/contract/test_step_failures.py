"""Every failure is bounded (issue 9, point 1), on both backends.

Any exception that escapes a step — a hook, a write the database refuses, a bug — is a failed
attempt recorded on the task row (`attempts`, `last_error`), parked with backoff, and after
`max_attempts` consecutive failures a dead letter whose checkpoint is intact. Verify and redraft
loops are bounded; reconcile counters are per effect; a throttled effect waits with the same key;
a task that ends after an effect committed says so. Each test names the event it makes happen.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import update

from agent_jobs.core.contracts import Action, TaskRequest
from agent_jobs.core.states import TERMINAL, Status
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.orchestrator.steps import resume_status
from agent_jobs.store.schema import tasks
from agent_jobs.store.types import db_now
from agent_jobs.testing import TEST_SETTINGS, Harness

S = Status
Hook = Callable[["Scripted", wf.StepInput], Any]


class Boom(RuntimeError):
    pass


class Scripted:
    """A workflow whose hooks do what the test says: by default one read, one effect, verify."""

    name = "scripted"
    version = 1

    def __init__(self, **hooks: Any) -> None:
        self.hooks = hooks
        self.calls: dict[str, int] = {}

    def _hook(self, name: str, default: Any, *args: Any) -> Any:
        self.calls[name] = self.calls.get(name, 0) + 1
        hook = self.hooks.get(name)
        if hook is None:
            return default(*args)
        return hook(self, *args)

    def pinned(self) -> dict[str, Any]:
        return {}

    def start(self, inp: wf.StepInput) -> dict[str, Any]:
        return self._hook("start", lambda i: {"phase": "read"}, inp)  # type: ignore[no-any-return]

    def decide(self, inp: wf.StepInput) -> wf.StepDecision:
        def default(i: wf.StepInput) -> wf.StepDecision:
            phase = i.state.get("phase")
            if phase == "read":
                return wf.Observe({**i.state, "phase": "act", "read": "ok"})
            if phase == "act":
                return wf.Act(action(i.task_id), {**i.state, "phase": "done"})
            return wf.ToVerify(i.state)

        return self._hook("decide", default, inp)  # type: ignore[no-any-return]

    def authorize(self, inp: wf.StepInput, act: Action) -> wf.Authorization:
        return self._hook(  # type: ignore[no-any-return]
            "authorize", lambda i, a: wf.Authorization("allow", "P@1"), inp, act
        )

    def execute(self, inp: wf.StepInput, act: Action) -> wf.EffectOutcome:
        return self._hook("execute", lambda i, a: wf.EffectApplied({"ref": "r1"}), inp, act)  # type: ignore[no-any-return]

    def reconcile(self, inp: wf.StepInput, act: Action) -> wf.ReconcileResult:
        return self._hook("reconcile", lambda i, a: wf.NoEffect(), inp, act)  # type: ignore[no-any-return]

    def after_effect(
        self, inp: wf.StepInput, act: Action, result: dict[str, Any]
    ) -> wf.AfterEffect:
        verify = self.hooks.get("verify_after_effect", True)
        return wf.AfterEffect({**inp.state, "result": result}, verify=verify)

    def verify(self, inp: wf.StepInput) -> wf.Verdict:
        return self._hook("verify", lambda i: wf.Complete({"ok": True}), inp)  # type: ignore[no-any-return]


def action(task_id: str) -> Action:
    return Action(
        tool="ledger.pay", tool_version="1", args={"n": 1}, idempotency_key=f"pay:{task_id}"
    )


def run(store: Any, tenant: str, workflow: Scripted, **kw: Any) -> tuple[Harness, Any]:
    registry = WorkflowRegistry()
    registry.register(workflow)
    h = Harness(store, registry, **kw)
    task = h.submit(tenant, "k1", TaskRequest(workflow="scripted@1"))
    return h, task


def events(store: Any, task_id: str) -> list[str]:
    return [e.type for e in store.events(task_id)]


def raises(exc: BaseException) -> Hook:
    def hook(self: Scripted, *args: Any) -> Any:
        raise exc

    return hook


# -- any exception that escapes a step --------------------------------------------------------


def test_a_start_that_raises_is_a_failed_attempt_then_dead_lettered_with_the_error_on_the_row(
    store: Any, tenant: str
) -> None:
    h, task = run(store, tenant, Scripted(start=raises(Boom("cannot start\x00"))))
    h.run_until_idle()
    parked = store.get(task.id)
    assert parked.status is S.RETRY_WAIT, "a failed attempt parks, it does not loop"
    assert parked.attempts == 1
    assert parked.last_error is not None and parked.last_error.startswith("Boom: cannot start")
    assert parked.next_attempt_at is not None
    assert "step_failed" in events(store, task.id)
    final = h.settle(task.id)
    assert final.status is S.FAILED
    assert final.attempts == TEST_SETTINGS.max_attempts
    assert "dead_lettered" in events(store, task.id)
    assert final.outcome is not None and final.outcome["dead_letter"] is True
    dead = store.dead_letters(final.tenant_id)
    assert [d.task_id for d in dead] == [task.id]


def test_a_write_the_database_refuses_is_counted_and_the_checkpoint_stays_intact(
    store: Any, tenant: str
) -> None:
    """A read step whose new state cannot be written (here: not JSON at all, a bug) fails the
    commit; the failure is recorded without that state, and the last checkpoint is kept."""

    def bad_read(self: Scripted, i: wf.StepInput) -> wf.StepDecision:
        if i.state.get("phase") == "read":
            return wf.Observe({**i.state, "unwritable": {1, 2}})  # a set: no JSON for it
        return wf.ToVerify(i.state)

    h, task = run(store, tenant, Scripted(decide=bad_read))
    final = h.settle(task.id)
    assert final.status is S.FAILED
    assert final.state.get("phase") == "read", "the checkpoint is the last one committed"
    assert "unwritable" not in final.state
    names = events(store, task.id)
    assert names.count("step_failed") == TEST_SETTINGS.max_attempts - 1
    assert names[-1] == "dead_lettered"
    assert final.last_error is not None and "TypeError" in final.last_error


def test_progress_resets_the_count_of_consecutive_failures(store: Any, tenant: str) -> None:
    failures = {"left": TEST_SETTINGS.max_attempts - 1}

    def flaky_start(self: Scripted, i: wf.StepInput) -> dict[str, Any]:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise Boom("transient")
        return {"phase": "read"}

    h, task = run(store, tenant, Scripted(start=flaky_start))
    final = h.settle(task.id)
    assert final.status is S.COMPLETED
    assert final.last_error is None, "a step that made progress clears the error"
    assert final.attempts == 0


def test_a_failure_while_awaiting_approval_parks_in_place_and_keeps_the_approval(
    store: Any, tenant: str
) -> None:
    approve = Scripted(authorize=lambda self, i, a: wf.Authorization("needs_approval", "P@1"))
    h, task = run(store, tenant, approve)
    h.run_until_idle()
    waiting = store.get(task.id)
    assert waiting.status is S.APPROVAL_WAIT
    # The approval row vanishes under the step (a bug elsewhere): the step raises NotFound.
    approval_id = waiting.state["runtime"]["approval_id"]
    waiting.state["runtime"]["approval_id"] = "apr_missing"
    with store.tx() as conn:
        conn.execute(
            update(tasks)
            .where(tasks.c.id == task.id)
            .values(state=waiting.state, next_attempt_at=db_now(), dispatched_at=None)
        )
    h.publisher.publish(type(h.publisher.published[0])(task.id, task.tenant_id))
    h.run_until_idle()
    after = store.get(task.id)
    assert after.status is S.APPROVAL_WAIT
    assert after.attempts == 1 and after.last_error is not None
    assert "NotFound" in after.last_error
    assert events(store, task.id)[-1] == "step_failed"
    assert approval_id != "apr_missing"


# -- verify and redraft loops -----------------------------------------------------------------


def test_a_verifier_that_raises_backs_off_in_verifying_then_escalates(
    store: Any, tenant: str
) -> None:
    h, task = run(store, tenant, Scripted(verify=raises(Boom("verifier down"))))
    h.run_until_idle()
    parked = store.get(task.id)
    assert parked.status is S.RETRY_WAIT
    assert parked.state["runtime"]["park"]["reason"] == "verify_error"
    assert parked.state["runtime"]["park"]["resume"] == "VERIFYING"
    assert "verify_error" in events(store, task.id)
    final = h.settle(task.id)
    assert final.status is S.ESCALATED
    names = events(store, task.id)
    assert names[-1] == "verify_exhausted"
    assert names.count("verify_error") == TEST_SETTINGS.max_attempts - 1
    # It never went back through RUNNING (where a read step would have reset the count).
    verifies = h.orchestrator.workflows.get("scripted@1").calls["verify"]  # type: ignore[attr-defined]
    assert verifies == TEST_SETTINGS.max_attempts
    assert final.outcome is not None
    assert final.outcome["effects_committed"] == [
        {"tool": "ledger.pay", "idempotency_key": f"pay:{task.id}"}
    ], "the escalation says the effect happened"


def test_a_draft_that_never_verifies_is_escalated_after_bounded_redrafts(
    store: Any, tenant: str
) -> None:
    h, task = run(
        store, tenant, Scripted(verify=lambda self, i: wf.Redraft("claim unverified", i.state))
    )
    final = h.settle(task.id)
    assert final.status is S.ESCALATED
    names = events(store, task.id)
    assert names.count("redraft") == TEST_SETTINGS.max_attempts
    assert names[-1] == "redraft_exhausted"


# -- reconcile counters are per effect -------------------------------------------------------


def test_reconcile_failures_of_one_effect_do_not_count_against_the_next(
    store: Any, tenant: str
) -> None:
    """Two effects, each with max-1 failed lookups before it is found: neither escalates."""
    lookups: dict[str, int] = {}

    def decide(self: Scripted, i: wf.StepInput) -> wf.StepDecision:
        n = int(i.state.get("effects", 0))
        if n < 2:
            a = Action(
                tool="ledger.pay", tool_version="1", args={"n": n}, idempotency_key=f"pay:{n}"
            )
            return wf.Act(a, {**i.state, "effects": n + 1})
        return wf.ToVerify(i.state)

    def reconcile(self: Scripted, i: wf.StepInput, a: Action) -> wf.ReconcileResult:
        seen = lookups.get(a.idempotency_key, 0) + 1
        lookups[a.idempotency_key] = seen
        if seen < TEST_SETTINGS.max_reconcile_attempts:
            return wf.LookupFailed("ledger down")
        return wf.Found({"ref": a.idempotency_key})

    h, task = run(
        store,
        tenant,
        Scripted(
            decide=decide,
            execute=lambda self, i, a: wf.EffectUnknown("timeout"),
            reconcile=reconcile,
            verify_after_effect=False,
        ),
    )
    final = h.settle(task.id, max_rounds=100)
    assert final.status is S.COMPLETED
    names = events(store, task.id)
    assert names.count("reconcile_failed") == 2 * (TEST_SETTINGS.max_reconcile_attempts - 1)
    assert names.count("reconciled_found") == 2
    assert "reconcile_exhausted" not in names


def test_a_lookup_that_keeps_failing_escalates(store: Any, tenant: str) -> None:
    h, task = run(
        store,
        tenant,
        Scripted(
            execute=lambda self, i, a: wf.EffectUnknown("timeout"),
            reconcile=lambda self, i, a: wf.LookupFailed("down"),
        ),
    )
    final = h.settle(task.id)
    assert final.status is S.ESCALATED
    assert events(store, task.id)[-1] == "reconcile_exhausted"


def test_an_effect_found_but_different_escalates(store: Any, tenant: str) -> None:
    h, task = run(
        store,
        tenant,
        Scripted(
            execute=lambda self, i, a: wf.EffectUnknown("timeout"),
            reconcile=lambda self, i, a: wf.Different("amount 500, intent 100"),
        ),
    )
    final = h.settle(task.id)
    assert final.status is S.ESCALATED
    assert "reconciled_different" in events(store, task.id)


# -- throttling is not an unknown outcome ----------------------------------------------------


def test_a_throttled_effect_waits_and_is_resent_with_the_same_key(store: Any, tenant: str) -> None:
    answers = [
        wf.EffectThrottled(0.2, "429 Too Many Requests"),
        wf.EffectThrottled(None, "503"),
        wf.EffectApplied({}),
    ]

    def execute(self: Scripted, i: wf.StepInput, a: Action) -> wf.EffectOutcome:
        return answers.pop(0)

    h, task = run(store, tenant, Scripted(execute=execute))
    h.run_until_idle()
    parked = store.get(task.id)
    assert parked.status is S.RETRY_WAIT, "not EXEC_UNKNOWN: nothing was applied"
    assert parked.next_attempt_at is not None
    final = h.settle(task.id)
    assert final.status is S.COMPLETED
    names = events(store, task.id)
    assert names.count("effect_throttled") == 2
    assert names.count("resend_after_throttle") == 2
    assert "effect_unknown" not in names and "reconcile_failed" not in names
    (effect,) = store.effects(task.id)
    assert effect.status == "committed"
    assert effect.attempts == 1, "a throttled call is not a send of the key"


def test_an_approved_action_throttled_is_resent_under_the_same_approval(
    store: Any, tenant: str
) -> None:
    answers = [wf.EffectThrottled(0.1, "429"), wf.EffectApplied({})]
    h, task = run(
        store,
        tenant,
        Scripted(
            authorize=lambda self, i, a: wf.Authorization("needs_approval", "P@1"),
            execute=lambda self, i, a: answers.pop(0),
        ),
    )
    h.run_until_idle()
    waiting = store.get(task.id)
    (approval,) = store.list_approvals(tenant)
    h.orchestrator.decide_approval(approval.approval_id, "boss", grant=True)
    final = h.settle(waiting.id)
    assert final.status is S.COMPLETED
    assert store.approval(approval.approval_id).status == "used"


def test_throttling_past_its_bound_escalates_with_the_reason(store: Any, tenant: str) -> None:
    bounded = TEST_SETTINGS.with_overrides(throttle_max_wait_s=1.0)
    h, task = run(
        store,
        tenant,
        Scripted(execute=lambda self, i, a: wf.EffectThrottled(0.4, "429 slow down")),
        settings=bounded,
    )
    final = h.settle(task.id)
    assert final.status is S.ESCALATED
    assert events(store, task.id)[-1] == "throttle_exhausted"
    assert final.outcome is not None and "throttled" in final.outcome["reason"]
    (effect,) = store.effects(task.id)
    assert effect.status == "failed", "the system of record said it applied nothing"


def test_a_cancel_during_a_throttle_wait_cancels_and_closes_the_intent(
    store: Any, tenant: str
) -> None:
    h, task = run(store, tenant, Scripted(execute=lambda self, i, a: wf.EffectThrottled(30, "429")))
    h.run_until_idle()
    assert store.get(task.id).status is S.RETRY_WAIT
    h.orchestrator.cancel(task.id)
    final = h.settle(task.id)
    assert final.status is S.CANCELLED
    (effect,) = store.effects(task.id)
    assert effect.status == "failed"


# -- a cancellation after an effect committed says so ---------------------------------------


def test_a_cancel_after_the_effect_committed_ends_with_the_effect_in_the_outcome(
    store: Any, tenant: str
) -> None:
    holder: dict[str, Any] = {}

    def execute(self: Scripted, i: wf.StepInput, a: Action) -> wf.EffectOutcome:
        holder["h"].orchestrator.cancel(i.task_id)  # the cancel arrives while the call is out
        return wf.EffectApplied({"ref": "r1"})

    wf_ = Scripted(
        execute=execute,
        verify_after_effect=False,
        # After the effect, keep working (no verify yet), so the cancel is seen in RUNNING.
        decide=lambda self, i: (
            wf.Act(action(i.task_id), {**i.state, "phase": "done"})
            if i.state.get("phase") != "done"
            else wf.ToVerify(i.state)
        ),
    )
    h, task = run(store, tenant, wf_)
    holder["h"] = h
    final = h.settle(task.id)
    assert final.status is S.CANCELLED
    assert final.outcome is not None
    assert final.outcome["cancelled"] is True
    assert final.outcome["effects_committed"] == [
        {"tool": "ledger.pay", "idempotency_key": f"pay:{task.id}"}
    ]
    assert "stand" in final.outcome["reason"]


# -- no sequence of hook failures leaves a task runnable forever ----------------------------


class Chaotic(Scripted):
    """Every hook takes its next behaviour from one script, then behaves."""

    def __init__(self, script: list[str]) -> None:
        super().__init__()
        self.plan = list(script)

    def nxt(self, where: str) -> str:
        what = self.plan.pop(0) if self.plan else "ok"
        if what == "raise":
            raise Boom(where)
        return what

    def start(self, inp: wf.StepInput) -> dict[str, Any]:
        self.nxt("start")
        return {"phase": "read"}

    def decide(self, inp: wf.StepInput) -> wf.StepDecision:
        if self.nxt("decide") == "retry":
            return wf.Retry("transient")
        return super().decide(inp)

    def execute(self, inp: wf.StepInput, act: Action) -> wf.EffectOutcome:
        what = self.nxt("execute")
        if what == "unknown":
            return wf.EffectUnknown("timeout")
        if what == "throttle":
            return wf.EffectThrottled(0.01, "429")
        return wf.EffectApplied({})

    def reconcile(self, inp: wf.StepInput, act: Action) -> wf.ReconcileResult:
        if self.nxt("reconcile") == "lookup_failed":
            return wf.LookupFailed("down")
        return wf.NoEffect()

    def verify(self, inp: wf.StepInput) -> wf.Verdict:
        if self.nxt("verify") == "retry":
            return wf.Redraft("again", inp.state)
        return wf.Complete({})


FAILURES = st.sampled_from(["ok", "raise", "retry", "unknown", "lookup_failed", "throttle"])


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=st.lists(FAILURES, min_size=0, max_size=60))
def test_no_sequence_of_hook_failures_leaves_a_task_runnable_forever(
    sqlite_store: Any, script: list[str]
) -> None:
    """Every hook draws its next behaviour from one generated script (then behaves). Whatever
    the script, the task reaches a terminal state within a bounded number of rounds."""
    flow = Chaotic(script)
    h, task = run(sqlite_store, f"t{uuid.uuid4().hex[:8]}", flow)
    final = h.settle(task.id, max_rounds=400)
    assert final.status in TERMINAL, f"still {final.status} after the script {script}"
    assert len(events(sqlite_store, task.id)) < 400


@pytest.mark.parametrize("status", [S.RECEIVED, S.RUNNING, S.VERIFYING, S.EXECUTING])
def test_retry_wait_resumes_where_the_step_failed(status: Status) -> None:
    assert resume_status(status.value) is status
    assert resume_status("COMPLETED") is S.RUNNING, "never resumes into a terminal status"
    assert resume_status("garbage") is S.RUNNING


def test_an_operator_hold_waits_past_the_throttle_bound_and_never_escalates(
    store: Any, tenant: str
) -> None:
    """Effects stopped by an operator come back as a throttle `by_operator`: the task waits
    as long as the switch is on, however long that is, then acts."""
    bounded = TEST_SETTINGS.with_overrides(throttle_max_wait_s=1.0)
    answers = [wf.EffectThrottled(0.6, "effects stopped by operator", by_operator=True)] * 5
    answers.append(wf.EffectApplied({}))

    def execute(self: Scripted, i: wf.StepInput, a: Action) -> wf.EffectOutcome:
        return answers.pop(0)

    h, task = run(store, tenant, Scripted(execute=execute), settings=bounded)
    final = h.settle(task.id)
    assert final.status is S.COMPLETED, "3 s of operator holds against a 1 s bound"
    names = events(store, task.id)
    assert names.count("effect_throttled") == 5
    assert "throttle_exhausted" not in names
