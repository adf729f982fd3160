"""One function per status: what the step does and which transition it asks for.

Each returns a `Patch` for the runner to commit, or None for "nothing to do" (the lease is then
released). EXECUTING is special: the intent is committed first, keeping the lease, and only then
is the effect attempted (invariant 3) — `Session.commit_keep` does that intermediate commit.

`Steps` is the one object the runner calls, one method per status. It is put together from
mixins, one module per path through the state machine:

- here: RECEIVED, RUNNING (the workflow's decision), RETRY_WAIT (woken as its park reason,
  `core.park`, says) and VERIFYING;
- `effect_steps.EffectSteps`: an action from its policy decision to its outcome (the intent,
  EXECUTING, a throttled call and its resend, EXEC_UNKNOWN and reconciliation);
- `approval_steps.ApprovalSteps`: asking for approval, APPROVAL_WAIT, revalidating a grant;
- `step_base.StepBase`: what they share (dependencies, stop, cancel, retry, a failed attempt).

A step of one mixin calls another's through `self` (`StepBase` declares the two that do). The
session (`session`) and the pure patch helpers (`patches`) are re-exported here, where the
runner, the sweepers and tests import them.
"""

from __future__ import annotations

from typing import Any

from agent_jobs.core.errors import Deferred, InvalidInput
from agent_jobs.core.park import PARK_KEY, Park, ParkReason, park_of, resume_status
from agent_jobs.core.patch import Patch
from agent_jobs.core.retry import backoff_s
from agent_jobs.core.states import Status
from agent_jobs.core.text import cut
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.orchestrator.approval_steps import ApprovalSteps
from agent_jobs.orchestrator.effect_steps import EffectSteps
from agent_jobs.orchestrator.patches import (
    WORKER_LOST,
    action_summary,
    error_text,
    failed_attempt,
    lease_lost,
    note,
    with_runtime,
    worker_lost,
)
from agent_jobs.orchestrator.session import Session, resumed_from
from agent_jobs.orchestrator.step_base import StepBase, log

__all__ = [
    "WORKER_LOST",
    "Session",
    "StepBase",
    "Steps",
    "action_summary",
    "error_text",
    "failed_attempt",
    "lease_lost",
    "note",
    "resume_status",
    "resumed_from",
    "with_runtime",
    "worker_lost",
]

S = Status


class Steps(EffectSteps, ApprovalSteps):
    # -- RECEIVED --------------------------------------------------------------------------

    def received(self, s: Session) -> Patch:
        if s.task.cancel_requested:
            return self.cancelled(s)
        try:
            state = s.workflow.start(s.inp())
        except InvalidInput as exc:
            return self.stop(s, f"invalid input: {exc}")
        runtime = {"steps": 0, "notes": []}
        return Patch(to=S.RUNNING, event="started", state=with_runtime(state, {}, runtime))

    # -- RUNNING ---------------------------------------------------------------------------

    def running(self, s: Session) -> Patch:
        if s.task.cancel_requested:
            return self.cancelled(s)
        rt = s.runtime()
        rt["steps"] = int(rt.get("steps", 0)) + 1
        if rt["steps"] > self.settings.max_steps:
            return self.stop(s, "step budget exhausted", prefer=S.ESCALATED)
        try:
            decision = s.workflow.decide(s.inp())
        except Deferred:
            raise  # not a failure: the runner holds the task until the resource frees
        except Exception as exc:
            log.exception("decide failed for %s", s.task.id)
            return self.retry(s, f"decide raised {type(exc).__name__}: {exc}", None)
        if isinstance(decision, wf.Observe):
            return Patch(
                to=S.RUNNING,
                event="observed",
                data={"note": decision.note},
                state=with_runtime(decision.state, s.task.state, rt),
                attempts=0,
            )
        if isinstance(decision, wf.ToVerify):
            return Patch(
                to=S.VERIFYING,
                event="draft_ready",
                state=with_runtime(decision.state, s.task.state, rt),
                attempts=0,
            )
        if isinstance(decision, wf.Retry):
            s_state = with_runtime(decision.state, s.task.state, rt)
            return self.retry(s, decision.reason, s_state, decision.retry_after_s)
        if isinstance(decision, wf.Escalate):
            return Patch(
                to=S.ESCALATED,
                event="escalated",
                data={"reason": decision.reason},
                state=with_runtime(decision.state, s.task.state, rt),
                outcome={"reason": decision.reason},
            )
        if isinstance(decision, wf.Fail):
            return Patch(
                to=S.FAILED,
                event="failed",
                data={"reason": decision.reason},
                state=with_runtime(decision.state, s.task.state, rt),
                outcome={"reason": decision.reason},
            )
        return self.act(s, decision, rt)

    # -- RETRY_WAIT and VERIFYING ----------------------------------------------------------

    def retry_wait(self, s: Session) -> Patch:
        """Wake as the park reason says, and only as it says (invariant 12); the entry is
        cleared on waking. A cancel ends the task unless waking must first resolve an effect
        whose outcome is unknown."""
        rt = s.runtime()
        park = park_of(S.RETRY_WAIT, rt)
        assert park is not None  # `s.runtime()` gives a RETRY_WAIT row its park entry
        if s.task.cancel_requested and park.cancellable:
            return self.cancelled(s, park)
        del rt[PARK_KEY]
        if park.resends:
            return self.resend_after_throttle(s, rt)
        return Patch(
            to=park.resume,
            event="retry_due",
            data={"attempt": s.task.attempts, "park": park.reason.value, "resume": park.resume},
            state=with_runtime(None, s.task.state, rt),
        )

    def verifying(self, s: Session) -> Patch:
        rt = s.runtime()
        try:
            verdict = s.workflow.verify(s.inp())
        except Deferred:
            raise
        except Exception as exc:
            log.exception("verify raised for %s", s.task.id)
            return self.verify_failed(s, rt, exc)
        rt.pop("verify_failures", None)
        if isinstance(verdict, wf.Complete):
            outcome = dict(verdict.outcome)
            if s.task.cancel_requested:
                outcome["cancel_requested_too_late"] = True
            return Patch(
                to=S.COMPLETED,
                event="completed",
                data={"verified": True},
                state=with_runtime(verdict.state, s.task.state, rt),
                outcome=outcome,
            )
        if isinstance(verdict, wf.Redraft):
            redrafts = int(rt.get("redrafts", 0)) + 1
            rt["redrafts"] = redrafts
            if redrafts > self.settings.max_attempts:
                return Patch(
                    to=S.ESCALATED,
                    event="redraft_exhausted",
                    data={"reason": cut(verdict.reason, 200), "redrafts": redrafts - 1},
                    state=with_runtime(verdict.state, s.task.state, rt),
                    outcome={"reason": "the draft kept failing verification"},
                )
            note(rt, "redraft", reason=verdict.reason)
            return Patch(
                to=S.RUNNING,
                event="redraft",
                data={"reason": verdict.reason[:200]},
                state=with_runtime(verdict.state, s.task.state, rt),
            )
        return Patch(
            to=S.ESCALATED,
            event="escalated",
            data={"reason": verdict.reason},
            state=with_runtime(verdict.state, s.task.state, rt),
            outcome={"reason": verdict.reason},
        )

    def verify_failed(self, s: Session, rt: dict[str, Any], exc: Exception) -> Patch:
        """A verifier that raises is retried in VERIFYING with backoff (not bounced through
        RUNNING, where a read step would reset the count), then escalated."""
        error = error_text(exc)
        failures = int(rt.get("verify_failures", 0)) + 1
        rt["verify_failures"] = failures
        if failures >= self.settings.max_attempts:
            return Patch(
                to=S.ESCALATED,
                event="verify_exhausted",
                data={"reason": cut(error, 200), "attempts": failures},
                state=with_runtime(None, s.task.state, rt),
                last_error=error,
                outcome={"reason": "verification kept failing", "error": error},
            )
        delay = backoff_s(
            failures, self.settings.retry_base_s, self.settings.retry_max_s, self.rand() * 0.999
        )
        rt[PARK_KEY] = Park.of(ParkReason.VERIFY_ERROR, error).entry()
        return Patch(
            to=S.RETRY_WAIT,
            event="verify_error",
            data={"error": cut(error, 200), "attempt": failures, "retry_in_s": round(delay, 3)},
            state=with_runtime(None, s.task.state, rt),
            last_error=error,
            wake_in_s=delay,
        )
