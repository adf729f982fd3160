"""The people around the runtime in a simulated world: approvers deciding (now and then the
requester itself, which must be refused), a caller cancelling, an operator pulling levers
(effects stopped, a tool disabled, autonomy 0) and letting go of them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent_jobs.core.errors import ApprovalError
from agent_jobs.ops.live import StoreSwitches
from agent_jobs.ops.service import OpsService
from agent_jobs.ops.switches import ALL, Kind
from agent_jobs.simulation.oracle import Levers

if TYPE_CHECKING:
    from agent_jobs.simulation.world import World

APPROVER = "approver-1"
LEVERS = ("effects_stopped", "tool_disabled", "autonomy_threshold")
# Where a task may have an effect sent or about to be resent: the cancels that matter most.
IN_FLIGHT = ("EXECUTING", "EXEC_UNKNOWN", "RETRY_WAIT")


class Operator:
    def __init__(self, world: World) -> None:
        self.world = world
        self.choices = world.choices
        self.store = world.store
        self.switches = StoreSwitches(world.store, clock=world.clock.monotonic)
        self.ops = OpsService(world.store, world.broker.publish)
        self.levers = Levers()

    def decide(self) -> None:
        with self.world.reading():
            pending = [
                a
                for t in self.world.oracle.tasks
                for a in self.store.list_approvals("acme", status="pending", task_id=t)
            ]
        if not pending:
            return
        # Inside a step, mostly the approval of the task it works on (decided while it holds
        # the lease: its wake-up must not be lost).
        mine = [a for a in pending if a.task_id == self.world.step_task()]
        if mine and self.choices.chance(60):
            pending = mine
        approval = pending[self.choices.draw(len(pending))]
        grant = self.world.healing or not self.choices.chance(25)
        approver = "tester" if self.choices.chance(5) and not self.world.healing else APPROVER
        self.world.trace(
            f"{'grant' if grant else 'deny'} {approval.approval_id[-6:]} by {approver}"
        )
        try:
            self.world.workers[0].orchestrator.decide_approval(
                approval.approval_id, approver, grant=grant
            )
            if self.world.stack and self.choices.chance(50):
                # A fast worker takes the decision's message while this step still runs.
                self.world.deliver(latest=True)
        except ApprovalError as exc:
            self.world.trace(f"  decision refused: {type(exc).__name__}: {str(exc)[:80]}")

    def cancel(self) -> None:
        tasks = self.world.oracle.tasks
        if not tasks:
            return
        with self.world.reading():
            rows = self.world.oracle.rows()
        # Half the time a task whose effect is in flight: the cancels that matter most.
        in_flight = [t for t in tasks if rows[t].status.value in IN_FLIGHT]
        step = self.world.step_task()
        if step is not None and self.choices.chance(50):
            tasks = [step]  # the task a step is working on, while it does
        elif in_flight and self.choices.chance(50):
            tasks = in_flight
        task_id = tasks[self.choices.draw(len(tasks))]
        self.world.trace(f"cancel {task_id[-6:]}")
        result = self.world.workers[0].orchestrator.cancel(task_id)
        if not result.accepted:
            self.world.trace(f"  cancel refused: the task is {result.task.status.value}")

    def lever(self) -> None:
        name = self.choices.pick(LEVERS)
        self.set_lever(name, on=not self.lever_on(name))

    def lever_on(self, name: str) -> bool:
        lev = self.levers
        return {
            "effects_stopped": lev.effects_stopped,
            "tool_disabled": bool(lev.tool_disabled),
            "autonomy_threshold": lev.autonomy_minor is not None,
        }[name]

    def set_lever(self, name: str, *, on: bool) -> None:
        kind = Kind(name)
        target = self.world.scenario.effect_tool if kind is Kind.TOOL_DISABLED else ALL
        self.world.trace(f"lever {name} {'on' if on else 'off'}")
        try:
            with self.world.reading():
                if on:
                    value: Any = 0 if kind is Kind.AUTONOMY_THRESHOLD else True
                    self.ops.set(name, target=target, value=value, actor="sim", reason="drill")
                else:
                    self.ops.clear(name, target=target, actor="sim", reason="drill over")
        except Exception as exc:
            self.world.trace(f"  lever refused: {type(exc).__name__}: {exc}")
            return
        lev = self.levers
        if kind is Kind.EFFECTS_STOPPED:
            lev = Levers(on, lev.tool_disabled, lev.autonomy_minor)
        elif kind is Kind.TOOL_DISABLED:
            lev = Levers(
                lev.effects_stopped, frozenset({target}) if on else frozenset(), lev.autonomy_minor
            )
        else:
            lev = Levers(lev.effects_stopped, lev.tool_disabled, 0 if on else None)
        self.levers = lev
        with self.world.reading():
            self.switches.reload()  # every process hears of it at once (pub/sub)
