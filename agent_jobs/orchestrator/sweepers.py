"""Beat sweepers. Each is idempotent and safe to run twice at once (invariant 10); each costs
what is due, through its partial index; each publishes only what it took in its transaction."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from agent_jobs.config import Settings
from agent_jobs.core.holds import HoldReason
from agent_jobs.core.patch import Patch
from agent_jobs.core.states import Status
from agent_jobs.orchestrator.archive import writer_for
from agent_jobs.orchestrator.ports import (
    BrokerProbe,
    HeldPump,
    NullObserver,
    Observer,
    Publisher,
)
from agent_jobs.orchestrator.steps import lease_lost, worker_lost
from agent_jobs.orchestrator.sweep_kinds import KINDS
from agent_jobs.store import Dispatch, Store, TaskRow

log = logging.getLogger(__name__)

BROKER_LOST_MARK = "broker_lost_before"
MAX_BATCHES = 200  # one sweep call moves at most MAX_BATCHES * batch tasks, then yields


@dataclass
class SweepReport:
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class Sweepers:
    def __init__(
        self,
        store: Store,
        publisher: Publisher,
        settings: Settings,
        probe: BrokerProbe,
        observer: Observer | None = None,
        *,
        gated: HeldPump | None = None,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.gated = gated
        self._rand = rand  # the jitter of a lapsed lease's retry backoff
        self.store = store
        self.publisher = publisher
        self.settings = settings
        self.probe = probe
        self.observer = observer or NullObserver()

    def run(self, kind: str) -> int:
        if kind == "all":
            return self.all().total
        if kind not in KINDS:
            raise ValueError(f"unknown sweeper {kind!r}; one of {', '.join(KINDS)}, all")
        return int(getattr(self, kind)())

    def all(self) -> SweepReport:
        return SweepReport({kind: int(getattr(self, kind)()) for kind in KINDS})

    def webhooks(self) -> int:
        """Webhook deliveries whose timer is due back to their tenant's queue, and the warnings
        for approvals about to expire (notify/sweeper.py)."""
        from agent_jobs.notify.sweeper import sweep_webhooks  # noqa: PLC0415 - only when run
        from agent_jobs.store.webhooks import WebhookStore  # noqa: PLC0415

        return sweep_webhooks(WebhookStore(self.store.engine), self.settings)

    def _drain(self, kind: str, take: Callable[[], list[Dispatch]]) -> int:
        total = 0
        for _ in range(MAX_BATCHES):
            batch = take()
            self._publish_all(kind, batch)
            total += len(batch)
            if len(batch) < self.settings.sweep_batch:
                break
        return total

    def _publish_all(self, kind: str, batch: list[Dispatch]) -> None:
        """Publish what a sweep took (its dispatches are recorded on the rows already). A row
        whose message cannot be published while others' can is the row's fault (a tenant the
        broker or the gate refuses): it is dead-lettered, and the rest go on. When none can
        be, the broker (or the gate) is at fault, not the rows: nothing is dead-lettered, and
        the rows, dispatched on paper, are repeated after the grace."""
        failed: list[tuple[Dispatch, Exception]] = []
        for dispatch in batch:
            try:
                self.publisher.publish(dispatch)
            except Exception as exc:
                failed.append((dispatch, exc))
        if not failed:
            return
        if len(failed) == len(batch):
            first, error = failed[0]
            log.error(
                "sweeper %s: no step message of %d could be published (first, for %s: %s); "
                "the sweeper repeats them",
                kind, len(batch), first.task_id, _reason(error),
            )  # fmt: skip
            return
        for refused, error in failed:
            reason = f"its step message could not be published: {_reason(error)}"
            workflow = self.store.set_aside_task(refused.task_id, kind, reason, undue={})
            if workflow is not None:
                self._set_aside(kind, refused.task_id, workflow, reason)

    def _set_aside(self, kind: str, task_id: str, workflow: str, reason: str) -> None:
        """A row a sweeper could not move and dead-lettered instead: a log line and the
        dead-letter metric, so that a person looks."""
        self.observer.dead_letter(workflow)
        log.warning("sweeper %s dead-lettered %s (%s): %s", kind, task_id, workflow, reason)

    def cutoff(self) -> datetime:
        """Dispatches older than this are presumed lost: the grace period, or the moment the
        broker was found to have lost its messages, whichever is later."""
        now = self.store.db_now()
        cutoff = now - timedelta(seconds=self.settings.dispatch_grace_s)
        if self.probe.lost_since_last_check():
            # A new broker database looks the same as a flushed one (no sentinel yet); on a
            # first start there is simply nothing waiting to re-dispatch.
            log.warning(
                "the broker's sentinel is gone (a new broker, or one that lost its messages): "
                "re-dispatching every waiting task"
            )
            self.store.set_mark_now(BROKER_LOST_MARK)
        mark = self.store.mark(BROKER_LOST_MARK)
        if mark is not None and mark > cutoff:
            cutoff = mark
        return cutoff

    def lease(self) -> int:
        """Lapsed leases: an EXECUTING task goes to EXEC_UNKNOWN (`lease_lost`); any other
        step's worker died, a failed attempt (`worker_lost`) that waits out its backoff. The
        count is of tasks taken, most of which publish nothing (their retry timer does)."""
        taken = 0
        # Dead letters of failed attempts, counted once committed: a row set aside instead (its
        # patch refused) is counted by `_set_aside`.
        giving_up: dict[str, str] = {}

        def lost(task: TaskRow) -> Patch:
            nonlocal taken
            taken += 1
            if task.status is not Status.EXECUTING:
                # Its worker died mid-step: a failed attempt, bounded by max_attempts.
                patch = worker_lost(task, self.settings, self._rand())
                if patch.dead_letter is not None:
                    giving_up[task.id] = task.workflow
                return patch
            self.observer.reconciled("entered_unknown")  # an EXECUTING task whose holder vanished
            return lease_lost(task, by="sweeper")

        def set_aside(task: TaskRow, reason: str) -> None:
            giving_up.pop(task.id, None)
            self._set_aside("lease", task.id, task.workflow, reason)

        total = 0
        for _ in range(MAX_BATCHES):
            taken = 0
            batch = self.settings.sweep_batch
            self._publish_all("lease", self.store.sweep_expired_leases(batch, lost, set_aside))
            for workflow in giving_up.values():
                self.observer.dead_letter(workflow)
            giving_up.clear()
            total += taken
            if taken < batch:
                break
        if total:
            self.observer.lease_expired(total)
        return total

    def dispatch(self) -> int:
        cutoff = self.cutoff()
        return self._drain(
            "dispatch", lambda: self.store.sweep_lost_dispatch(self.settings.sweep_batch, cutoff)
        )

    def retry(self) -> int:
        cutoff = self.cutoff()
        return self._drain(
            "retry",
            lambda: self.store.sweep_due(Status.RETRY_WAIT, self.settings.sweep_batch, cutoff),
        )

    def unknown(self) -> int:
        cutoff = self.cutoff()
        return self._drain(
            "unknown",
            lambda: self.store.sweep_due(Status.EXEC_UNKNOWN, self.settings.sweep_batch, cutoff),
        )

    def held(self) -> int:
        """Tasks held at the dispatch gate whose turn has come (a slot of a dead holder expired,
        a fair-share position moved on, a model slot freed): the pump's safety net. And steps a
        workflow deferred (`Deferred`: a shared resource of its own was busy), which nothing
        else releases: gate or no gate, a sweep lets one out once it has waited as long as it
        has been deferring (at least 2 s, at most `AGENT_JOBS_HELD_POLL_MAX_S`: `holds.
        take_held`), and it defers again if the resource is still busy (backoff, not a loop)."""
        moved = self.gated.sweep() if self.gated is not None else 0
        taken = self.store.take_held(HoldReason.DEFERRED.value, limit=self.settings.sweep_batch)
        self._publish_all("held", taken)
        return moved + len(taken)

    def approvals(self) -> int:
        cutoff = self.cutoff()
        expired = self._drain(
            "approvals", lambda: self.store.sweep_expired_approvals(self.settings.sweep_batch)
        )
        due = self._drain(
            "approvals",
            lambda: self.store.sweep_due(Status.APPROVAL_WAIT, self.settings.sweep_batch, cutoff),
        )
        return expired + due

    def archive(self) -> int:
        """Finished tasks older than `AGENT_JOBS_TASK_RETENTION_DAYS`: archived to
        `AGENT_JOBS_ARCHIVE_DIR`, then pruned with their events, effects and approvals, in
        batches, oldest first (see store/archive.py). Growth stays bounded."""
        days = self.settings.task_retention_days
        if days <= 0:
            return 0
        write = writer_for(self.settings.archive_dir)

        def set_aside(task: TaskRow, reason: str) -> None:
            self._set_aside("archive", task.id, task.workflow, reason)

        total = 0
        for _ in range(MAX_BATCHES):
            n = self.store.prune_finished(
                days * 86_400, self.settings.sweep_batch, write, set_aside
            )
            total += n
            if n < self.settings.sweep_batch:
                break
        return total

    def retention(self) -> int:
        """Rejected submissions older than `AGENT_JOBS_REJECTED_RETENTION_DAYS` (they explain
        why a submission created nothing; kept for a while, not forever). Tasks and their
        events are the record of what was done and are never pruned here."""
        days = self.settings.rejected_retention_days
        if days <= 0:
            return 0
        total = 0
        for _ in range(MAX_BATCHES):
            n = self.store.prune_rejected_submissions(days * 86_400, self.settings.sweep_batch)
            total += n
            if n < self.settings.sweep_batch:
                break
        return total


def _reason(exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
