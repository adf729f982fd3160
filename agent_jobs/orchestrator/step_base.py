"""What every group of steps shares: `StepBase`, the base of the `Steps` mixins.

It holds the dependencies (store, settings, observer, the jitter source) and the exits any step
may take: stop, cancel, retry with backoff, a failed attempt, and the policy decision counted as
a metric. Two steps are called across mixins, so they are declared here and implemented where
they belong: `execute_after` (`effect_steps`) and `authorize_resend` (`approval_steps`).
"""

from __future__ import annotations

import logging
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from agent_jobs.config import Settings
from agent_jobs.core.contracts import Action
from agent_jobs.core.park import PARK_KEY, UNCONFIRMED_KEY, Park, ParkReason
from agent_jobs.core.patch import ApprovalUse, EffectWrite, Patch
from agent_jobs.core.retry import backoff_s
from agent_jobs.core.states import Status, is_legal
from agent_jobs.ops.live import current as current_switches
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.orchestrator.patches import (
    action_summary,
    error_text,
    failed_attempt,
    with_runtime,
)
from agent_jobs.orchestrator.ports import Observer
from agent_jobs.orchestrator.session import Session
from agent_jobs.store import Store

# Every step logs under this one name, as it did before the steps were split into modules.
log = logging.getLogger("agent_jobs.orchestrator.steps")

S = Status


class StepBase(ABC):
    def __init__(
        self,
        store: Store,
        settings: Settings,
        observer: Observer,
        rand: Callable[[], float] = random.random,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.settings = settings
        self.observer = observer
        self.rand = rand
        # The worker's own clock, for how long ago something was read (a grant's time left):
        # never compared with the database's clock, only with itself.
        self.monotonic = monotonic

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
        failed attempt (`failed_attempt`); in EXECUTING, an effect whose outcome is unknown."""
        patch = failed_attempt(s.task, error_text(exc), self.settings, self.rand())
        if patch.dead_letter is not None:
            self.observer.dead_letter(s.task.workflow)
        if patch.to is S.EXEC_UNKNOWN and s.task.status is S.EXECUTING:
            self.observer.reconciled("entered_unknown")
        return patch

    def cancelled(self, s: Session, park: Park | None = None) -> Patch:
        """End the task as cancelled; `park`: the park reason it was waiting for (RETRY_WAIT)."""
        rt = s.runtime()
        use = None
        if rt.get("approval_id"):
            use = ApprovalUse(rt["approval_id"], "void")
        unconfirmed = self.abandon_unconfirmed(s, rt, "cancel requested")
        if unconfirmed is not None:
            return replace(unconfirmed, approval_use=use)
        effect = None
        if park is not None and park.resends:
            # Parked before a resend: the system of record refused the call (a throttle) or an
            # operator's lever held it; nothing was applied, so the intent is closed as failed.
            action = Action.model_validate(rt["pending_action"])
            effect = EffectWrite(action, "failed", {"code": "throttled_then_cancelled"})
        rt.pop(PARK_KEY, None)
        return Patch(
            to=S.CANCELLED,
            event="cancelled",
            data={},
            state=with_runtime(None, s.task.state, rt),
            outcome={"cancelled": True},
            approval_use=use,
            effect=effect,
        )

    @staticmethod
    def abandon_unconfirmed(s: Session, rt: dict[str, Any], why: str) -> Patch | None:
        """The pending action is given up (a cancel, a denial, an expired grant) while an earlier
        send of it was never answered and a reconcile read found nothing (`UNCONFIRMED_KEY`): a
        lookup can lag, so "not found" is enough to resend under the same key, never to close
        the effect as not applied. A person must look: ESCALATED, naming the key, the effect
        left unknown (invariant 4). None when no such send is behind the pending action."""
        if not rt.get(UNCONFIRMED_KEY) or not rt.get("pending_action"):
            return None
        action = Action.model_validate(rt["pending_action"])
        rt[UNCONFIRMED_KEY] = False
        rt.pop(PARK_KEY, None)
        reason = (
            f"{why} while an earlier send of {action.tool} under {action.idempotency_key} was "
            "never answered and a lookup found nothing (a lookup can lag): it may have been "
            "applied; confirm with the system of record"
        )
        return Patch(
            to=S.ESCALATED,
            event="abandoned_unconfirmed_effect",
            data={**action_summary(action), "reason": why},
            state=with_runtime(None, s.task.state, rt),
            outcome={"reason": reason, "idempotency_key": action.idempotency_key},
            effect=EffectWrite(action, "unknown"),
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
        new_state["runtime"] = {**rt, PARK_KEY: Park.of(ParkReason.RETRY, reason).entry()}
        return Patch(
            to=S.RETRY_WAIT,
            event="retry_scheduled",
            data={"reason": reason, "attempt": attempt, "delay_s": round(delay, 3)},
            state=new_state,
            attempts=attempt,
            wake_in_s=delay,
        )

    def authorize(self, s: Session, action: Action) -> wf.Authorization:
        """The workflow's policy, counted: every decision (and every revalidation) is a metric.
        The switches it decided under are kept on the session (a lever is part of the policy:
        the autonomy cap)."""
        s.levers = current_switches()
        auth = s.workflow.authorize(s.inp(), action)
        self.observer.policy_decision(auth.policy_version, auth.kind)
        return auth

    # -- declared here, implemented in a mixin ---------------------------------------------

    @abstractmethod
    def execute_after(self, s: Session, intent: Patch, action: Action) -> Patch:
        """Commit the intent (keeping the lease), then call the tool (`EffectSteps`)."""

    @abstractmethod
    def approval_for(
        self,
        s: Session,
        decision: wf.Act,
        auth: wf.Authorization,
        rt: dict[str, Any],
        summary: dict[str, Any],
    ) -> Patch | None:
        """A person for an action the policy does not simply allow, or for its plan: a grant
        given with the plan, or an approval asked now; None to go on without one
        (`ApprovalSteps`)."""

    @abstractmethod
    def decision_stands(self, s: Session, action: Action) -> bool:
        """Whether the policy decision this step made still holds under the switches of now
        (`ApprovalSteps`)."""

    @abstractmethod
    def authorize_resend(
        self,
        s: Session,
        action: Action,
        rt: dict[str, Any],
        *,
        not_applied: str,
        grant_lapsed: bool = False,
    ) -> Patch | None:
        """Ask the policy and levers of now before a recorded intent goes out again: None to
        send, or the patch that stops it (`ApprovalSteps`)."""
