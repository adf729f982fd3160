"""What a simulated world runs: its workflows, the business systems behind them, the tasks a
schedule submits, and the policy the oracle holds every send to (stated here, apart from the
workflow's own code, so that a workflow or an orchestrator that skips it is caught)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.simulation.choices import Choices
from agent_jobs.simulation.oracle import Levers, PolicyOracle, Unwrap
from agent_jobs.simulation.systems import Applied, Ledger, SystemOfRecord
from agent_jobs.store import TaskRow

if TYPE_CHECKING:
    from agent_jobs.simulation.world import World


class Scenario(Protocol):
    effect_tool: str
    policies: dict[str, PolicyOracle]
    unwrap: dict[str, Unwrap]

    def install(self, world: World, registry: WorkflowRegistry) -> None: ...

    def new_task(self, choices: Choices, n: int) -> tuple[str, dict[str, Any]]: ...

    def applied(self) -> dict[str, Applied]: ...

    def heal(self) -> None: ...


def example_policy(task: TaskRow, args: dict[str, Any], levers: Levers) -> str:
    """`example@1`'s payout policy: above 10,000,000 denied; at or above the task's threshold
    a person approves. (Its policy reads no autonomy lever.)"""
    from agent_jobs.workflows.example import MAX_AMOUNT_MINOR  # noqa: PLC0415

    amount = int(args["amount_minor"])
    if amount > MAX_AMOUNT_MINOR:
        return "deny"
    if amount >= int(task.input.get("approval_threshold_minor", 100_000)):
        return "needs_approval"
    return "allow"


class ExampleScenario:
    """`example@1` paying out through a simulated ledger."""

    effect_tool = "ledger.transfer"

    def __init__(self) -> None:
        self.policies: dict[str, PolicyOracle] = {"example": example_policy}
        self.unwrap: dict[str, Unwrap] = {"example": lambda stored: stored}
        self.systems: list[SystemOfRecord] = []
        # Declare the steps that do no I/O quick (`QuickSteps`): the payout is then proposed in
        # a step without a lease, refused at its intent's commit and redone under one.
        self.quick_payout = False

    def install(self, world: World, registry: WorkflowRegistry) -> None:
        from agent_jobs.workflows.example import ExampleWorkflow  # noqa: PLC0415

        ledger = SystemOfRecord("ledger.transfer", world.choices, world.clock, world.calls, world)
        self.systems.append(ledger)
        kind = _quick_example() if self.quick_payout else ExampleWorkflow
        registry.register(kind(backend=Ledger(ledger), call_timeout_s=60.0))  # type: ignore[arg-type]

    def new_task(self, choices: Choices, n: int) -> tuple[str, dict[str, Any]]:
        amount = (5_000, 150_000, 5_000, 150_000, 20_000_000)[choices.draw(5)]
        return "example@1", {
            "account": f"acc_{n}",
            "amount_minor": amount,
            "currency": "EUR",
            "reads": choices.draw(3),
            "approval_threshold_minor": 100_000,
            "approval_ttl_s": (1800, 120)[choices.draw(2)],
        }

    def applied(self) -> dict[str, Applied]:
        return {k: v for s in self.systems for k, v in s.applied.items()}

    def heal(self) -> None:
        for system in self.systems:
            system.faults = False


def _quick_example() -> type[Any]:
    """`example@1` declaring quick the steps that do no I/O: the start, and the decision after
    the reads that proposes the payout (whose execute then needs a lease: `_NeedsLease`)."""
    from agent_jobs.orchestrator.workflow import StepInput  # noqa: PLC0415
    from agent_jobs.workflows.example import ExampleWorkflow  # noqa: PLC0415

    class QuickExample(ExampleWorkflow):
        def quick(self, inp: StepInput) -> bool:
            state = inp.state or {}
            if not state:
                return True
            reads = inp.input.get("reads", 1)
            return bool(state.get("reads_done", 0) >= reads and not state.get("transfer"))

    return QuickExample


def order_policy(task: TaskRow, args: dict[str, Any], levers: Levers) -> str:
    """The order agent's policy as stated: above EUR 100.00 a person approves, and under the
    operator's autonomy cap (0: every effect) too. (Its rules deny what the orders service
    would refuse anyway.)"""
    from agent_jobs.simulation.agents import APPROVAL_ABOVE_MINOR  # noqa: PLC0415

    amount = int(args["amount_minor"])
    cap = levers.autonomy_minor
    if cap is not None and (cap == 0 or amount > cap):
        return "needs_approval"
    return "needs_approval" if amount > APPROVAL_ABOVE_MINOR else "allow"


class AgentScenario:
    """The order-cancellation agent (a declared `Agent`: scripted model, Python tools)."""

    effect_tool = "orders.cancel"

    def __init__(self) -> None:
        self.policies: dict[str, PolicyOracle] = {"order_cancel": order_policy}
        # An agent records {"result": what the system answered, "found_by": call | key}.
        self.unwrap: dict[str, Unwrap] = {"order_cancel": lambda s: (s or {}).get("result")}
        self.systems: list[SystemOfRecord] = []
        self.orders: Any = None

    def install(self, world: World, registry: WorkflowRegistry) -> None:
        from agent_jobs.simulation.agents import SimOrders, order_agent  # noqa: PLC0415
        from agent_jobs.testing import ScriptedModel  # noqa: PLC0415
        from agent_jobs.tools import HmacCredentialProvider  # noqa: PLC0415

        system = SystemOfRecord("orders.cancel", world.choices, world.clock, world.calls, world)
        self.systems.append(system)
        self.orders = SimOrders(system)
        agent = order_agent(self.orders)
        model = ScriptedModel(rules=agent.scripted_model)
        agent.use(gateway=model.gateway(), credentials=HmacCredentialProvider("sim-secret-" * 4))
        registry.register(agent)

    def new_task(self, choices: Choices, n: int) -> tuple[str, dict[str, Any]]:
        from agent_jobs.simulation.agents import KINDS  # noqa: PLC0415

        status, amount = KINDS[choices.draw(len(KINDS))]
        order_id = f"O-{n}"
        self.orders.add(order_id, status, amount)
        return "order_cancel@1", {"order_id": order_id, "reason": "customer asked"}

    def applied(self) -> dict[str, Applied]:
        return {k: v for s in self.systems for k, v in s.applied.items()}

    def heal(self) -> None:
        for system in self.systems:
            system.faults = False


SCENARIOS: dict[str, type[Scenario]] = {"example": ExampleScenario, "agent": AgentScenario}


def _more() -> dict[str, type[Scenario]]:
    from agent_jobs.simulation.refund import RefundScenario  # noqa: PLC0415
    from agent_jobs.simulation.tool_sources import ToolSourcesScenario  # noqa: PLC0415
    from agent_jobs.simulation.two_effects import TwoEffectsScenario  # noqa: PLC0415

    return {
        "two_effects": TwoEffectsScenario,
        "refund": RefundScenario,
        "tools": ToolSourcesScenario,
    }


SCENARIOS.update(_more())
