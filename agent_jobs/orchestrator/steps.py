"""One function per status: what the step does and which transition it asks for.

Each returns a `Patch` for the runner to commit, or None for "nothing to do" (the lease is then
released). EXECUTING is special: the intent is committed first, keeping the lease, and only then
is the effect attempted (invariant 3) — `Session.commit_keep` does that intermediate commit.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from agent_jobs.config import Settings
from agent_jobs.core.contracts import Action, ApprovalView
from agent_jobs.core.copies import deep_copy
from agent_jobs.core.errors import Deferred, InvalidInput
from agent_jobs.core.patch import ApprovalRequest, ApprovalUse, EffectWrite, Patch
from agent_jobs.core.retry import backoff_s
from agent_jobs.core.states import EFFECT_IN_FLIGHT, RESUMABLE, Status, is_legal
from agent_jobs.core.text import cut
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.orchestrator.ports import Observer
from agent_jobs.policy.approvals import Grant, validate_grant
from agent_jobs.store import Lease, PendingEvent, Store
from agent_jobs.store.ids import new_id

log = logging.getLogger(__name__)

S = Status
MAX_NOTES = 20
# Committed effects remembered for the outcome (a task that ends after an effect says so).
MAX_EFFECTS_LISTED = 20
ERROR_MAX_CHARS = 500
# Statuses that park on their own timer (each has a sweeper that wakes it when due): a failed
# step there waits in place; any other status waits in RETRY_WAIT and resumes.
SELF_PARKING = frozenset({S.APPROVAL_WAIT, S.EXEC_UNKNOWN, S.RETRY_WAIT})
# A throttled call is retried no sooner than this, whatever Retry-After said.
MIN_THROTTLE_DELAY_S = 0.05


def error_text(exc: BaseException) -> str:
    """`Class: message`, bounded: what a failed attempt records on the task row."""
    return cut(f"{type(exc).__name__}: {exc}", ERROR_MAX_CHARS)


def resume_status(raw: object) -> Status:
    """Where a RETRY_WAIT resumes: the status whose step failed (RUNNING when none is named)."""
    try:
        status = Status(str(raw))
    except ValueError:
        return S.RUNNING
    return status if status in RESUMABLE else S.RUNNING


@dataclass
class Session:
    """A claimed task being advanced: the lease (replaced after intermediate commits) and the
    events its hooks recorded that the step's next commit writes (`pending`)."""

    lease: Lease
    workflow: wf.Workflow
    commit_keep: Callable[[Patch], Lease]
    emit: Callable[[str, dict[str, Any]], None]
    pending: list[PendingEvent] = field(default_factory=list)

    @property
    def task(self) -> Any:
        return self.lease.task

    def runtime(self) -> dict[str, Any]:
        return deep_copy(self.lease.task.state.get("runtime") or {})

    def peek(self) -> wf.StepInput:
        """The input without copies, for a hook that only reads (`quick`)."""
        return self._input(_same)

    def inp(self) -> wf.StepInput:
        return self._input(deep_copy)

    def execute_input(self, action: Action) -> wf.StepInput:
        """The input of `execute`: with the decision the intent just committed rests on (the
        policy version recorded at the decision, the grant consumed with the intent)."""
        rt = self.lease.task.state.get("runtime") or {}
        policy = (rt.get("last_policy") or {}).get("policy_version")
        approval_id = rt.get("approval_id")
        decision = wf.EffectDecision(
            action_hash=action.action_hash,
            policy_version=str(policy or ""),
            approval_id=str(approval_id) if approval_id else None,
        )
        return replace(self.inp(), decision=decision)

    def _input(self, take: Callable[[Any], Any]) -> wf.StepInput:
        t = self.lease.task
        return wf.StepInput(
            task_id=t.id,
            tenant_id=t.tenant_id,
            workflow=t.workflow,
            requester=t.requester,
            idempotency_key=t.idempotency_key,
            input=take(t.input),
            state=take(t.state),
            pinned=take(t.pinned),
            attempts=t.attempts,
            trace_id=t.trace_id,
            cancel_requested=t.cancel_requested,
            emit=self.emit,
            resumed=resumed_from(t.state),
        )


def _same(value: Any) -> Any:
    return value


def resumed_from(state: dict[str, Any]) -> wf.Resumed | None:
    """The typed view of the orchestrator's last note (see `note`)."""
    notes = (state.get("runtime") or {}).get("notes") or []
    if not notes or not isinstance(notes[-1], dict):
        return None
    last = dict(notes[-1])
    kind = str(last.pop("kind", ""))
    if kind not in wf.RESUME_KINDS:
        return None
    reason = last.pop("reason", "")
    code = last.pop("code", "")
    return wf.Resumed(
        kind=kind,
        reason="" if reason is None else str(reason),
        code="" if code is None else str(code),
        detail=last,
    )


def with_runtime(
    state: dict[str, Any] | None, base: dict[str, Any], runtime: dict[str, Any]
) -> dict[str, Any]:
    """The workflow owns the state, except the `runtime` entry, which is the orchestrator's."""
    out = dict(base if state is None else state)
    out["runtime"] = runtime
    return out


def note(runtime: dict[str, Any], kind: str, **data: Any) -> None:
    """Record what happened for the workflow's next decision (a denial, a rejection, ...)."""
    notes = list(runtime.get("notes", []))
    notes.append({"kind": kind, **data})
    runtime["notes"] = notes[-MAX_NOTES:]


def action_summary(action: Action) -> dict[str, Any]:
    """What goes into events: identity and hashes, never raw arguments."""
    return {
        "tool": action.tool,
        "tool_version": action.tool_version,
        "action_hash": action.action_hash,
        "idempotency_key": action.idempotency_key,
    }


def lease_lost(task: Any, *, by: str) -> Patch:
    """EXECUTING whose holder lost its lease (found by a new claim or by the lease sweeper): the
    call may have been sent, so the outcome is unknown, never failed (invariant 4). The one
    patch for both finders, with one event name."""
    rt = (task.state.get("runtime") or {}) if isinstance(task.state, dict) else {}
    try:
        action = Action.model_validate(rt.get("pending_action"))
    except ValueError:
        # No readable pending action (a corrupted checkpoint): nothing to reconcile by key;
        # a person must look, and one bad row must not stall the sweeper for everyone.
        return Patch(
            to=S.ESCALATED,
            event="lease_lost_during_effect",
            data={"owner": task.lease_owner, "found_by": by, "pending_action": None},
            outcome={"reason": "lost the lease during an effect whose record is unreadable"},
        )
    return Patch(
        to=S.EXEC_UNKNOWN,
        event="lease_lost_during_effect",
        data={**action_summary(action), "owner": task.lease_owner, "found_by": by},
        effect=EffectWrite(action, "unknown"),
    )


def failed_attempt(task: Any, error: str, settings: Settings, rand: float) -> Patch:
    """A failed attempt of `task`'s step: recorded on the row (`attempts`, `last_error`), parked
    with backoff (`rand` in [0, 1) draws the jitter), and after `max_attempts` consecutive
    failures a dead letter. The state is not rewritten, so the checkpoint a replay would resume
    from is the last one committed."""
    status = task.status
    attempt = task.attempts + 1
    if attempt >= settings.max_attempts:
        # Where an effect may have been sent, or has been, a person must look: ESCALATED.
        escalate = status in EFFECT_IN_FLIGHT or not is_legal(status, S.FAILED)
        reason = f"{attempt} consecutive failed attempts; last: {error}"
        return Patch(
            to=S.ESCALATED if escalate else S.FAILED,
            event="dead_lettered",
            data={"reason": error, "attempts": attempt, "step": status.value},
            attempts=attempt,
            last_error=error,
            dead_letter=reason,
            outcome={"reason": reason, "attempts": attempt, "dead_letter": True},
        )
    rt = deep_copy(task.state.get("runtime") or {})
    delay = backoff_s(attempt, settings.retry_base_s, settings.retry_max_s, rand * 0.999)
    to = status
    if status not in SELF_PARKING:
        to = S.RETRY_WAIT  # RETRY_WAIT's own step resumes the status that failed
        rt["resume"] = status.value
    return Patch(
        to=to,
        event="step_failed",
        data={"error": error, "attempt": attempt, "retry_in_s": round(delay, 3)},
        state=with_runtime(None, task.state, rt),
        attempts=attempt,
        last_error=error,
        wake_in_s=delay,
    )


# What a step whose worker died records: the lease lapsed without a commit.
WORKER_LOST = "WorkerLost: the worker died during the step (its lease lapsed without a commit)"


def worker_lost(task: Any, settings: Settings, rand: float) -> Patch:
    """A lease that lapsed on a task not in EXECUTING: its worker died during the step (killed,
    out of memory, `os._exit` in a hook) or lost the database for longer than the lease. It is
    a failed attempt like any other (`failed_attempt`): counted, retried after the backoff, and
    a dead letter after `max_attempts`, so a step that keeps killing its worker is bounded
    instead of being dispatched again at once, forever. The event keeps its name,
    `lease_expired` (naming the owner that lost it), unless the task is dead-lettered."""
    patch = failed_attempt(task, WORKER_LOST, settings, rand)
    lapsed = {"owner": task.lease_owner, "by": "sweeper"}
    if patch.dead_letter is not None:
        return replace(patch, data={**patch.data, **lapsed})
    return replace(patch, event="lease_expired", data={**patch.data, **lapsed})


class Steps:
    def __init__(
        self,
        store: Store,
        settings: Settings,
        observer: Observer,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.store = store
        self.settings = settings
        self.observer = observer
        self.rand = rand

    # -- helpers ---------------------------------------------------------------------------

    def stop(self, s: Session, reason: str, *, prefer: Status = S.FAILED, **extra: Any) -> Patch:
        """End the task as FAILED (or ESCALATED where FAILED is not a legal exit)."""
        to = prefer if is_legal(s.task.status, prefer) else S.ESCALATED
        if not is_legal(s.task.status, to):
            to = S.FAILED
        return Patch(
            to=to,
            event="stopped",
            data={"reason": reason, **extra},
            outcome={"reason": reason, **extra},
        )

    def failed(self, s: Session, exc: BaseException) -> Patch:
        """Any exception that escaped a step (a hook, a write the database refused, a bug) is a
        failed attempt (`failed_attempt`)."""
        patch = failed_attempt(s.task, error_text(exc), self.settings, self.rand())
        if patch.dead_letter is not None:
            self.observer.dead_letter(s.task.workflow)
        return patch

    def cancelled(self, s: Session) -> Patch:
        rt = s.runtime()
        use = None
        if rt.get("approval_id"):
            use = ApprovalUse(rt["approval_id"], "void")
        effect = None
        if rt.get("throttle") and rt.get("pending_action"):
            # Parked after a throttled call: the system of record said it applied nothing.
            action = Action.model_validate(rt["pending_action"])
            effect = EffectWrite(action, "failed", {"code": "throttled_then_cancelled"})
        return Patch(
            to=S.CANCELLED,
            event="cancelled",
            data={},
            outcome={"cancelled": True},
            approval_use=use,
            effect=effect,
        )

    @staticmethod
    def with_effects(s: Session, patch: Patch) -> Patch:
        """A task that ends after committing effects says so in its outcome: a cancellation or
        an escalation never reads as "nothing happened" with a refund in the ledger."""
        if not patch.terminal:
            return patch
        state = patch.state if patch.state is not None else s.task.state
        done = (state.get("runtime") or {}).get("effects_committed") or []
        if not done:
            return patch
        outcome = dict(patch.outcome or {})
        outcome.setdefault("effects_committed", done)
        if patch.to is S.CANCELLED:
            outcome.setdefault(
                "reason",
                f"cancelled after {len(done)} effect(s) had committed; they stand",
            )
        data = dict(patch.data)
        data.setdefault("effects_committed", len(done))
        return replace(patch, outcome=outcome, data=data)

    def retry(
        self, s: Session, reason: str, state: dict[str, Any] | None, after: float | None = None
    ) -> Patch:
        attempt = s.task.attempts + 1
        rt = s.runtime()
        new_state = with_runtime(state, s.task.state, rt)
        if attempt >= self.settings.max_attempts:
            self.observer.dead_letter(s.task.workflow)
            return Patch(
                to=S.FAILED,
                event="dead_lettered",
                data={"reason": reason, "attempts": attempt},
                state=new_state,
                attempts=attempt,
                dead_letter=reason,
                outcome={"reason": reason, "attempts": attempt, "dead_letter": True},
            )
        delay = backoff_s(
            attempt, self.settings.retry_base_s, self.settings.retry_max_s, self.rand() * 0.999
        )
        if after is not None:
            delay = max(delay, after)
        return Patch(
            to=S.RETRY_WAIT,
            event="retry_scheduled",
            data={"reason": reason, "attempt": attempt, "delay_s": round(delay, 3)},
            state=new_state,
            attempts=attempt,
            wake_in_s=delay,
        )

    def authorize(self, s: Session, action: Action) -> wf.Authorization:
        """The workflow's policy, counted: every decision (and every revalidation) is a metric."""
        auth = s.workflow.authorize(s.inp(), action)
        self.observer.policy_decision(auth.policy_version, auth.kind)
        return auth

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
        rt["reconcile_failures"] = 0
        rt.pop("throttle", None)
        if auth.kind == "needs_approval":
            approval_id = new_id("apr")
            rt["approval_id"] = approval_id
            return Patch(
                to=S.APPROVAL_WAIT,
                event="approval_requested",
                data={
                    **summary,
                    "approval_id": approval_id,
                    "reason": auth.reason,
                    "ttl_s": auth.ttl_s,
                },
                state=with_runtime(decision.state, s.task.state, rt),
                attempts=0,
                wake_in_s=auth.ttl_s,
                approval_request=ApprovalRequest(
                    approval_id=approval_id,
                    action=action,
                    policy_version=auth.policy_version,
                    requester=s.task.requester,
                    reason=auth.reason or "policy requires approval",
                    ttl_s=auth.ttl_s,
                ),
            )
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
        try:
            outcome = s.workflow.execute(s.execute_input(action), action)
        except Exception as exc:  # we cannot know whether the request left: unknown, not failed
            log.exception("execute raised for %s", s.task.id)
            outcome = wf.EffectUnknown(f"execute raised {type(exc).__name__}: {exc}")
        return self.effect_outcome(s, action, outcome)

    def effect_outcome(self, s: Session, action: Action, outcome: wf.EffectOutcome) -> Patch:
        rt = s.runtime()
        summary = action_summary(action)
        if isinstance(outcome, wf.EffectThrottled):
            return self.throttled(s, action, outcome, rt)
        rt.pop("throttle", None)
        if isinstance(outcome, wf.EffectApplied):
            return self.committed(s, action, outcome.result, rt, event="effect_committed")
        if isinstance(outcome, wf.EffectRejected):
            rt["pending_action"] = None
            rt["effect_attempts"] = 0
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
        not a send of the key: park (holding nothing), keep the pending action and its consumed
        approval, resend with the same key after the delay; escalate once the total wait would
        pass `throttle_max_wait_s`."""
        info = dict(rt.get("throttle") or {})
        count = int(info.get("count", 0)) + 1
        if outcome.retry_after_s is None:
            delay = backoff_s(
                count, self.settings.retry_base_s, self.settings.retry_max_s, self.rand() * 0.999
            )
        else:
            delay = outcome.retry_after_s
        delay = max(MIN_THROTTLE_DELAY_S, float(delay))
        reason = cut(outcome.reason, 200)
        summary = action_summary(action)
        if outcome.by_operator:
            # An incident lever, not the provider: a switch never makes a task fail or escalate.
            rt["throttle"] = {**info, "count": count, "reason": reason, "by_operator": True}
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
        waited = float(info.get("waited_s", 0.0)) + delay
        if waited > self.settings.throttle_max_wait_s:
            rt.pop("throttle", None)
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
        rt["throttle"] = {"count": count, "waited_s": round(waited, 3), "reason": reason}
        return Patch(
            to=S.RETRY_WAIT,
            event="effect_throttled",
            data={**summary, "reason": reason, "retry_in_s": round(delay, 3), "count": count},
            state=with_runtime(None, s.task.state, rt),
            wake_in_s=delay,
        )

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
        """Reconcile found nothing: retry with the same key — if the task may still act."""
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
        approval_id = rt.get("approval_id")
        if approval_id:
            approval, now = self.store.approval_at_now(approval_id)
            if approval.expires_at <= now:
                # Approval covers the intent, not the number of attempts, but not past expiry.
                rt["approval_id"] = None
                note(rt, "approval_expired_before_retry", approval_id=approval_id)
                return self.request_approval(s, action, rt, reason="grant expired before the retry")
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

    def request_approval(
        self, s: Session, action: Action, rt: dict[str, Any], *, reason: str
    ) -> Patch:
        auth = self.authorize(s, action)
        if auth.kind == "deny":
            return Patch(
                to=S.ESCALATED,
                event="policy_denied_on_retry",
                data={**action_summary(action), "reason": auth.reason},
                outcome={"reason": "policy now denies the pending action"},
            )
        approval_id = new_id("apr")
        rt["approval_id"] = approval_id
        return Patch(
            to=S.APPROVAL_WAIT,
            event="approval_requested",
            data={**action_summary(action), "approval_id": approval_id, "reason": reason},
            state=with_runtime(None, s.task.state, rt),
            wake_in_s=auth.ttl_s,
            approval_request=ApprovalRequest(
                approval_id, action, auth.policy_version, s.task.requester, reason, auth.ttl_s
            ),
        )

    # -- APPROVAL_WAIT ---------------------------------------------------------------------

    def approval_wait(self, s: Session) -> Patch | None:
        rt = s.runtime()
        approval, now = self.store.approval_at_now(rt["approval_id"])
        if s.task.cancel_requested:
            return self.cancelled(s)
        action = Action.model_validate(rt["pending_action"])
        if approval.status == "pending" and approval.expires_at > now:
            return None  # woken early (a duplicate message): nothing was decided yet
        if approval.status == "granted":
            return self.granted(s, approval, action, rt, now)
        kind = "approval_denied" if approval.status == "denied" else "approval_expired"
        rt["pending_action"] = None
        rt["approval_id"] = None
        note(rt, kind, approval_id=approval.approval_id, approver=approval.approver)
        use = ApprovalUse(approval.approval_id, "expired") if approval.status == "pending" else None
        return Patch(
            to=S.RUNNING,
            event=kind,
            data={"approval_id": approval.approval_id},
            state=with_runtime(None, s.task.state, rt),
            approval_use=use,
        )

    def granted(
        self, s: Session, approval: ApprovalView, action: Action, rt: dict[str, Any], now: Any
    ) -> Patch:
        """Revalidate before acting, with the one grant check (`policy.approvals.validate_grant`,
        the seed's `validateGrant`): used, not granted, action changed, expired, self-approval,
        policy changed — and the policy of today must still not deny it (policy is evaluated
        again on resume)."""
        auth = self.authorize(s, action)
        grant = Grant(
            approval_id=approval.approval_id,
            action_hash=approval.action_hash,
            policy_version=approval.policy_version,
            requester=approval.requester,
            approver=approval.approver,
            status=approval.status,
            expires_at=approval.expires_at,
            used_at=approval.used_at,
        )
        problem: str | None = validate_grant(
            grant, action.action_hash, auth.policy_version, now
        ).reason
        if problem is None and auth.kind == "deny":
            problem = "policy_denies_now"
        if problem is not None:
            rt["pending_action"] = None
            rt["approval_id"] = None
            note(rt, "approval_invalid", approval_id=approval.approval_id, reason=problem)
            return Patch(
                to=S.RUNNING,
                event="approval_invalid",
                data={"approval_id": approval.approval_id, "reason": problem},
                state=with_runtime(None, s.task.state, rt),
                approval_use=ApprovalUse(
                    approval.approval_id, "expired" if problem == "expired" else "void"
                ),
            )
        intent = Patch(
            to=S.EXECUTING,
            event="intent_recorded",
            data={
                **action_summary(action),
                "approval_id": approval.approval_id,
                "approver": approval.approver,
                "policy_version": auth.policy_version,
            },
            state=with_runtime(None, s.task.state, rt),
            keep_lease=True,
            effect=EffectWrite(action, "intent"),
            # Consumed in the intent's transaction (invariant 8): single use, checked by the DB.
            approval_use=ApprovalUse(approval.approval_id, "used"),
        )
        return self.execute_after(s, intent, action)

    # -- RETRY_WAIT and VERIFYING ----------------------------------------------------------

    def retry_wait(self, s: Session) -> Patch:
        if s.task.cancel_requested:
            return self.cancelled(s)
        rt = s.runtime()
        if rt.get("throttle") and rt.get("pending_action"):
            return self.resend_after_throttle(s, rt)
        if "resume" not in rt:  # the common case: a Retry decision, back to RUNNING
            return Patch(to=S.RUNNING, event="retry_due", data={"attempt": s.task.attempts})
        resume = resume_status(rt.pop("resume"))
        return Patch(
            to=resume,
            event="retry_due",
            data={"attempt": s.task.attempts, "resume": resume.value},
            state=with_runtime(None, s.task.state, rt),
        )

    def resend_after_throttle(self, s: Session, rt: dict[str, Any]) -> Patch:
        """The throttled call again, with the same key: the intent still stands (it was never
        applied), and so does the approval consumed with it."""
        action = Action.model_validate(rt["pending_action"])
        throttle = rt.get("throttle") or {}
        intent = Patch(
            to=S.EXECUTING,
            event="resend_after_throttle",
            data={**action_summary(action), "waited_s": throttle.get("waited_s", 0.0)},
            state=with_runtime(None, s.task.state, rt),
            keep_lease=True,
        )
        return self.execute_after(s, intent, action)

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
        rt["resume"] = S.VERIFYING.value
        return Patch(
            to=S.RETRY_WAIT,
            event="verify_error",
            data={"error": cut(error, 200), "attempt": failures, "retry_in_s": round(delay, 3)},
            state=with_runtime(None, s.task.state, rt),
            last_error=error,
            wake_in_s=delay,
        )
