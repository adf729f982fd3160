"""Deliberate bugs in the effect path, to measure the simulator: each mutant is a small change a
careless edit could make (or one the review of issue 29 found, put back), switched on for a run
(`agent-jobs simulate --mutant NAME`). An oracle that never fails under a mutant has a blind
spot; `tests/simulation/test_mutants.py` holds each to a schedule count.

A mutant replaces one method or function for as long as `active(name)` lasts: the runtime's
code is otherwise the code under test, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from typing import Any

from agent_jobs.core.contracts import Action
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.orchestrator.approval_steps import ApprovalSteps
from agent_jobs.orchestrator.effect_steps import EffectSteps
from agent_jobs.orchestrator.step_base import StepBase
from agent_jobs.store.store import Store


@contextmanager
def _replaced(owner: Any, name: str, make: Callable[[Any], Any]) -> Iterator[None]:
    original = (
        owner.__dict__[name] if name in getattr(owner, "__dict__", {}) else getattr(owner, name)
    )
    setattr(owner, name, make(original))
    try:
        yield
    finally:
        setattr(owner, name, original)


def skip_reconcile() -> Any:
    """An unknown outcome is retried with the same key without looking it up first."""

    def make(original: Any) -> Any:
        def exec_unknown(self: EffectSteps, s: Any) -> Any:
            rt = s.runtime()
            return self.not_found(s, Action.model_validate(rt["pending_action"]), rt)

        return exec_unknown

    return _replaced(EffectSteps, "exec_unknown", make)


def found_ignored() -> Any:
    """Reconcile finds the effect, and the task acts as if it had found nothing."""

    def make(original: Any) -> Any:
        def exec_unknown(self: EffectSteps, s: Any) -> Any:
            real = s.workflow.reconcile

            def reconcile(inp: Any, action: Action) -> Any:
                found = real(inp, action)
                return wf.NoEffect() if isinstance(found, wf.Found) else found

            s.workflow = _With(s.workflow, reconcile=reconcile)
            return original(self, s)

        return exec_unknown

    return _replaced(EffectSteps, "exec_unknown", make)


def found_in_other_shape() -> Any:
    """Defect D4: an effect found by its key is recorded in another shape than one applied."""

    def make(original: Any) -> Any:
        def exec_unknown(self: EffectSteps, s: Any) -> Any:
            real = s.workflow.reconcile

            def reconcile(inp: Any, action: Action) -> Any:
                found = real(inp, action)
                if isinstance(found, wf.Found):
                    return wf.Found({"content": [], "structured": found.result})
                return found

            s.workflow = _With(s.workflow, reconcile=reconcile)
            return original(self, s)

        return exec_unknown

    return _replaced(EffectSteps, "exec_unknown", make)


def resend_unauthorised() -> Any:
    """Defect D2: a resend (after a throttle, after reconcile found nothing) is not asked of
    the policy and the levers again."""
    return _replaced(ApprovalSteps, "authorize_resend", lambda original: lambda *a, **k: None)


def send_before_intent() -> Any:
    """The effect is sent before its intent is committed."""

    def make(original: Any) -> Any:
        def execute_after(self: EffectSteps, s: Any, intent: Any, action: Action) -> Any:
            outcome = s.workflow.execute(s.execute_input(action), action)
            s.lease = s.commit_keep(intent)
            return self.effect_outcome(s, action, outcome)

        return execute_after

    return _replaced(EffectSteps, "execute_after", make)


def unknown_as_rejected() -> Any:
    """A timeout after sending is taken for a definitive refusal (not applied)."""

    def make(original: Any) -> Any:
        def effect_outcome(self: EffectSteps, s: Any, action: Action, outcome: Any) -> Any:
            if isinstance(outcome, wf.EffectUnknown):
                outcome = wf.EffectRejected("timeout", outcome.reason)
            return original(self, s, action, outcome)

        return effect_outcome

    return _replaced(EffectSteps, "effect_outcome", make)


def new_key_on_retry() -> Any:
    """The retry after "reconcile found nothing" goes out under a new key (the attempt's)."""

    def make(original: Any) -> Any:
        def not_found(self: EffectSteps, s: Any, action: Action, rt: dict[str, Any]) -> Any:
            fresh = action.model_copy(
                update={"idempotency_key": f"{action.idempotency_key}:{s.task.version}"}
            )
            rt["pending_action"] = fresh.model_dump(mode="json")
            return original(self, s, fresh, rt)

        return not_found

    return _replaced(EffectSteps, "not_found", make)


def failed_lookup_as_not_found() -> Any:
    """A lookup that failed (the system did not answer) is read as "nothing under the key"."""

    def make(original: Any) -> Any:
        def exec_unknown(self: EffectSteps, s: Any) -> Any:
            real = s.workflow.reconcile

            def reconcile(inp: Any, action: Action) -> Any:
                try:
                    found = real(inp, action)
                except Exception:
                    return wf.NoEffect()
                return wf.NoEffect() if isinstance(found, wf.LookupFailed) else found

            s.workflow = _With(s.workflow, reconcile=reconcile)
            return original(self, s)

        return exec_unknown

    return _replaced(EffectSteps, "exec_unknown", make)


def approval_skipped() -> Any:
    """`needs_approval` is read as `allow`."""

    def make(original: Any) -> Any:
        def authorize(self: StepBase, s: Any, action: Action) -> Any:
            auth = original(self, s, action)
            return replace(auth, kind="allow") if auth.kind == "needs_approval" else auth

        return authorize

    return _replaced(StepBase, "authorize", make)


def terminal_keeps_lease() -> Any:
    """A task's last commit keeps its lease (the rows defect D6's sweeper choked on)."""

    def make(original: Any) -> Any:
        def transition(self: Store, guard: Any, patch: Any, *args: Any, **kwargs: Any) -> Any:
            if patch.terminal:
                patch = replace(patch, keep_lease=True)
            return original(self, guard, patch, *args, **kwargs)

        return transition

    return _replaced(Store, "transition", make)


def no_epoch_fence() -> Any:
    """A step's commit is fenced on the row's version only, not on its lease: a worker whose
    lease lapsed and was taken over commits what it computed from a stale read."""

    def make(original: Any) -> Any:
        def transition(self: Store, guard: Any, patch: Any, *args: Any, **kwargs: Any) -> Any:
            current = self.get(guard.task.id)
            if current.lease_epoch != guard.epoch and current.version == guard.task.version:
                guard = replace(guard, epoch=current.lease_epoch, owner=current.lease_owner)
            elif current.lease_epoch != guard.epoch:
                task = replace(guard.task, version=current.version)
                guard = replace(
                    guard, task=task, epoch=current.lease_epoch, owner=current.lease_owner
                )
            return original(self, guard, patch, *args, **kwargs)

        return transition

    return _replaced(Store, "transition", make)


def failed_effect_step_parks() -> Any:
    """Defect D1 as the review found it, in today's terms: a step that fails in EXECUTING after
    its intent committed parks in RETRY_WAIT to run EXECUTING again (not in EXEC_UNKNOWN for a
    reconcile read), its park read off what the runtime entry still holds (a throttle's count
    left by a resend: parked as throttled), and the RETRY_WAIT step honours a cancel before
    anything else. A throttled resend then goes out again with no reconcile, and a cancel in
    that window ends the task with its effect, perhaps applied, still `intent`. (Only the park
    put back would be an equivalent mutant: today a park that resumes EXECUTING is not
    cancellable, and only a throttle's park resends.)"""
    from agent_jobs.core.park import PARK_KEY, THROTTLES_KEY, Park, ParkReason, park_of  # noqa: PLC0415
    from agent_jobs.core.patch import Patch  # noqa: PLC0415
    from agent_jobs.core.states import Status  # noqa: PLC0415
    from agent_jobs.orchestrator import patches  # noqa: PLC0415
    from agent_jobs.orchestrator.steps import Steps  # noqa: PLC0415

    def parks(original: Any) -> Any:
        def outcome_unknown(task: Any, rt: Any, error: str, attempt: int, delay: float) -> Any:
            if rt.get(THROTTLES_KEY):
                park = Park.of(ParkReason.THROTTLED, error)
            else:
                park = Park.of(ParkReason.STEP_FAILED, error, resume=Status.EXECUTING)
            rt[PARK_KEY] = park.entry()
            return Patch(
                to=Status.RETRY_WAIT,
                event="step_failed",
                data={"error": error, "attempt": attempt},
                state=patches.with_runtime(None, task.state, rt),
                attempts=attempt,
                last_error=error,
                wake_in_s=delay,
            )

        return outcome_unknown

    def cancel_first(original: Any) -> Any:
        def retry_wait(self: Any, s: Any) -> Any:
            park = park_of(Status.RETRY_WAIT, s.runtime())
            if s.task.cancel_requested and park is not None:
                return self.cancelled(s, park)
            return original(self, s)

        return retry_wait

    return _all(
        _replaced(patches, "_outcome_unknown", parks), _replaced(Steps, "retry_wait", cancel_first)
    )


def decision_dropped_while_leased() -> Any:
    """Defect D5: an approval decided while a step holds the task's lease loses its wake-up
    (the step gives the lease back and publishes nothing): the task waits for the sweeper."""

    def make(original: Any) -> Any:
        def release_step(self: Store, lease: Any) -> Any:
            self.release(lease)
            return None

        return release_step

    return _replaced(Store, "release_step", make)


@contextmanager
def _all(*replacements: Any) -> Iterator[None]:
    with ExitStack() as stack:
        for replacement in replacements:
            stack.enter_context(replacement)
        yield


def carried_cas_split() -> Any:
    """Defect D3, half a transition (Postgres only): with a carried row, the step's connection
    is chosen for a one-statement compare-and-set, but the pinned CAS writes the row alone and
    its record (an approval asked for, an effect's outcome) in a statement of its own: the two
    commit separately, and a crash between them leaves the row without its record."""
    from agent_jobs.store.backend import postgres  # noqa: PLC0415

    def make(original: Any) -> Any:
        def cas_form(guard: Any, patch: Any, *, returning: bool) -> Any:
            form = original(guard, patch, returning=returning)
            if guard.seq is not None or guard.unheld:
                return replace(form, whole=True)
            return form

        return cas_form

    return _replaced(postgres, "cas_form", make)


class _With:
    """A workflow with one hook replaced (the rest are the workflow's own)."""

    def __init__(self, inner: Any, **hooks: Any) -> None:
        self._inner = inner
        self._hooks = hooks

    def __getattr__(self, name: str) -> Any:
        return self._hooks.get(name) or getattr(self._inner, name)


MUTANTS: dict[str, Callable[[], Any]] = {
    "skip_reconcile": skip_reconcile,
    "found_ignored": found_ignored,
    "found_in_other_shape": found_in_other_shape,
    "resend_unauthorised": resend_unauthorised,
    "send_before_intent": send_before_intent,
    "unknown_as_rejected": unknown_as_rejected,
    "new_key_on_retry": new_key_on_retry,
    "failed_lookup_as_not_found": failed_lookup_as_not_found,
    "approval_skipped": approval_skipped,
    "terminal_keeps_lease": terminal_keeps_lease,
    "no_epoch_fence": no_epoch_fence,
    "failed_effect_step_parks": failed_effect_step_parks,
    "decision_dropped_while_leased": decision_dropped_while_leased,
    "carried_cas_split": carried_cas_split,
}
# The defects of issue 29's review, put back (D2 and D4 are mutants above too).
DEFECTS = {
    "D1 blind resend": "failed_effect_step_parks",
    "D2 a lever bypassed": "resend_unauthorised",
    "D4 a correct effect escalated": "found_in_other_shape",
    "D5 a slow grant": "decision_dropped_while_leased",
    "D6 a poison row (its precondition)": "terminal_keeps_lease",
    "D3 half a transition": "carried_cas_split",
}


@contextmanager
def active(name: str | None) -> Iterator[None]:
    """Run with mutant `name` in place (None: the code as it is)."""
    with ExitStack() as stack:
        if name is not None:
            stack.enter_context(MUTANTS[name]())
        yield
