"""The leased step: run under a fenced lease, then committed (or its failure recorded).

Any step that is not quick runs here, under the lease `Orchestrator._run` claimed (kept alive by
the `LeaseKeeper` while it runs). The step's patch is committed fenced by the lease, with the
events its hooks recorded in the same transaction; a commit that loses the race (a zombie's
late result) is kept as an event and changes nothing; a step that raised is recorded as a failed
attempt under the same lease. An effect's intent is committed on the way, keeping the lease
(`_commit_keep`). After any commit, `_told` adds to the next step's message what that step may
skip: its read (the row rides along) or the read before its claim.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from agent_jobs.core.errors import ApprovalError, Deferred, StaleTransition, UnknownWorkflow
from agent_jobs.core.patch import Patch
from agent_jobs.core.states import EFFECT_IN_FLIGHT, Status
from agent_jobs.orchestrator.runner_base import RunnerBase, StepReport
from agent_jobs.orchestrator.steps import Session
from agent_jobs.orchestrator.workflow import Workflow
from agent_jobs.store import Dispatch, Guard, Lease, PendingEvent, TaskRow

# The leased step logs under the runner's name, as it did before the runner was split.
log = logging.getLogger("agent_jobs.orchestrator.runner")
S = Status


def _row_after(task: TaskRow, patch: Patch) -> TaskRow:
    """`task` as a commit of `patch` leaves it, as far as the workflow's `quick` hook looks:
    status and state; no lease, no timer (a leased commit's new row is not read back)."""
    return replace(
        task,
        status=patch.to,
        state=task.state if patch.state is None else patch.state,
        lease_owner=None,
        lease_expires_at=None,
        next_attempt_at=None,
    )


class _MissingWorkflow:
    """Stands in for a workflow that is not registered, so the task can be stopped cleanly."""

    name = "missing"
    version = 0


_MISSING: Any = _MissingWorkflow()


class LeasedStep(RunnerBase):
    def _leased_step(self, lease: Lease, started: float) -> StepReport:
        self.keeper.hold(lease)
        from_status = lease.task.status
        result = "error"
        try:
            report = self._advance(lease)
            result = "stale" if report.stale else ("noop" if report.to_status is None else "ok")
            if report.failed:
                result = "error"
            return report
        finally:
            self.keeper.drop(lease)
            self.observer.step(from_status.value, time.monotonic() - started, result)

    def _advance(self, lease: Lease) -> StepReport:
        task = lease.task
        workflow = self._workflow(task)
        if workflow is None:
            session = self._session(lease, _MISSING)
            reason = str(UnknownWorkflow(task.workflow, self.workflows.names()))
            return self._finish(session, self.steps.stop(session, reason, prefer=S.ESCALATED))
        session = self._session(lease, workflow)
        try:
            return self._advance_session(session)
        finally:
            self._flush(session)

    def _advance_session(self, session: Session) -> StepReport:
        task = session.lease.task
        try:
            patch = self._dispatch_status(session)
        except StaleTransition as exc:
            # An intermediate commit (the intent) lost the race: another worker owns the task.
            self.observer.stale_commit()
            log.info("%s", exc)
            return StepReport(task.id, task.status, None, stale=True, tenant_id=task.tenant_id)
        except ApprovalError as exc:
            # The grant was consumed or expired between our check and the intent's transaction.
            log.info("%s", exc)
            woke = self.store.release_step(session.lease)
            return StepReport(task.id, task.status, None, tenant_id=task.tenant_id, dispatch=woke)
        except Deferred as exc:
            # A shared resource is saturated (the model cap): no transition, no failure; the
            # task is held without its lease until the gate's pump lets it out again.
            self.store.hold(task.id, exc.hold_for, lease=session.lease)
            self.observer.held(exc.hold_for)
            return StepReport(task.id, task.status, None, tenant_id=task.tenant_id)
        except Exception as exc:
            if self._outage(exc):
                raise self._interrupted(task.id, session.lease, exc) from exc
            log.exception("step for %s (%s) failed", task.id, task.status)
            return self._record_failure(session, exc)
        if patch is None:
            # Nothing to do now; but a decision (or a cancel) that came while this step held
            # the lease had its message dropped: the release hands the task a new one.
            woke = self.store.release_step(session.lease)
            return StepReport(task.id, task.status, None, tenant_id=task.tenant_id, dispatch=woke)
        try:
            return self._finish(session, patch)
        except Exception as exc:
            if self._outage(exc):
                raise self._interrupted(task.id, session.lease, exc) from exc
            # The database refused the transition (rolled back; the lease is still ours).
            log.exception("commit for %s (%s) failed", task.id, task.status)
            return self._record_failure(session, exc)

    def _session_for(self, lease: Lease) -> Session:
        workflow = self._workflow(lease.task)
        return self._session(lease, workflow if workflow is not None else _MISSING)

    def _record_failure(self, s: Session, exc: BaseException) -> StepReport:
        """Commit the failed attempt (`Steps.failed`) under the step's lease. Only if that
        commit itself fails (the database is down) is the lease released and the error raised:
        the sweepers then find the task again, and nothing was counted."""
        try:
            report = self._finish(s, self.steps.failed(s, exc))
        except Exception:
            log.exception("could not record the failed attempt of %s", s.lease.task_id)
            try:
                self.store.release(s.lease)
            except Exception:
                log.exception("could not release the lease of %s", s.lease.task_id)
            raise
        return replace(report, failed=True)

    def _finish(self, s: Session, patch: Patch) -> StepReport:
        patch = self.steps.with_effects(s, patch)
        frm = s.lease.task.status
        events = tuple(s.pending)
        try:
            # The usual end of a step gives the lease back and needs no new row read back.
            dispatch = self.store.transition(
                Guard.lease(s.lease), patch, events=events,
                lease_ttl_s=self.settings.lease_ttl_s, returning=patch.keep_lease,
            ).dispatch  # fmt: skip
        except StaleTransition as exc:
            self.observer.stale_commit()
            self._flush(s)  # what the step did is recorded, its result is not
            # A late result (a zombie's) is kept as an event and changes nothing.
            self._emit(
                s.lease.task_id,
                "late_result_dropped",
                {"from": frm.value, "to": patch.to.value, "event": patch.event, "data": patch.data},
            )
            log.info("%s", exc)
            return StepReport(
                s.lease.task_id, frm, None, stale=True, tenant_id=s.lease.task.tenant_id
            )
        del s.pending[: len(events)]
        self.observer.transition(s.lease.task.workflow, frm.value, patch.to.value)
        workflow = self._workflow(s.lease.task)
        if dispatch is not None and workflow is not None:
            after = _row_after(s.lease.task, patch)
            dispatch = self._told(dispatch, after, workflow, carry=False)
        return StepReport(
            s.lease.task_id,
            frm,
            patch.to,
            tenant_id=s.lease.task.tenant_id,
            dispatch=dispatch,
        )

    def _told(
        self, dispatch: Dispatch, after: TaskRow, workflow: Workflow, *, carry: bool
    ) -> Dispatch:
        """The next step's message, told what that step may skip: a quick step its read (it
        starts from `after`, when `carry`: the row the commit returned), a leased step the read
        before its claim (`Dispatch.claim`). Hints, judged on the row as the commit left it:
        a workflow's `quick` hook that raises gives none (the step itself then runs the hook
        again, and a failure there is counted like any step's), never a failed commit or
        submit."""
        try:
            quick = self._quick(after, workflow)
        except Exception:
            log.warning(
                "quick hook of %s raised; no hint for its next step", after.id, exc_info=True
            )
            return dispatch
        if quick:
            return dispatch._replace(row=after) if carry else dispatch
        return dispatch._replace(claim=True)

    def _commit_keep(self, s: Session, patch: Patch) -> Lease:
        frm = s.lease.task.status
        events = tuple(s.pending)
        result = self.store.transition(
            Guard.lease(s.lease), patch, lease_ttl_s=self.settings.lease_ttl_s, events=events
        )
        del s.pending[: len(events)]
        assert result.lease is not None
        self.observer.transition(s.lease.task.workflow, frm.value, patch.to.value)
        return result.lease

    def _emit(self, task_id: str, type_: str, data: dict[str, Any]) -> None:
        try:
            self.store.append_event(task_id, type_, data)
        except Exception:  # an audit append must not turn a done effect into a failed step
            log.exception("could not append %s event to %s", type_, task_id)

    def _record(self, s: Session, type_: str, data: dict[str, Any]) -> None:
        """An event a hook recorded: held for the step's next commit, which writes it in the
        same transaction (a model call or a read costs no commit of its own). Once an effect
        is in flight (EXECUTING, EXEC_UNKNOWN) it is written at once: the audit record of a
        call that may have reached a system of record must outlive this worker."""
        if s.lease.task.status in EFFECT_IN_FLIGHT:
            self._emit(s.lease.task_id, type_, data)
        else:
            s.pending.append(PendingEvent(type_, data, time.monotonic()))

    def _flush(self, s: Session) -> None:
        """Write what a step recorded but did not commit (it ended without a transition, lost
        its task, or failed to record its failure): the calls happened all the same."""
        events, s.pending = s.pending, []
        if events:
            try:
                self.store.append_events(s.lease.task_id, events)
            except Exception:  # an audit append must not turn a finished step into a failure
                log.exception("could not append %d events to %s", len(events), s.lease.task_id)
