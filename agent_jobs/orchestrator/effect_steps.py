"""The effect path: from an action the workflow decided to its outcome (`EffectSteps`).

`act` asks the policy and records the intent; EXECUTING commits it first, keeping the lease, and
only then calls the tool (invariant 3, `execute_after`); the outcome is committed, rejected,
throttled (parked in RETRY_WAIT and resent with the same key) or unknown. EXEC_UNKNOWN
reconciles an unknown outcome by its key, and retries with that key when nothing was found.
"""

from __future__ import annotations

from typing import Any

from agent_jobs.core.contracts import Action
from agent_jobs.core.holds import held_poll_s
from agent_jobs.core.park import PARK_KEY, THROTTLES_KEY, UNCONFIRMED_KEY, Park, ParkReason
from agent_jobs.core.patch import EffectWrite, Patch
from agent_jobs.core.retry import backoff_s
from agent_jobs.core.states import Status
from agent_jobs.core.text import cut
from agent_jobs.ops.live import current as current_switches
from agent_jobs.ops.switches import POLL_INTERVAL_S
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.orchestrator.patches import action_summary, lease_lost, note, with_runtime
from agent_jobs.orchestrator.session import Session
from agent_jobs.orchestrator.step_base import StepBase, log

S = Status
# Committed effects remembered for the outcome (a task that ends after an effect says so).
MAX_EFFECTS_LISTED = 20
# A throttled call is retried no sooner than this, whatever Retry-After said.
MIN_THROTTLE_DELAY_S = 0.05


class EffectSteps(StepBase):
    # -- RUNNING decided to act ------------------------------------------------------------

    def act(self, s: Session, decision: wf.Act, rt: dict[str, Any]) -> Patch:
        action = decision.action
        try:
            auth = self.authorize(s, action)
        except Exception as exc:
            log.exception("authorize failed for %s", s.task.id)
            return self.retry(s, f"authorize raised {type(exc).__name__}: {exc}", decision.state)
        summary = {
            **action_summary(action),
            "policy_version": auth.policy_version,
            "decision": auth.kind,
        }
        rt["last_policy"] = {
            "decision": auth.kind,
            "policy_version": auth.policy_version,
            "reason": auth.reason,
        }
        if auth.kind == "deny":
            note(rt, "policy_denied", reason=auth.reason, **action_summary(action))
            return Patch(
                to=S.RUNNING,
                event="policy_denied",
                data={**summary, "reason": auth.reason},
                state=with_runtime(decision.state, s.task.state, rt),
                attempts=0,
            )
        rt["pending_action"] = action.model_dump(mode="json")
        # Counters are per effect: a new action starts with none of the last one's failures.
        rt["effect_attempts"] = 0
        rt.pop(UNCONFIRMED_KEY, None)
        rt["reconcile_failures"] = 0
        rt.pop(THROTTLES_KEY, None)
        if auth.kind == "needs_approval" or decision.plan:
            # A person: a grant given with its plan, or asked now (`ApprovalSteps.approval_for`).
            asked = self.approval_for(s, decision, auth, rt, summary)
            if asked is not None:
                return asked
        rt["approval_id"] = None
        intent = Patch(
            to=S.EXECUTING,
            event="intent_recorded",
            data=summary,
            state=with_runtime(decision.state, s.task.state, rt),
            attempts=0,
            keep_lease=True,
            effect=EffectWrite(action, "intent"),
        )
        return self.execute_after(s, intent, action)

    # -- EXECUTING -------------------------------------------------------------------------

    def execute_after(self, s: Session, intent: Patch, action: Action) -> Patch:
        """Commit the intent (keeping the lease), then call the tool, then report the outcome."""
        s.lease = s.commit_keep(intent)
        # Every effect passes here, whether the workflow sends it through the tool executor or
        # calls its system itself (a workflow of your own): an operator's lever holds them all.
        held = current_switches().write_held(action.tool, s.task.tenant_id)
        if held is None and not self.decision_stands(s, action):
            # Held like any lever's hold: on waking the policy and levers of then decide
            # (a person, a denial, or the send).
            held = ("levers_changed", "a lever changed since the policy decided; asked again")
        if held is not None:
            code, message = held
            outcome: wf.EffectOutcome = wf.EffectThrottled(
                POLL_INTERVAL_S, f"{code}: {message}", by_operator=True
            )
            return self.effect_outcome(s, action, outcome)
        if self.grant_lapsed(s):
            # The last check before the send, on the worker's clock alone (no read after it that
            # could take time): a worker that paused after committing the intent does not send
            # on a grant that ran out meanwhile. Not sent; a person is asked again, unless the
            # policy of now needs none.
            stop = self.authorize_resend(
                s, action, s.runtime(), not_applied="approval_expired", grant_lapsed=True
            )
            if stop is not None:
                return stop
        try:
            outcome = s.workflow.execute(s.execute_input(action), action)
        except Exception as exc:  # we cannot know whether the request left: unknown, not failed
            log.exception("execute raised for %s", s.task.id)
            outcome = wf.EffectUnknown(f"execute raised {type(exc).__name__}: {exc}")
        return self.effect_outcome(s, action, outcome)

    def grant_lapsed(self, s: Session) -> bool:
        """Whether the grant this step's intent rests on has run out by the worker's clock."""
        return s.grant_until is not None and self.monotonic() >= s.grant_until

    def effect_outcome(self, s: Session, action: Action, outcome: wf.EffectOutcome) -> Patch:
        rt = s.runtime()
        summary = action_summary(action)
        if isinstance(outcome, wf.EffectThrottled):
            return self.throttled(s, action, outcome, rt)
        rt.pop(THROTTLES_KEY, None)
        if isinstance(outcome, wf.EffectApplied):
            return self.committed(s, action, outcome.result, rt, event="effect_committed")
        if isinstance(outcome, wf.EffectRejected) and rt.get(UNCONFIRMED_KEY):
            # A refusal says this request applied nothing, not that an earlier, unanswered send
            # under the same key did not (its lookup may have lagged): still unknown.
            outcome = wf.EffectUnknown(
                f"refused ({outcome.code}) after an unanswered send under the same key"
            )
        if isinstance(outcome, wf.EffectRejected):
            rt["pending_action"] = None
            rt["effect_attempts"] = 0
            rt.pop(UNCONFIRMED_KEY, None)
            rt["reconcile_failures"] = 0
            note(rt, "effect_rejected", code=outcome.code, message=outcome.message, **summary)
            return Patch(
                to=S.RUNNING,
                event="effect_rejected",
                data={**summary, "code": outcome.code, "message": outcome.message[:200]},
                state=with_runtime(None, s.task.state, rt),
                effect=EffectWrite(action, "failed", {"code": outcome.code}),
            )
        self.observer.reconciled("entered_unknown")
        # The first unknown is reconciled at once; after a retry with the same key also ended
        # unknown, back off before looking again, so a system that keeps timing out is not
        # hammered (the count bounds it: see not_found).
        attempts = int(rt.get("effect_attempts", 0)) + 1
        rt["effect_attempts"] = attempts
        wake = None
        if attempts > 1:
            wake = backoff_s(
                attempts - 1,
                self.settings.retry_base_s,
                self.settings.retry_max_s,
                self.rand() * 0.999,
            )
        return Patch(
            to=S.EXEC_UNKNOWN,
            event="effect_unknown",
            data={**summary, "reason": outcome.reason[:200], "attempt": attempts},
            state=with_runtime(None, s.task.state, rt),
            effect=EffectWrite(action, "unknown"),
            wake_in_s=wake,
        )

    def throttled(
        self, s: Session, action: Action, outcome: wf.EffectThrottled, rt: dict[str, Any]
    ) -> Patch:
        """429/503 + Retry-After before commit: nothing was applied. Not an unknown outcome and
        not a send of the key: park (holding nothing, THROTTLED), keep the pending action and
        its consumed approval, resend with the same key after the delay; escalate once the total
        wait would pass `throttle_max_wait_s`. An operator's lever holding the effect parks it
        the same way (HELD_BY_OPERATOR), as long as the lever holds."""
        so_far = dict(rt.get(THROTTLES_KEY) or {})
        count = int(so_far.get("count", 0)) + 1
        if outcome.retry_after_s is None:
            delay = backoff_s(
                count, self.settings.retry_base_s, self.settings.retry_max_s, self.rand() * 0.999
            )
        else:
            delay = outcome.retry_after_s
        delay = max(MIN_THROTTLE_DELAY_S, float(delay))
        reason = cut(outcome.reason, 200)
        summary = action_summary(action)
        waited = float(so_far.get("waited_s", 0.0))
        if outcome.by_operator:
            # An incident lever, not the provider: a switch never makes a task fail or escalate,
            # and its wait does not count toward the throttle's bound.
            rt[THROTTLES_KEY] = {"count": count, "waited_s": waited}
            rt[PARK_KEY] = Park.of(ParkReason.HELD_BY_OPERATOR, reason).entry()
            # Asked again with backoff while the lever holds (`held_poll_s`): about once a
            # minute after the first minute, not every poll interval for the whole incident.
            delay = held_poll_s(count, self.settings.held_poll_max_s)
            return Patch(
                to=S.RETRY_WAIT,
                event="effect_throttled",
                data={
                    **summary,
                    "reason": reason,
                    "retry_in_s": round(delay, 3),
                    "count": count,
                    "by_operator": True,
                },
                state=with_runtime(None, s.task.state, rt),
                wake_in_s=delay,
            )
        waited += delay
        if waited > self.settings.throttle_max_wait_s:
            rt.pop(THROTTLES_KEY, None)
            rt["pending_action"] = None
            why = (
                f"the provider throttled the call for {waited - delay:.0f}s and asked for "
                f"{delay:.0f}s more, past the bound of {self.settings.throttle_max_wait_s:.0f}s; "
                "it was not applied"
            )
            return Patch(
                to=S.ESCALATED,
                event="throttle_exhausted",
                data={**summary, "reason": reason, "waited_s": round(waited - delay, 3)},
                state=with_runtime(None, s.task.state, rt),
                effect=EffectWrite(action, "failed", {"code": "throttled"}),
                outcome={"reason": why},
            )
        rt[THROTTLES_KEY] = {"count": count, "waited_s": round(waited, 3)}
        rt[PARK_KEY] = Park.of(ParkReason.THROTTLED, reason).entry()
        return Patch(
            to=S.RETRY_WAIT,
            event="effect_throttled",
            data={**summary, "reason": reason, "retry_in_s": round(delay, 3), "count": count},
            state=with_runtime(None, s.task.state, rt),
            wake_in_s=delay,
        )

    def resend_after_throttle(self, s: Session, rt: dict[str, Any]) -> Patch:
        """Woken from a park that resends (THROTTLED, HELD_BY_OPERATOR): the call again, with
        the same key. The intent still stands (it was never applied), once the policy and levers
        of now allow it (`authorize_resend`); the levers that hold effects are asked again by
        `execute_after` itself."""
        action = Action.model_validate(rt["pending_action"])
        stopped = self.authorize_resend(s, action, rt, not_applied="throttled")
        if stopped is not None:
            return stopped
        so_far = rt.get(THROTTLES_KEY) or {}
        intent = Patch(
            to=S.EXECUTING,
            event="resend_after_throttle",
            data={**action_summary(action), "waited_s": so_far.get("waited_s", 0.0)},
            state=with_runtime(None, s.task.state, rt),
            keep_lease=True,
        )
        return self.execute_after(s, intent, action)

    def committed(
        self, s: Session, action: Action, result: dict[str, Any], rt: dict[str, Any], *, event: str
    ) -> Patch:
        try:
            after = s.workflow.after_effect(s.inp(), action, result)
            state, verify = after.state, after.verify
        except Exception:
            log.exception("after_effect raised for %s", s.task.id)
            state, verify = None, False
        rt["pending_action"] = None
        rt["effect_attempts"] = 0
        rt.pop(UNCONFIRMED_KEY, None)
        rt["reconcile_failures"] = 0
        rt["last_effect"] = {**action_summary(action), "status": "committed"}
        done = list(rt.get("effects_committed") or [])
        done.append({"tool": action.tool, "idempotency_key": action.idempotency_key})
        rt["effects_committed"] = done[-MAX_EFFECTS_LISTED:]
        note(rt, "effect_committed", **action_summary(action))
        return Patch(
            to=S.VERIFYING if verify else S.RUNNING,
            event=event,
            data=action_summary(action),
            state=with_runtime(state, s.task.state, rt),
            effect=EffectWrite(action, "committed", result),
        )

    def executing_reclaimed(self, s: Session) -> Patch:
        """A fresh claim of an EXECUTING task: whoever held it lost the lease mid-call."""
        self.observer.reconciled("entered_unknown")
        return lease_lost(s.task, by="claim")

    # -- EXEC_UNKNOWN ----------------------------------------------------------------------

    def exec_unknown(self, s: Session) -> Patch:
        rt = s.runtime()
        action = Action.model_validate(rt["pending_action"])
        summary = action_summary(action)
        try:
            found = s.workflow.reconcile(s.inp(), action)
        except Exception as exc:
            log.exception("reconcile raised for %s", s.task.id)
            found = wf.LookupFailed(f"reconcile raised {type(exc).__name__}: {exc}")
        if isinstance(found, wf.Found):
            self.observer.reconciled("found")
            return self.committed(s, action, found.result, rt, event="reconciled_found")
        if isinstance(found, wf.Different):
            self.observer.reconciled("different")
            return Patch(
                to=S.ESCALATED,
                event="reconciled_different",
                data={**summary, "detail": found.detail[:200]},
                outcome={
                    "reason": "effect found but different from the intent",
                    "detail": found.detail,
                },
            )
        if isinstance(found, wf.LookupFailed):
            self.observer.reconciled("lookup_failed")
            failures = int(rt.get("reconcile_failures", 0)) + 1
            rt["reconcile_failures"] = failures
            if failures >= self.settings.max_reconcile_attempts:
                return Patch(
                    to=S.ESCALATED,
                    event="reconcile_exhausted",
                    data={**summary, "reason": found.reason[:200]},
                    state=with_runtime(None, s.task.state, rt),
                    outcome={"reason": "the outcome of the effect could not be determined"},
                )
            delay = backoff_s(
                failures, self.settings.retry_base_s, self.settings.retry_max_s, self.rand() * 0.999
            )
            return Patch(
                to=S.EXEC_UNKNOWN,
                event="reconcile_failed",
                data={**summary, "reason": found.reason[:200], "retry_in_s": round(delay, 3)},
                state=with_runtime(None, s.task.state, rt),
                wake_in_s=delay,
            )
        self.observer.reconciled("not_found")
        return self.not_found(s, action, rt)

    def not_found(self, s: Session, action: Action, rt: dict[str, Any]) -> Patch:
        """Reconcile found nothing: retry with the same key — if the task may still act and the
        policy and levers of now allow it (`authorize_resend`)."""
        summary = action_summary(action)
        if s.task.cancel_requested:
            return Patch(
                to=S.ESCALATED,
                event="reconciled_not_found",
                data={**summary, "reason": "cancel requested; not retrying the effect"},
                outcome={"reason": "cancelled while the effect was unknown; no effect found"},
            )
        sent = int(rt.get("effect_attempts", 0))
        if sent >= self.settings.max_reconcile_attempts:
            return Patch(
                to=S.ESCALATED,
                event="reconciled_not_found",
                data={**summary, "reason": "no effect after the last attempt with this key"},
                outcome={
                    "reason": f"the effect could not be completed: sent {sent} times, one key"
                },
            )
        # Not found is enough to resend under the key (the system applies a key once), never to
        # call it not applied: a lookup can lag. Until an answer says, giving it up escalates.
        rt[UNCONFIRMED_KEY] = True
        stopped = self.authorize_resend(s, action, rt, not_applied="not_found")
        if stopped is not None:
            return stopped
        rt["reconcile_failures"] = 0
        intent = Patch(
            to=S.EXECUTING,
            event="retry_same_key",
            data={**summary, "reason": "reconcile found no effect"},
            state=with_runtime(None, s.task.state, rt),
            keep_lease=True,
            effect=EffectWrite(action, "intent"),
        )
        return self.execute_after(s, intent, action)
