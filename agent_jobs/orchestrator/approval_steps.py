"""Approvals (`ApprovalSteps`): asking for one, APPROVAL_WAIT, and a grant's revalidation.

A grant is checked again before acting (`granted`), with today's policy; a valid one is consumed
in the same transaction as the intent, and the effect path takes over (`execute_after`). A
denial, an expiry or an invalid grant goes back to RUNNING with a note for the workflow.

A plan (`Act.plan`) is asked for in one approval when any of its effects needs a person: one row
per effect, each bound to its own hash, decided together (`store.approval_groups`). The task
waits on the first; each later effect, at its turn, is authorized again and consumes its own
grant with its intent (`granted`) — an action whose hash no grant of the group holds (its
arguments changed) is asked for again, never sent on the group's word.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent_jobs.core.contracts import Action, ApprovalView
from agent_jobs.core.park import THROTTLES_KEY, UNCONFIRMED_KEY
from agent_jobs.core.patch import ApprovalRequest, ApprovalUse, EffectWrite, GroupMember, Patch
from agent_jobs.core.states import Status
from agent_jobs.core.text import cut
from agent_jobs.ops.live import current as current_switches
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.orchestrator.patches import action_summary, note, with_runtime
from agent_jobs.orchestrator.session import Session
from agent_jobs.orchestrator.step_base import StepBase
from agent_jobs.policy.approvals import Grant, validate_grant
from agent_jobs.store.approval_groups import member_id
from agent_jobs.store.ids import new_id

S = Status


class ApprovalSteps(StepBase):
    # -- asking: one action, or the effects of a plan in one decision ------------------------

    def approval_for(
        self,
        s: Session,
        decision: wf.Act,
        auth: wf.Authorization,
        rt: dict[str, Any],
        summary: dict[str, Any],
    ) -> Patch | None:
        """An action the policy does not simply allow, or one with a plan behind it: its own
        grant given with its plan (used now, with the intent), else an approval asked now —
        of the whole plan when any of its effects needs a person and none is denied (a denied
        one would stop the plan at its turn: the first is then asked alone). None: nobody is
        needed, go on."""
        action = decision.action
        if auth.kind == "needs_approval":
            s.approval_read_at = self.monotonic()
            found = self.store.plan_grant(s.task.id, action.action_hash)
            if found is not None:
                approval, now = found
                rt["approval_id"] = approval.approval_id
                return self.granted(s, approval, action, rt, now, state=decision.state)
        rest = [(a, self.authorize(s, a)) for a in decision.plan]
        grouped = bool(rest) and all(a.kind != "deny" for _, a in rest)
        if not grouped:
            rest = []
        if auth.kind != "needs_approval" and all(a.kind != "needs_approval" for _, a in rest):
            return None
        approval_id = new_id("apr")
        rt["approval_id"] = approval_id
        asked_with = "asked with its plan"
        members = tuple(
            GroupMember(member_id(approval_id, i), a, cut(m.reason or asked_with, 500))
            for i, (a, m) in enumerate(rest, start=1)
        )
        group = [{"approval_id": m.approval_id, **action_summary(m.action)} for m in members]
        return Patch(
            to=S.APPROVAL_WAIT,
            event="approval_requested",
            data={
                **summary,
                "approval_id": approval_id,
                "reason": auth.reason,
                "ttl_s": auth.ttl_s,
                **({"group": group} if group else {}),
            },
            state=with_runtime(decision.state, s.task.state, rt),
            attempts=0,
            wake_in_s=auth.ttl_s,
            approval_request=ApprovalRequest(
                approval_id=approval_id,
                action=action,
                policy_version=auth.policy_version,
                requester=s.task.requester,
                reason=auth.reason or (asked_with if members else "policy requires approval"),
                ttl_s=auth.ttl_s,
                members=members,
            ),
        )

    # -- asked again: every resend of a recorded intent ----------------------------------------

    def authorize_resend(
        self,
        s: Session,
        action: Action,
        rt: dict[str, Any],
        *,
        not_applied: str,
        grant_lapsed: bool = False,
    ) -> Patch | None:
        """Ask the policy and the levers in force now before a recorded intent goes out again
        (a resend after a throttle, a retry after reconcile found nothing): invariant 11. None
        when it may go; otherwise the patch that stops it. `needs_approval` is covered by the
        grant consumed with this intent while that grant still holds (same action, unexpired,
        same policy version); otherwise a person is asked again (APPROVAL_WAIT). `deny`: not
        sent, escalated. `not_applied`: what says nothing was applied under the key (`throttled`:
        a definitive refusal; `not_found`: a reconcile read), the code an intent stopped here
        is closed with: failed, never left open for a cancel to leave behind. `grant_lapsed`:
        the worker's own clock says the grant ran out (`EffectSteps.grant_lapsed`)."""
        auth = self.authorize(s, action)
        rt["last_policy"] = {
            "decision": auth.kind,
            "policy_version": auth.policy_version,
            "reason": auth.reason,
        }
        # Stopped here, the intent is closed as not applied, unless an unanswered send is
        # behind it: then it stays unknown and an escalation names its key (a lookup can lag).
        unconfirmed = bool(rt.get(UNCONFIRMED_KEY))
        closed = (
            EffectWrite(action, "unknown")
            if unconfirmed
            else EffectWrite(action, "failed", {"code": not_applied})
        )
        if auth.kind == "deny":
            named = {"idempotency_key": action.idempotency_key} if unconfirmed else {}
            return Patch(
                to=S.ESCALATED,
                event="policy_denied_on_retry",
                data={**action_summary(action), "reason": auth.reason},
                state=with_runtime(None, s.task.state, rt),
                outcome={
                    "reason": "policy now denies the pending action; it was not sent again",
                    **named,
                },
                effect=closed,
            )
        if auth.kind == "allow":
            return None
        approval_id = rt.get("approval_id")
        if not approval_id:
            problem: str | None = "none"
        elif grant_lapsed:
            problem = "expired"
        else:
            problem = self._grant_problem(s, str(approval_id), action, auth)
        if problem is None:
            return None
        if problem == "expired":
            note(rt, "approval_expired_before_retry", approval_id=approval_id)
        rt.pop(THROTTLES_KEY, None)  # a person decides anew: the throttle's wait is over
        reason = auth.reason or "policy requires approval"
        asked = self._ask(s, action, rt, auth, reason=reason)
        return asked if unconfirmed else replace(asked, effect=closed)

    def decision_stands(self, s: Session, action: Action) -> bool:
        """An operator may pull a lever between the policy's decision and the send (the
        autonomy cap to 0 while the intent commits): asked again, under the switches of now, it
        must still allow the action, or a grant consumed for it must still cover it."""
        if s.levers is None or current_switches() == s.levers:
            return True
        auth = self.authorize(s, action)
        if auth.kind == "allow":
            return True
        approval_id = s.runtime().get("approval_id")
        if auth.kind == "deny" or not approval_id:
            return False
        return self._grant_problem(s, str(approval_id), action, auth) is None

    def _grant_problem(
        self, s: Session, approval_id: str, action: Action, auth: wf.Authorization
    ) -> str | None:
        """Why the grant consumed with this intent no longer covers sending it again (None if
        it does, and the send's deadline is then its expiry: `grant_deadline`). The one grant
        check (`validate_grant`), its use being this very intent: approval covers the intent,
        not the number of attempts, but not past its expiry."""
        approval, now = self._approval_now(s, approval_id)
        self.grant_deadline(s, approval.expires_at, now)
        if approval.status != "used":
            return "not_granted"
        grant = Grant(
            approval_id=approval.approval_id,
            action_hash=approval.action_hash,
            policy_version=approval.policy_version,
            requester=approval.requester,
            approver=approval.approver,
            status="granted",
            expires_at=approval.expires_at,
            used_at=None,
        )
        return validate_grant(grant, action.action_hash, auth.policy_version, now).reason

    def _approval_now(self, s: Session, approval_id: str) -> tuple[ApprovalView, Any]:
        """The approval and the database's now, the worker's clock noted just before the read
        (`grant_deadline` counts from it)."""
        s.approval_read_at = self.monotonic()
        return self.store.approval_at_now(approval_id)

    def grant_deadline(self, s: Session, expires_at: Any, now: Any) -> None:
        """Note when the grant runs out on this worker's clock: its time left by the database's
        clock (`now`, read with it), counted from just before that read was sent
        (`approval_read_at`), so that a read that took long only brings the deadline closer.
        Skew between the two clocks cannot matter; only how long the worker takes from the read
        to the send does."""
        s.grant_until = s.approval_read_at + (expires_at - now).total_seconds()

    def _ask(
        self,
        s: Session,
        action: Action,
        rt: dict[str, Any],
        auth: wf.Authorization,
        *,
        reason: str,
    ) -> Patch:
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
        approval, now = self._approval_now(s, rt["approval_id"])
        if s.task.cancel_requested:
            return self.cancelled(s)
        action = Action.model_validate(rt["pending_action"])
        if approval.status == "pending" and approval.expires_at > now:
            return None  # woken early (a duplicate message): nothing was decided yet
        if approval.status == "granted":
            return self.granted(s, approval, action, rt, now)
        kind = "approval_denied" if approval.status == "denied" else "approval_expired"
        use = ApprovalUse(approval.approval_id, "expired") if approval.status == "pending" else None
        unconfirmed = self.abandon_unconfirmed(s, rt, kind.replace("_", " "))
        if unconfirmed is not None:
            return replace(unconfirmed, approval_use=use)
        rt["pending_action"] = None
        rt["approval_id"] = None
        note(rt, kind, approval_id=approval.approval_id, approver=approval.approver)
        return Patch(
            to=S.RUNNING,
            event=kind,
            data={"approval_id": approval.approval_id},
            state=with_runtime(None, s.task.state, rt),
            approval_use=use,
        )

    def granted(
        self,
        s: Session,
        approval: ApprovalView,
        action: Action,
        rt: dict[str, Any],
        now: Any,
        *,
        state: dict[str, Any] | None = None,
    ) -> Patch:
        """Revalidate before acting, with the one grant check (`policy.approvals.validate_grant`,
        the seed's `validateGrant`): used, not granted, action changed, expired, self-approval,
        policy changed — and the policy of today must still not deny it (policy is evaluated
        again on resume). `state`: the workflow's new state, when a plan's effect takes its
        grant at its turn (None: the task's, unchanged while it waited)."""
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
        self.grant_deadline(s, approval.expires_at, now)
        if problem is not None:
            rt["pending_action"] = None
            rt["approval_id"] = None
            note(rt, "approval_invalid", approval_id=approval.approval_id, reason=problem)
            return Patch(
                to=S.RUNNING,
                event="approval_invalid",
                data={"approval_id": approval.approval_id, "reason": problem},
                state=with_runtime(state, s.task.state, rt),
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
            state=with_runtime(state, s.task.state, rt),
            keep_lease=True,
            effect=EffectWrite(action, "intent"),
            # Consumed in the intent's transaction (invariant 8): single use, checked by the DB.
            approval_use=ApprovalUse(approval.approval_id, "used"),
        )
        return self.execute_after(s, intent, action)
