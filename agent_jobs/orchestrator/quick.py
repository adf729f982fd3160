"""The quick step: a step without I/O, computed at once and committed with compare-and-set.

A lease exists to survive I/O; a step that does none (the workflow says so through its optional
`quick(inp)` hook, and RETRY_WAIT's own step) needs none. It is computed from the row as read,
or as the previous step's message carried it, and committed with compare-and-set on the version,
lease epoch and owner as that row had them: a concurrent claimer or a duplicate delivery makes
the CAS fail, and theirs stands. A "quick" step that asks for an intermediate commit (an effect)
raises `_NeedsLease` and `Orchestrator._run` redoes it under a lease.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from agent_jobs.core.errors import StaleTransition
from agent_jobs.core.patch import Patch
from agent_jobs.core.states import Status
from agent_jobs.orchestrator.patches import wakes_to_resend
from agent_jobs.orchestrator.runner_base import RunnerBase, StepReport
from agent_jobs.orchestrator.workflow import Workflow
from agent_jobs.store import Guard, Lease, TaskRow

# The quick step logs under the runner's name, as it did before the runner was split.
log = logging.getLogger("agent_jobs.orchestrator.runner")
S = Status


def startable(row: TaskRow | None, task_id: str) -> bool:
    """A row a step may start from without reading it: this task's, runnable without a lease
    (no owner, no timer, not held). Whether it is still the task's row the commit decides."""
    return (
        row is not None
        and row.id == task_id
        and row.status in (S.RECEIVED, S.RUNNING, S.VERIFYING)
        and row.lease_owner is None
        and row.next_attempt_at is None
        and row.held_since is None
    )


class _NeedsLease(Exception):
    """A step run as quick tried an intermediate commit (an effect): redo it under a lease."""


def _refuse(patch: Patch) -> Lease:
    raise _NeedsLease()


class QuickStep(RunnerBase):
    def _quick(self, task: TaskRow, workflow: Workflow) -> bool:
        if task.status is S.RETRY_WAIT:
            # The orchestrator's own step: RETRY_WAIT -> RUNNING (or CANCELLED) needs no I/O; a
            # resend asks the policy and levers again and calls the tool, under a lease.
            return not wakes_to_resend(task.state)
        if task.status not in (S.RECEIVED, S.RUNNING, S.VERIFYING):
            return False
        hook = getattr(workflow, "quick", None)
        if hook is None:
            return False
        pseudo = Lease(task=task, owner="", epoch=task.lease_epoch, expires_at=task.updated_at)
        return bool(hook(self._session(pseudo, workflow).peek()))

    def _quick_step(
        self,
        conn: Any,
        task: TaskRow,
        workflow: Workflow,
        owner: str,
        started: float,
        *,
        carried: bool = False,
    ) -> StepReport | None:
        """One quick step: computed from `task`, committed with compare-and-set. `carried`: the
        row came with the message, not from a read; a lost CAS then returns None (start over
        from a read) instead of a stale report."""
        pseudo = Lease(task=task, owner=owner, epoch=task.lease_epoch, expires_at=task.updated_at)
        session = self._session(pseudo, workflow, quick=True)
        patch = self._dispatch_status(session)
        if patch is None:
            if carried:
                return None  # nothing to do on the carried row: look at the real one
            self.observer.step(task.status.value, time.monotonic() - started, "noop")
            return StepReport(task.id, task.status, None, tenant_id=task.tenant_id)
        try:
            # The row back only when the next step may start from it (it rides in the message).
            carry = self.settings.step_row_max_bytes > 0
            guard = Guard.carried(task) if carried else Guard.seen(task)
            done = self.store.transition(guard, patch, conn=conn, actor=owner, returning=carry)
            dispatch, new = done.dispatch, done.task
            if dispatch is not None and new is not None and startable(new, task.id):
                dispatch = self._told(dispatch, new, workflow, carry=True)
        except StaleTransition:
            if carried:
                return None  # the carried row is not the task's any more: read it
            # A duplicate delivery, or a worker that claimed it meanwhile: theirs stands.
            self.observer.stale_commit()
            return StepReport(task.id, task.status, None, stale=True, tenant_id=task.tenant_id)
        self.observer.transition(task.workflow, task.status.value, patch.to.value)
        self.observer.step(task.status.value, time.monotonic() - started, "ok")
        return StepReport(
            task.id, task.status, patch.to, tenant_id=task.tenant_id, dispatch=dispatch
        )
