"""Fakes for users' tests (and ours): drive tasks through the real orchestrator and a real store,
without a broker. Step messages are kept in a list and run one at a time, in order.

    store = Store.from_url("sqlite:///test.db"); upgrade(store.engine)
    harness = Harness(store, registry)
    task = harness.submit("acme", "req-1", TaskRequest(workflow="example@1", input={...}))
    harness.run_until_idle()
    assert harness.store.get(task.id).status is Status.COMPLETED
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from agent_jobs.config import Settings
from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import Status
from agent_jobs.orchestrator.ports import NeverLost, NullObserver, Observer
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.orchestrator.runner import Orchestrator, StepReport
from agent_jobs.orchestrator.sweepers import Sweepers
from agent_jobs.store import Dispatch, Store, TaskRow


@dataclass
class RecordingPublisher:
    """A `Publisher` that queues step messages in memory (and can lose them on purpose)."""

    queue: deque[Dispatch] = field(default_factory=deque)
    published: list[Dispatch] = field(default_factory=list)
    drop: bool = False

    def publish(self, dispatch: Dispatch) -> None:
        self.published.append(dispatch)
        if not self.drop:
            self.queue.append(dispatch)

    def finished(self, task_id: str, tenant_id: str, seconds: float) -> None:
        """No gate here (see `gated` below)."""


@dataclass
class GatedRecordingPublisher(RecordingPublisher):
    """The same, through a real dispatch gate (tenant caps, fair share, model cap)."""

    gated: Any = None

    def publish(self, dispatch: Dispatch) -> None:
        self.gated.publish(dispatch)

    def enqueue(self, dispatch: Dispatch) -> None:
        RecordingPublisher.publish(self, dispatch)

    def finished(self, task_id: str, tenant_id: str, seconds: float) -> None:
        self.gated.finished(task_id, tenant_id, seconds)


class LostBroker:
    """A `BrokerProbe` a test flips to say "the broker lost everything"."""

    def __init__(self) -> None:
        self.lost = False

    def lost_since_last_check(self) -> bool:
        lost, self.lost = self.lost, False
        return lost


TEST_SETTINGS = Settings(
    lease_ttl_s=30.0,
    dispatch_grace_s=60.0,
    retry_base_s=0.01,
    retry_max_s=0.05,
    max_attempts=3,
    max_reconcile_attempts=3,
)


class Harness:
    """The orchestrator and sweepers over a real store, with messages run inline."""

    def __init__(
        self,
        store: Store,
        workflows: WorkflowRegistry,
        settings: Settings | None = None,
        *,
        observer: Observer | None = None,
        gate: Any = None,
        model_slots: Any = None,
    ) -> None:
        """With `gate` (a `queue.gate.RedisGate`) and/or `model_slots`, step messages go through
        the real dispatch gate: held tasks, pumps and all."""
        self.store = store
        self.settings = settings or TEST_SETTINGS
        self.publisher: RecordingPublisher = RecordingPublisher()
        gated = None
        if gate is not None or model_slots is not None:
            from agent_jobs.queue.gate import GatedDispatcher  # noqa: PLC0415 - Redis when asked

            gp = GatedRecordingPublisher()
            gated = GatedDispatcher(
                gp.enqueue, store, gate, model_slots, observer or NullObserver()
            )
            gp.gated = gated
            self.publisher = gp
        self.probe = LostBroker()
        self.orchestrator = Orchestrator(
            store, workflows, self.publisher, self.settings, observer=observer
        )
        self.sweepers = Sweepers(
            store, self.publisher, self.settings, self.probe or NeverLost(), observer, gated=gated
        )
        self.reports: list[StepReport] = []

    def submit(
        self, tenant_id: str, key: str, request: TaskRequest, *, requester: str = "tester"
    ) -> TaskRow:
        return self.orchestrator.submit(tenant_id, key, request, requester=requester).task

    def run_one(self) -> StepReport | None:
        dispatch = self.publisher.queue.popleft()
        # The row the dispatch carries, as a step message would (queue/carried_rows.py).
        report = self.orchestrator.run_step(dispatch.task_id, dispatch.row, claim=dispatch.claim)
        if report is not None:
            self.reports.append(report)
        return report

    def run_until_idle(self, max_steps: int = 10_000) -> int:
        """Run queued step messages (and those they publish) until none are left."""
        steps = 0
        while self.publisher.queue:
            if steps >= max_steps:
                raise RuntimeError(f"still busy after {max_steps} steps")
            self.run_one()
            steps += 1
        return steps

    def settle(self, task_id: str, max_rounds: int = 50) -> TaskRow:
        """Run messages and sweep due timers (retries, reconcile backoff) until the task parks
        for a human or ends. Timers are made due by rewriting them in SQL, not by sleeping."""
        for _ in range(max_rounds):
            self.run_until_idle()
            task = self.store.get(task_id)
            if task.status in (Status.COMPLETED, Status.FAILED, Status.ESCALATED, Status.CANCELLED):
                return task
            if task.status is Status.APPROVAL_WAIT and not self._due(task):
                return task
            self.make_due(task_id)
            self.sweepers.all()
        return self.store.get(task_id)

    def _due(self, task: TaskRow) -> bool:
        return task.next_attempt_at is not None and task.next_attempt_at <= self.store.db_now()

    def make_due(self, task_id: str) -> None:
        """Move a RETRY_WAIT or EXEC_UNKNOWN timer to now (an approval's expiry is left alone)."""
        from sqlalchemy import update  # noqa: PLC0415 - the store owns SQLAlchemy; tests may reach in

        from agent_jobs.store.schema import tasks  # noqa: PLC0415
        from agent_jobs.store.types import db_now  # noqa: PLC0415

        with self.store.tx() as conn:
            conn.execute(
                update(tasks)
                .where(
                    (tasks.c.id == task_id)
                    & tasks.c.status.in_([Status.RETRY_WAIT.value, Status.EXEC_UNKNOWN.value])
                )
                .values(next_attempt_at=db_now())
            )

    def expire_lease(self, task_id: str) -> None:
        """Make the task's lease lapse now, as if its worker died."""
        from sqlalchemy import update  # noqa: PLC0415

        from agent_jobs.store.schema import tasks  # noqa: PLC0415
        from agent_jobs.store.types import db_now_plus  # noqa: PLC0415

        with self.store.tx() as conn:
            conn.execute(
                update(tasks)
                .where(tasks.c.id == task_id)
                .values(lease_expires_at=db_now_plus(-1.0))
            )

    def expire_approval(self, approval_id: str) -> None:
        from sqlalchemy import update  # noqa: PLC0415

        from agent_jobs.store.schema import approvals, tasks  # noqa: PLC0415
        from agent_jobs.store.types import db_now_plus  # noqa: PLC0415

        with self.store.tx() as conn:
            row = conn.execute(
                update(approvals)
                .where(approvals.c.id == approval_id)
                .values(expires_at=db_now_plus(-1.0))
                .returning(approvals.c.task_id)
            ).first()
            if row is not None:
                # The timer fell due after the task's last dispatch, as a real expiry does;
                # the sweepers skip a timer that was already dispatched since it fell due.
                conn.execute(
                    update(tasks)
                    .where((tasks.c.id == row[0]) & (tasks.c.status == Status.APPROVAL_WAIT.value))
                    .values(next_attempt_at=db_now_plus(-1.0), dispatched_at=db_now_plus(-2.0))
                )
