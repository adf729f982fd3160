"""One simulated deployment: the real orchestrator, store, sweepers and levers, several workers,
a broker, the business systems and an operator, all in one thread, every choice drawn from one
`Choices`.

A schedule (`World.run`) submits a few tasks, then takes actions one at a time: deliver a step
message to a worker, run a sweeper, move the clock, decide an approval, cancel, flip a lever,
lose or repeat messages. Faults are drawn as it goes: a worker dies before a statement, before
or after a send; a statement fails as Postgres fails (timeouts, deadlocks, a lost connection);
a business system throttles, refuses, times out, lags. Inside a step, wherever no transaction
is open (after each store call, while a business system holds a request), other work may run
in between, as it would on another machine: an approval decided while the step holds the
lease, a sweeper that finds the lease lapsed, a cancel. Then the world heals (faults off, levers
off, approvals decided) and settles, and the oracle judges the end.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import cast

from agent_jobs.config import Settings
from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.errors import IdempotencyConflict
from agent_jobs.core.states import PARKED, TERMINAL
from agent_jobs.ops import live
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.orchestrator.runner import Orchestrator
from agent_jobs.orchestrator.sweepers import Sweepers
from agent_jobs.simulation.broker import SimBroker
from agent_jobs.simulation.choices import Choices
from agent_jobs.simulation.clock import VirtualClock
from agent_jobs.simulation.meanwhile import check_stranded, check_woken, interleave
from agent_jobs.simulation.operator import LEVERS, Operator
from agent_jobs.simulation.oracle import Oracle, Violation
from agent_jobs.simulation.scenarios import Scenario
from agent_jobs.simulation.step_faults import draw, is_write
from agent_jobs.simulation.systems import Call, Hooks
from agent_jobs.simulation.workers import (
    Context,
    Interleaving,
    ReadSwitches,
    SimKeeper,
    StepFaults,
    Worker,
    WorkerCrashed,
)
from agent_jobs.store import Dispatch, Store
from agent_jobs.store import ids as id_source
from agent_jobs.store.seams import (
    OpenTransactions,
    database_error,
    on_statement,
)

log = logging.getLogger(__name__)

SETTINGS = Settings(
    lease_ttl_s=30.0,
    dispatch_grace_s=60.0,
    retry_base_s=0.5,
    retry_max_s=20.0,
    max_attempts=4,
    max_reconcile_attempts=4,
    outage_wait_s=5.0,
    outage_retry_max_s=1.0,
    throttle_max_wait_s=600.0,
)
SWEEPS = ("lease", "dispatch", "retry", "unknown", "approvals", "held")
ACTIONS = {
    "deliver": 64,
    "sweep": 12,
    "advance": 12,
    "decide": 9,
    "broker": 8,
    "lever": 4,
    "cancel": 4,
    "submit": 3,
    "two_sweepers": 2,
}


@dataclass
class Report:
    seed: int
    steps: int = 0
    sends: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    trace: list[str] = field(default_factory=list)


class World(Hooks):
    def __init__(
        self,
        seed: int,
        store: Store,
        scenario: Scenario,
        choices: Choices,
        transactions: OpenTransactions,
        *,
        crash_after_commit: bool = False,
    ) -> None:
        self.seed = seed
        # Draw deaths right after a commit too (on Postgres, where a step may commit statement
        # by statement); off on SQLite, whose seeds keep the schedules they were measured on.
        self.crash_after_commit = crash_after_commit
        self.store = store
        self.choices = choices
        self.clock = VirtualClock()  # the database reads it too (run.Databases)
        self.report = Report(seed)
        self.calls: list[Call] = []
        self.scenario = scenario
        self.oracle = Oracle(store, scenario.policies, scenario.unwrap)
        self.broker = SimBroker(choices)
        self.operator = Operator(self)
        self.transactions = transactions
        self.stack: list[Context] = []
        self.quiet = 0  # >0: the world's own reads (the oracle): no faults, no interleaving
        # Each task's version when the last fault happened: a task that has not moved since
        # may have lost its message to that fault (the sweepers' job); one that moved after
        # it, and then waits with no message, was stranded by the runtime itself.
        self.excused: dict[str, int] = {}
        # Each task's event count when the broker last lost a message of it (`check_woken`).
        self.lost: dict[str, int] = {}
        self.looked: dict[str, int] = {}  # each task's event count when `check_woken` last read
        self.excuse_pending = False
        self.healing = False
        self._remove_hook = on_statement(store.engine, self._statement)
        self.registry = WorkflowRegistry()
        scenario.install(self, self.registry)
        self.workers = [self._worker(f"w{i}", 1) for i in range(1, 4)]
        self.sweepers = Sweepers(
            cast(Store, Interleaving(store, self)),
            self.broker,
            SETTINGS,
            self.broker,
            rand=self.choices.unit,
        )
        self.submitted = 0

    # -- set up ------------------------------------------------------------------------------

    def _worker(self, name: str, incarnation: int) -> Worker:
        settings = SETTINGS.with_overrides(worker_id=f"{name}.{incarnation}")
        proxy = cast(Store, Interleaving(self.store, self))
        keeper = SimKeeper(proxy, settings.lease_ttl_s)
        orch = Orchestrator(
            proxy,
            self.registry,
            self.broker,
            settings,
            keeper=keeper,
            rand=self.choices.unit,
            sleep=self.clock.advance,
            monotonic=self.clock.monotonic,
        )
        return Worker(name, incarnation, orch, keeper)

    @contextmanager
    def installed(self) -> Iterator[None]:
        """The process-wide seams pointed at this world for the schedule's length."""
        previous_ids = id_source.use(
            id_source.IdSource(
                self.clock.millis, lambda n: bytes(self.choices.draw(256) for _ in range(n))
            )
        )
        previous_switches = live.install(ReadSwitches(self.operator.switches, self))
        try:
            yield
        finally:
            live.install(previous_switches)
            id_source.use(previous_ids)
            self._remove_hook()

    def _random_bytes(self, n: int) -> bytes:
        return bytes(self.choices.draw(256) for _ in range(n))

    # -- hooks the systems and the store call ------------------------------------------------

    def caller(self) -> str:
        ctx = self._ctx()
        return ctx.worker.owner_name if ctx and ctx.worker else "operator"

    def _ctx(self) -> Context | None:
        return self.stack[-1] if self.stack else None

    def switches_read(self) -> None:
        """A step read the switches: its decision rests on the levers in force now."""
        ctx = self._ctx()
        if ctx is not None:
            ctx.levers_read = self.operator.levers

    def step_task(self) -> str | None:
        """The task of the step running now, if one is: where other work matters most."""
        return self.stack[0].task_id if self.stack else None

    def before_send(self) -> None:
        ctx = self._ctx()
        if ctx is not None and ctx.faults.send == "before" and not self.quiet:
            self.fault("crash_before_send")
            raise WorkerCrashed("before the request left")

    def received(self, call: Call) -> None:
        if call.kind != "send":
            return
        self.report.sends += 1
        ctx = self._ctx()
        decided = self.operator.levers
        if ctx is not None:
            decided = ctx.levers_read or ctx.levers_at_start
        with self.reading():
            self.oracle.on_send(
                call,
                self.calls,
                self.clock.now(),
                self.operator.levers,
                decided,
                stalled=ctx is not None and ctx.stalled,
            )

    def during_call(self, where: str) -> None:
        ctx = self._ctx()
        if ctx is not None and where == "send applied" and ctx.faults.send == "after":
            self.fault("crash_after_send")
            raise WorkerCrashed("after the system applied the request")
        if ctx is not None and where == "send applied" and ctx.faults.send == "error_after":
            # The step lives on and one of its next statements fails (the outcome's commit).
            ctx.faults.error_at = ctx.faults.statements + self.choices.draw(3)
        interleave(self, where)

    def slow_call(self) -> None:
        # Longer than a lease: whoever waits on this call may find its lease gone.
        self.fault("slow_call")
        self.clock.advance(SETTINGS.lease_ttl_s + self.choices.draw(60))

    def _statement(self, sql: str) -> None:
        ctx = self._ctx()
        if ctx is None or self.quiet or self.healing:
            return
        f = ctx.faults
        n = f.statements
        f.statements += 1
        if f.crash_at == n:
            self.fault("crash_at_statement")
            raise WorkerCrashed(f"before statement {n}: {sql[:60]}")
        if f.armed and self.transactions.count == 0:
            self.fault("crash_after_commit")
            raise WorkerCrashed(f"after a commit, before statement {n}: {sql[:60]}")
        if f.after_commit and is_write(sql):
            f.armed = True
        if f.error_at == n:
            f.injected = True
            self.fault(f"db_{f.error}")
            raise database_error(f.error, sql)

    def after_store_call(self, name: str) -> None:
        if self.transactions.count == 0:
            interleave(self, f"after store.{name}")

    @contextmanager
    def reading(self) -> Iterator[None]:
        self.quiet += 1
        try:
            yield
        finally:
            self.quiet -= 1

    def fault(self, kind: str) -> None:
        self.excuse_pending = True  # read after the action: a transaction may be open here
        self.report.faults[kind] = self.report.faults.get(kind, 0) + 1
        self.trace(f"  fault: {kind}")

    def trace(self, line: str) -> None:
        self.report.trace.append(line)

    # -- the schedule ------------------------------------------------------------------------

    def run(self, actions: int) -> Report:
        with self.installed():
            tasks = 1 + self.choices.draw(3)
            for _ in range(tasks):
                self.submit()
            for _ in range(actions):
                self.act(self.choices.weighted(ACTIONS))
                self.check()
                if self.settled():
                    break
            self.heal()
            with self.reading():
                self.oracle.final(self.scenario.applied())
                for task_id in self.oracle.tasks:
                    status = self.store.get(task_id).status.value
                    self.report.outcomes[status] = self.report.outcomes.get(status, 0) + 1
        return self.report

    def settled(self) -> bool:
        if self.broker.queue:
            return False
        with self.reading():
            return all(t.status in TERMINAL for t in self.oracle.rows().values())

    def check(self) -> None:
        """After each action: the rows' invariants, and the tasks a fault in it excuses."""
        if self.excuse_pending:
            self.excuse_pending = False
            with self.reading():
                self.excused = {t.id: t.version for t in self.oracle.rows().values()}
        with self.reading():
            rows = self.oracle.rows()
            self.oracle.check_rows(rows)
            if not self.stack:
                check_woken(self, rows)

    def act(self, action: str, nested: bool = False) -> None:
        if action == "deliver":
            self.deliver()
        elif action == "sweep":
            self.sweep(self.choices.pick(SWEEPS))
        elif action == "two_sweepers":
            kind = self.choices.pick(SWEEPS)
            self.trace(f"two sweepers: {kind}")
            self.sweep(kind, second=kind)
        elif action == "advance":
            self.advance()
        elif action == "decide":
            self.operator.decide()
        elif action == "broker":
            self.broker_fault()
        elif action == "lever":
            self.operator.lever()
        elif action == "cancel":
            self.operator.cancel()
        elif action == "submit":
            self.submit()

    # -- actions -----------------------------------------------------------------------------

    def submit(self) -> None:
        if self.submitted >= 4:
            return
        self.submitted += 1
        name, inp = self.scenario.new_task(self.choices, self.submitted)
        key = f"req-{self.submitted}"
        if self.choices.chance(15):
            key = f"req-{self.submitted - 1}"  # a retried request: the same task again
        self.trace(f"submit {name} {key} {inp}")
        request = TaskRequest(workflow=name, input=inp)
        try:
            task = self.workers[0].orchestrator.submit("acme", key, request, requester="tester")
        except IdempotencyConflict:
            self.trace("  refused: the same key with another payload")
            return
        if task.task.id not in self.oracle.tasks:
            self.oracle.tasks.append(task.task.id)

    def _faults(self) -> StepFaults:
        if self.healing or not self.choices.chance(30):
            return StepFaults()
        return draw(self.choices, after_commit=self.crash_after_commit)

    def deliver(self, *, latest: bool = False) -> None:
        message = self.broker.take_latest() if latest else self.broker.take()
        if message is None:
            if not self.stack and not self.excuse_pending:
                check_stranded(self)
            return
        busy = {c.worker.name for c in self.stack if c.worker is not None}
        free = [w for w in self.workers if w.name not in busy]
        worker = free[self.choices.draw(len(free))]
        self.report.steps += 1
        faults = self._faults()
        self.trace(f"{worker.owner_name} step {message.task_id[-6:]}")
        self.stack.append(Context(worker, faults, self.operator.levers, message.task_id))
        try:
            report = worker.orchestrator.run_step_waiting(
                message.task_id, message.row, claim=message.claim
            )
            if report is not None:
                self.trace(f"  -> {report.to_status.value if report.to_status else None}")
        except WorkerCrashed as exc:
            self.trace(f"  {worker.owner_name} died: {exc}")
            self._restart(worker)
            if self.choices.chance(50):
                self.broker.redeliver(message)  # acks_late: the message comes back
            else:
                self.broker.lost.append(message.task_id)
        except Exception as exc:
            self.trace(f"  step raised {type(exc).__name__}: {str(exc)[:80]}")
            if not faults.injected:
                # Only a database that keeps failing may stop a step: anything else is counted
                # as a failed attempt of the task, never lost with the message.
                raise Violation("steps_contain_failures", f"{type(exc).__name__}: {exc}") from exc
            self.fault("step_raised")
            self.broker.lost.append(message.task_id)
        finally:
            self.stack.pop()

    def _restart(self, worker: Worker) -> None:
        fresh = self._worker(worker.name, worker.incarnation + 1)
        self.workers[self.workers.index(worker)] = fresh

    def sweep(self, kind: str, second: str | None = None) -> None:
        faults = self._faults()
        self.stack.append(Context(None, faults, self.operator.levers))
        try:
            n = self.sweepers.run(kind)
            if second is not None:
                n += self.sweepers.run(second)
            self.trace(f"sweep {kind}: {n}")
        except WorkerCrashed:
            self.trace(f"sweep {kind}: beat died")
        except Exception as exc:
            self.trace(f"sweep {kind} raised {type(exc).__name__}: {str(exc)[:80]}")
            if not faults.injected:
                # One row that cannot move must not stop a sweep for every other row.
                raise Violation("sweepers_go_on", f"{kind}: {type(exc).__name__}: {exc}") from exc
            self.fault("sweep_raised")
        finally:
            self.stack.pop()

    def advance(self) -> None:
        pick = self.choices.weighted({"small": 70, "lease": 20, "jump": 10})
        seconds = {
            "small": 0.1 + self.choices.draw(50) / 10,
            "lease": SETTINGS.lease_ttl_s + self.choices.draw(40),
            "jump": 100.0 + self.choices.draw(4000),
        }[pick]
        if seconds > SETTINGS.lease_ttl_s:
            self.excuse_pending = True
        self.trace(f"clock +{seconds:.1f}s")
        self.clock.advance(seconds)
        self._renew()

    def _renew(self) -> None:
        """Live workers' keepers renew what they hold (a dead worker's leases lapse)."""
        for worker in self.workers:
            for lease in worker.keeper.held():
                if self.choices.chance(80):
                    try:
                        with self.reading():
                            self.store.renew(lease, SETTINGS.lease_ttl_s)
                    except Exception:
                        worker.keeper.drop(lease)

    def broker_fault(self) -> None:
        kind = self.choices.pick(("drop", "duplicate", "delay", "empty", "stray", "stray", "stray"))
        self.trace(f"broker: {kind}")
        if kind == "stray" and self.oracle.tasks:
            # An old message delivered again (at least once): a step for any task, whatever
            # its status, parked or not; the claim decides whether there is anything to do.
            tasks = self.oracle.tasks
            with self.reading():
                rows = self.oracle.rows()
            parked = [t for t in tasks if rows[t].status in PARKED]
            if parked and self.choices.chance(70):
                tasks = parked  # woken early: its step must find nothing to do, and lose nothing
            task_id = tasks[self.choices.draw(len(tasks))]
            self.broker.publish(Dispatch(task_id, "acme"))
            return
        if kind not in ("duplicate", "stray"):
            self.fault(f"broker_{kind}")
        self.broker.fault(kind)

    # -- liveness and the end ----------------------------------------------------------------

    def heal(self) -> None:
        """Faults off, levers off, every approval decided; then run until nothing moves."""
        self.trace("-- heal --")
        self.healing = True
        self.scenario.heal()
        for name in LEVERS:
            if self.operator.lever_on(name):
                self.operator.set_lever(name, on=False)
        for _ in range(60):
            while self.broker.queue:
                self.deliver()
                self.check()
            check_stranded(self)  # healed, nothing excuses a task that moved and then waits
            self.operator.decide()
            if self.settled():
                return
            self.clock.advance(SETTINGS.dispatch_grace_s + 1)
            for kind in SWEEPS:
                self.sweep(kind)
