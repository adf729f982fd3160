"""The orchestrator: claim a task, run the step for its status, commit, publish the next step.

Crash anywhere and nothing is lost: before the commit the lease expires and the sweeper records
a failed attempt (the worker lost: retried after backoff, a dead letter after max attempts; a
redelivered quick step runs under a lease so that its death is counted too); after the commit
the dispatch is recorded in the same row, and with late acks the message being processed is
redelivered if the worker dies before publishing the next one.

`Orchestrator` is put together from mixins (see `runner_base`). This module holds the entry
points (submit, cancel, an approval's decision), `run_step` and the start of a step (the read
or the claim, and which path it takes), the session a step runs in, the table from a status to
its step, and `run_step_waiting`, which rides out a database that cannot be reached. The quick
step is in `quick`, the leased step and its commit in `leased`. `StepReport` and `startable`
are re-exported here, where the worker, the test harness and tests import them.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from agent_jobs.config import Settings
from agent_jobs.core.contracts import ApprovalView, TaskRequest
from agent_jobs.core.errors import Deferred
from agent_jobs.core.patch import Patch
from agent_jobs.core.states import TERMINAL, Status
from agent_jobs.orchestrator.leased import LeasedStep
from agent_jobs.orchestrator.leases import LeaseKeeper
from agent_jobs.orchestrator.outage import StepInterrupted, backoff_s, db_unavailable
from agent_jobs.orchestrator.ports import NullObserver, Observer, Publisher
from agent_jobs.orchestrator.quick import QuickStep, _NeedsLease, _refuse, startable
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.orchestrator.runner_base import StepReport
from agent_jobs.orchestrator.steps import Session, Steps
from agent_jobs.orchestrator.workflow import Workflow
from agent_jobs.store import CancelResult, CreateResult, Dispatch, Lease, Store, TaskRow

__all__ = ["STEP_COST_FLOOR_S", "Orchestrator", "StepReport", "startable"]

log = logging.getLogger(__name__)
S = Status


# Charged per step on top of its hooks' time, so a tenant of very many tiny steps still pays.
STEP_COST_FLOOR_S = 0.001


class _HookClock:
    def __init__(self) -> None:
        self.seconds = 0.0


class _Timed:
    """The workflow, with every hook timed: a step's cost is what its hooks took (model calls,
    tool calls), not the platform's overhead around them, which every tenant pays alike."""

    def __init__(self, inner: Any, clock: _HookClock) -> None:
        self._inner = inner
        self._clock = clock

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.monotonic()
            try:
                return attr(*args, **kwargs)
            finally:
                self._clock.seconds += time.monotonic() - t0

        return timed


class Orchestrator(QuickStep, LeasedStep):
    def __init__(
        self,
        store: Store,
        workflows: WorkflowRegistry,
        publisher: Publisher,
        settings: Settings,
        *,
        observer: Observer | None = None,
        keeper: LeaseKeeper | None = None,
        rand: Callable[[], float] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.workflows = workflows
        self.publisher = publisher
        self.settings = settings
        self.observer = observer or NullObserver()
        self.keeper = keeper or LeaseKeeper(store, settings.lease_ttl_s)
        self._local = threading.local()
        # How `run_step_waiting` pauses between tries (tests pass a recorder) and draws jitter.
        self._sleep = sleep
        self._rand = rand or random.random
        # Tries of a step that found the database unreachable (this process, all threads).
        self.outage_retries = 0
        self.steps = Steps(
            store, settings, self.observer, rand=rand or random.random, monotonic=monotonic
        )

    # -- entry points used by the API, the CLI and the client -------------------------------

    def submit(
        self,
        tenant_id: str,
        idempotency_key: str,
        request: TaskRequest,
        *,
        requester: str,
        via: str = "python",
    ) -> CreateResult:
        """Create (or find) the task and publish its first step."""
        # Unknown workflow or invalid input: refused before anything is written, so the caller
        # can correct the payload and submit again under the same key.
        workflow = self.workflows.get(request.workflow)
        check = getattr(workflow, "check_input", None)
        if check is not None:
            check(dict(request.input))
        result = self.store.create_or_get(
            tenant_id,
            idempotency_key,
            request,
            requester=requester,
            pinned={
                "workflow": request.workflow,
                **workflow.pinned(),
                # The tenant's release (rollout or explicit pin), if any: route, prompt, flags.
                **self.store.release_pins(tenant_id, request.workflow),
            },
        )
        task = result.task
        if result.created:
            self.observer.task_created(request.workflow, via)
        # A repeated request for a task nobody has started yet publishes again: if the first
        # publish was lost with a crashed API process, the client's retry repairs it at once.
        if result.created or (task.status is S.RECEIVED and task.lease_owner is None):
            # The first step starts from the row just written (returned by the insert, or read
            # for a repeated request) instead of reading it again: a quick first step is told
            # the row, a leased one to claim at once. Hints, as after any commit.
            dispatch = Dispatch(task.id, task.tenant_id)
            self.publisher.publish(self._told(dispatch, task, workflow, carry=True))
        return result

    def cancel(self, task_id: str, tenant_id: str | None = None) -> CancelResult:
        result = self.store.request_cancel(task_id, tenant_id)
        if result.dispatch is not None:
            self.publisher.publish(result.dispatch)
        return result

    def decide_approval(
        self,
        approval_id: str,
        approver: str,
        *,
        grant: bool,
        tenant_id: str | None = None,
        note: str = "",
    ) -> ApprovalView:
        result = self.store.decide_approval(
            approval_id, approver, grant=grant, tenant_id=tenant_id, note=note
        )
        if result.dispatch is not None:
            self.publisher.publish(result.dispatch)
        return result.approval

    # -- the step ---------------------------------------------------------------------------

    def run_step_waiting(
        self, task_id: str, row: TaskRow | None = None, *, claim: bool = False
    ) -> StepReport | None:
        """`run_step`, riding out a database that cannot be reached (see orchestrator/outage.py).

        A try that stops on an unreachable database is tried again after a pause (0.1 s
        doubling up to `outage_retry_max_s`), from a fresh read, first giving back the lease it
        could not release; not a failed attempt of the task. Once the pauses add up to
        `outage_wait_s` the next try is an ordinary `run_step`: its failure is recorded and
        counted, or, if the database is still away, raised (the message is acked and the
        sweepers take the task over, as before). Counted in `outage_retries`."""
        cfg = self.settings
        waited = 0.0
        stranded: Lease | None = None
        for attempt in itertools.count():
            tolerant = waited < cfg.outage_wait_s
            try:
                if stranded is not None:
                    # Fenced by epoch and owner: a lease that lapsed or moved on is left alone.
                    self.store.release(stranded)
                    stranded = None
                self._local.tolerant = tolerant
                return self.run_step(task_id, row, claim=claim)
            except StepInterrupted as exc:
                stranded = exc.lease or stranded
                cause: BaseException = exc.__cause__ or exc
            except Exception as exc:
                if not (tolerant and db_unavailable(exc)):
                    raise
                cause = exc
            finally:
                self._local.tolerant = False
            pause = min(
                backoff_s(attempt, cfg.outage_retry_max_s, self._rand()), cfg.outage_wait_s - waited
            )
            self.outage_retries += 1
            log.warning(
                "step for %s: the database cannot be reached (%s); try %d again in %.2f s",
                task_id, _first_line(cause), attempt + 2, pause,
            )  # fmt: skip
            self._sleep(pause)
            waited += pause
            # After an outage the carried row and the claim hint may be stale: read afresh.
            row, claim = None, False
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _outage(self, exc: BaseException) -> bool:
        """Whether this step, run by `run_step_waiting` with tries left, stopped because the
        database could not be reached: then it is tried again, not recorded as a failure."""
        return bool(getattr(self._local, "tolerant", False)) and db_unavailable(exc)

    def _interrupted(self, task_id: str, lease: Lease | None, exc: BaseException) -> Exception:
        """The `StepInterrupted` to raise for `exc`, after trying to give `lease` back."""
        if lease is not None:
            self.keeper.drop(lease)
            try:
                self.store.release(lease)
                lease = None
            except Exception:
                log.debug("could not release the lease of %s", task_id, exc_info=True)
        interrupted = StepInterrupted(task_id, lease)
        interrupted.__cause__ = exc
        return interrupted

    def run_step(
        self, task_id: str, row: TaskRow | None = None, *, claim: bool = False
    ) -> StepReport | None:
        """Advance `task_id` by one step if this worker can claim it; None if it could not.

        The claimable row is read first. A step that does no I/O (the workflow says so through
        its optional `quick(inp)` hook, and RETRY_WAIT's own step) is computed at once and
        committed with compare-and-set on the version, lease epoch and owner as read: a lease
        exists to survive I/O, and a step without I/O needs none — a concurrent claimer or a
        duplicate delivery makes the CAS fail, and theirs stands. Any other step takes a fenced
        lease (the atomic claim) and runs under it.

        `row`: the task as the previous step's commit returned it, carried by this step's
        message when that step was quick and this one is too (`Dispatch.row`, signed by the
        queue layer). It stands in for the read: the compare-and-set pins version, epoch and
        owner as that row had them and that the gate holds nothing, so it commits only on the
        very row it was computed from; if anything moved since, the step starts over from a read.

        `claim`: the previous step's commit expected this one to need a lease (`Dispatch.claim`),
        so it is claimed at once, the claim returning the row: one round trip where the read
        and then the claim take two. Should the step turn out quick after all, it runs under the
        lease, which costs one write more than a quick step and is as correct.
        """
        started = time.monotonic()
        self._local.hooks = _HookClock()
        carried = row if startable(row, task_id) else None
        report = self._run(task_id, started, carried, claim=claim and carried is None)
        if report is None:
            return None
        # The end of a claimed step, however it ended: give back the gate slot, charging the
        # tenant what the step consumed — the time in its workflow's hooks (model and tool calls),
        # plus a floor so that no step is free — before this task's next step asks for one.
        cost = self._local.hooks.seconds + STEP_COST_FLOOR_S
        self.publisher.finished(task_id, report.tenant_id, cost)
        if report.dispatch is not None:
            self.publisher.publish(report.dispatch)  # only now: the transaction has committed
        if report.to_status in TERMINAL:
            self.observer.task_ended(task_id)  # committed, quick or leased: e.g. its trace
        return report

    def _run(
        self, task_id: str, started: float, row: TaskRow | None, *, claim: bool
    ) -> StepReport | None:
        owner = self.settings.lease_owner()
        lease: Lease | None = None
        try:
            # The read, and either the quick step's compare-and-set or the claim: on Postgres
            # two statements, two round trips, no transaction around them (`Store.step_conn`);
            # one, when the message carried the row or said to claim at once.
            with self.store.step_conn() as conn:
                begun = self._begin(conn, task_id, owner, started, row, claim=claim)
            if not isinstance(begun, Lease):
                return begun  # a quick step's report, or None: nothing for this worker to do
            lease = begun
        except Deferred as exc:
            # A quick step wanting a shared resource: rolled back, nothing written; hold it.
            self.store.hold(task_id, exc.hold_for)
            self.observer.held(exc.hold_for)
            return StepReport(task_id, S.RUNNING, None, tenant_id=self.store.get(task_id).tenant_id)
        except _NeedsLease:
            # The "quick" step wanted an effect after all: rolled back; run it under a lease.
            lease = self.store.claim(task_id, owner, self.settings.lease_ttl_s)
        except Exception as exc:
            if self._outage(exc):
                raise self._interrupted(task_id, None, exc) from exc
            # A quick step raised (a hook, a write the database refused): rolled back. Record
            # the failed attempt under a lease, so it is counted and bounded like any other.
            log.exception("step for %s failed", task_id)
            lease = self.store.claim(task_id, owner, self.settings.lease_ttl_s)
            if lease is None:
                return None
            self.keeper.hold(lease)
            try:
                return self._record_failure(self._session_for(lease), exc)
            finally:
                self.keeper.drop(lease)
        if lease is None:
            return None  # another worker claimed it first
        return self._leased_step(lease, started)

    def _begin(
        self,
        conn: Any,
        task_id: str,
        owner: str,
        started: float,
        row: TaskRow | None,
        *,
        claim: bool,
    ) -> StepReport | Lease | None:
        """On the step's connection: run the step at once if it is quick (its report), or take
        its lease (the leased step then runs off this connection); None if it is not ours to
        run (owned elsewhere, parked, or terminal: a duplicate delivery is harmless)."""
        ttl = self.settings.lease_ttl_s
        if claim:
            return self.store.claim(task_id, owner, ttl, conn=conn)
        if row is not None:
            workflow = self._workflow(row)
            if workflow is not None and self._quick(row, workflow):
                done = self._quick_step(conn, row, workflow, owner, started, carried=True)
                if done is not None:
                    return done
            # Not quick after all, or the row moved on: start over from a read.
        task = self.store.peek_claimable(conn, task_id)
        if task is None:
            return None
        workflow = self._workflow(task)
        if workflow is not None and self._quick(task, workflow):
            return self._quick_step(conn, task, workflow, owner, started)
        return self.store.claim(task_id, owner, ttl, conn=conn, seen=task)

    def _workflow(self, task: TaskRow) -> Workflow | None:
        return self.workflows.get(task.workflow) if task.workflow in self.workflows else None

    def _session(self, lease: Lease, workflow: Workflow, *, quick: bool = False) -> Session:
        hooks = getattr(self._local, "hooks", None)
        timed: Any = _Timed(workflow, hooks) if hooks is not None else workflow
        session = Session(
            lease=lease,
            workflow=timed,
            commit_keep=_refuse if quick else (lambda patch: self._commit_keep(session, patch)),
            emit=(
                (lambda type_, data: self._emit(lease.task_id, type_, data))
                if quick
                else (lambda type_, data: self._record(session, type_, data))
            ),
        )
        return session

    def _dispatch_status(self, s: Session) -> Patch | None:
        status = s.task.status
        if status is S.RECEIVED:
            return self.steps.received(s)
        if status is S.RUNNING:
            return self.steps.running(s)
        if status is S.EXECUTING:
            return self.steps.executing_reclaimed(s)
        if status is S.EXEC_UNKNOWN:
            return self.steps.exec_unknown(s)
        if status is S.VERIFYING:
            return self.steps.verifying(s)
        if status is S.APPROVAL_WAIT:
            return self.steps.approval_wait(s)
        if status is S.RETRY_WAIT:
            return self.steps.retry_wait(s)
        raise AssertionError(f"claimed a task in {status}")  # terminal tasks are never claimed


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
