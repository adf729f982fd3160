"""Fakes for users' tests (and ours): drive tasks through the real orchestrator and a real store,
without a broker. Step messages are kept in a list and run one at a time, in order.

    store = Store.from_url("sqlite:///test.db"); upgrade(store.engine)
    harness = Harness(store, registry)
    task = harness.submit("acme", "req-1", TaskRequest(workflow="example@1", input={...}))
    harness.run_until_idle()
    assert harness.store.get(task.id).status is Status.COMPLETED

For an agent of your own (`agent_jobs.agents.Agent`): `AgentHarness` with a `ScriptedModel`
(proposals built with `tool_calls` / `final_draft`), `FakeSystem` for its business system, and
a worker that dies between two steps (`crash_next_effect`, then `recover`). Installing
agent_jobs also gives pytest the fixtures `store` (this store on SQLite, migrated) and
`fake_system` (`agent_jobs.testing_fixtures`, a pytest plugin).
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
        self.store.make_due(task_id)

    def expire_lease(self, task_id: str) -> None:
        """Make the task's lease lapse now, as if its worker died."""
        self.store.lapse_lease(task_id)

    def expire_approval(self, approval_id: str) -> None:
        """The approval expires now; its waiting task's timer falls due."""
        self.store.lapse_approval(approval_id)


# -- testing your own agent (agent_jobs.agents) --------------------------------------------------


def tool_calls(tool: str, **args: Any) -> dict[str, Any]:
    """A model proposal calling one tool (for `ScriptedModel`)."""
    return {"kind": "tool_calls", "calls": [{"tool": tool, "args": args}], "rationale": ""}


def final_draft(text: str, *claims: dict[str, Any]) -> dict[str, Any]:
    """A model proposal drafting the reply with its claims (for `ScriptedModel`)."""
    return {"kind": "final_draft", "draft": {"text": text, "claims": list(claims)}}


class ScriptedModel:
    """A model for an agent's tests: plays `proposals` in order (the last one repeats), or
    answers with `rules(request)`; records every request it was asked. Served through the real
    gateway (schema validation with one repair, budgets, usage), as the scripted provider."""

    def __init__(self, proposals: Any = (), *, rules: Any = None) -> None:
        from agent_jobs.gateway import ScriptedProvider  # noqa: PLC0415 - keep import light

        self._proposals = list(proposals)
        if not self._proposals and rules is None:
            raise ValueError("a scripted model needs proposals or rules")
        self._rules = rules
        self.asked: list[Any] = []
        self.provider = ScriptedProvider(self._answer)

    def _answer(self, request: Any) -> Any:
        self.asked.append(request)
        if self._rules is not None:
            return self._rules(request)
        return self._proposals[min(len(self.asked), len(self._proposals)) - 1]

    def gateway(self) -> Any:
        from agent_jobs.gateway.testing import scripted_gateway  # noqa: PLC0415

        return scripted_gateway(self.provider)


class FakeSystem:
    """A fake system of record for an agent's tests, in memory: records you seed and read,
    effects applied once per idempotency key (the same key answers the same), the lookup by
    key, and faults on cue (`fail_next`): `timeout_after_commit` (applies, then the caller
    times out: the outcome is unknown), `unavailable` (refused before anything happened), or
    `reject:<code>` (a definitive refusal)."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], dict[str, Any]] = {}
        self.effects: dict[str, dict[str, Any]] = {}
        self.applied = 0  # effects that changed something (a replay does not count)
        self._faults: deque[str] = deque()

    def seed(self, kind: str, ident: str, **fields: Any) -> None:
        self.records[(kind, ident)] = dict(fields)

    def read(self, kind: str, ident: str) -> dict[str, Any]:
        from agent_jobs.tools.adapter import ServiceRejected  # noqa: PLC0415

        found = self.records.get((kind, ident))
        if found is None:
            raise ServiceRejected("not_found", f"no {kind} {ident}")
        return dict(found)

    def fail_next(self, fault: str, times: int = 1) -> None:
        self._faults.extend([fault] * times)

    def apply(self, key: str, change: Any) -> dict[str, Any]:
        """Apply `change()` (returning the effect's result) once under `key`."""
        from agent_jobs.tools.adapter import ServiceRejected  # noqa: PLC0415

        fault = self._faults.popleft() if self._faults else ""
        if fault == "unavailable":
            raise ServiceRejected("unavailable", "system down", transient=True)
        if fault.startswith("reject:"):
            raise ServiceRejected(fault.partition(":")[2])
        if key not in self.effects:
            self.effects[key] = dict(change())
            self.applied += 1
        if fault == "timeout_after_commit":
            raise TimeoutError("applied, but the answer was lost")
        return dict(self.effects[key])

    def lookup(self, key: str) -> dict[str, Any] | None:
        found = self.effects.get(key)
        return dict(found) if found is not None else None


class WorkerCrashed(BaseException):
    """The worker process died (a `BaseException`: no step code catches it)."""


class _Crashing:
    """A workflow that dies on cue around its `execute` (everything else is the inner one's)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.plan: deque[str] = deque()
        self.name = inner.name
        self.version = inner.version

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def execute(self, inp: Any, action: Any) -> Any:
        crash = self.plan.popleft() if self.plan else ""
        if crash == "before_send":
            raise WorkerCrashed("after the intent commit, before the effect was sent")
        outcome = self._inner.execute(inp, action)
        if crash == "after_send":
            raise WorkerCrashed("after the effect was applied, before its outcome was recorded")
        return outcome


class AgentHarness(Harness):
    """An agent (`agent_jobs.agents.Agent`) under the real orchestrator over a real store, with
    a scripted model, and workers that can die between two steps.

        h = AgentHarness(store, agent, ScriptedModel(rules=my_rules))
        task = h.submit({"order_id": "A-1", "reason": "..."})
        h.settle(task.id)
        h.approve(task.id)
        h.crash_next_effect("after_send")  # the effect applies, the worker dies
        h.recover(task.id)                 # lease expires, sweeper, reconcile by key
    """

    def __init__(
        self, store: Store, agent: Any, model: ScriptedModel, settings: Settings | None = None
    ) -> None:
        from agent_jobs.tools import HmacCredentialProvider  # noqa: PLC0415

        agent.use(gateway=model.gateway(), credentials=HmacCredentialProvider("agent-test-" * 4))
        self.agent = agent
        self.model = model
        self.crashing = _Crashing(agent)
        registry = WorkflowRegistry()
        registry.register(self.crashing)
        super().__init__(store, registry, settings)
        self.crashes: list[str] = []

    def submit_input(
        self, input: dict[str, Any], *, key: str = "req-1", tenant: str = "acme"
    ) -> TaskRow:
        """Submit a task of the agent (its `name@version`) with `input`."""
        request = TaskRequest(workflow=f"{self.agent.name}@{self.agent.version}", input=input)
        return self.submit(tenant, key, request)

    def run_one(self) -> StepReport | None:
        try:
            return super().run_one()
        except WorkerCrashed as exc:
            # The message is gone with the worker; the lease stays until it expires.
            self.crashes.append(str(exc))
            return None

    def crash_next_effect(self, when: str = "before_send") -> None:
        """The next `execute` dies: `before_send` (right after the intent commit) or
        `after_send` (the system applied the effect; nobody recorded it)."""
        if when not in ("before_send", "after_send"):
            raise ValueError("when is before_send or after_send")
        self.crashing.plan.append(when)

    def recover(self, task_id: str) -> TaskRow:
        """What happens after a worker died: its lease expires, the sweeper takes the task
        back (EXECUTING becomes EXEC_UNKNOWN), and the next steps reconcile it by key."""
        self.expire_lease(task_id)
        self.sweepers.all()
        return self.settle(task_id)

    def approval_id(self, task_id: str) -> str:
        task = self.store.get(task_id)
        found = self.store.list_approvals(task.tenant_id, status="pending", task_id=task_id)
        if not found:
            raise AssertionError(f"task {task_id} has no pending approval ({task.status.value})")
        return found[0].approval_id

    def approve(self, task_id: str, approver: str = "approver-1", *, grant: bool = True) -> TaskRow:
        """Decide the task's pending approval (a grant by default), then run to rest."""
        self.orchestrator.decide_approval(self.approval_id(task_id), approver, grant=grant)
        return self.settle(task_id)
