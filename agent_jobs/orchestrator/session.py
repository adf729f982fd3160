"""The claimed task a step works on (`Session`) and the typed view of its last note.

A step reads the task through the session (`inp` for hooks that may keep what they get, `peek`
for those that only read) and, on the effect path, commits the intent through `commit_keep`
without giving up the lease. Split out of `steps.py`, which re-exports these names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from agent_jobs.core.contracts import Action
from agent_jobs.core.copies import deep_copy
from agent_jobs.core.park import current_runtime
from agent_jobs.core.patch import Patch
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.store import Lease, PendingEvent


@dataclass
class Session:
    """A claimed task being advanced: the lease (replaced after intermediate commits) and the
    events its hooks recorded that the step's next commit writes (`pending`)."""

    lease: Lease
    workflow: wf.Workflow
    commit_keep: Callable[[Patch], Lease]
    emit: Callable[[str, dict[str, Any]], None]
    pending: list[PendingEvent] = field(default_factory=list)
    # The operator switches in force when this step's policy last decided (`StepBase.authorize`):
    # if they changed before the send, the decision is asked again (`decision_stands`).
    levers: Any = None
    # When the grant this step's intent rests on runs out, on the worker's monotonic clock (its
    # time left, read with the database's clock, added to when it was read): None without one.
    # The last check before the send (`EffectSteps.grant_lapsed`).
    grant_until: float | None = None
    # The worker's monotonic clock just before this step's last read of an approval.
    approval_read_at: float = 0.0

    @property
    def task(self) -> Any:
        return self.lease.task

    def runtime(self) -> dict[str, Any]:
        """A copy of the orchestrator's runtime entry, in the current shape (a row an earlier
        release wrote has its leftover keys folded into its park reason: `core.park`)."""
        t = self.lease.task
        return current_runtime(t.status, deep_copy(t.state.get("runtime") or {}))

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
    """The typed view of the orchestrator's last note (see `patches.note`)."""
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
