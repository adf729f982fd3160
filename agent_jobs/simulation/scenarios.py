"""What a simulated world runs: its workflows, the business systems behind them, the tasks a
schedule submits, and the policy the oracle holds every send to (stated here, apart from the
workflow's own code, so that a workflow or an orchestrator that skips it is caught)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.simulation.choices import Choices
from agent_jobs.simulation.oracle import Levers, PolicyOracle
from agent_jobs.simulation.systems import Applied, Ledger, SystemOfRecord
from agent_jobs.store import TaskRow

if TYPE_CHECKING:
    from agent_jobs.simulation.world import World


class Scenario(Protocol):
    effect_tool: str
    policies: dict[str, PolicyOracle]

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
        self.systems: list[SystemOfRecord] = []

    def install(self, world: World, registry: WorkflowRegistry) -> None:
        from agent_jobs.workflows.example import ExampleWorkflow  # noqa: PLC0415

        ledger = SystemOfRecord("ledger.transfer", world.choices, world.clock, world.calls, world)
        self.systems.append(ledger)
        registry.register(ExampleWorkflow(backend=Ledger(ledger), call_timeout_s=60.0))  # type: ignore[arg-type]

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


SCENARIOS = {"example": ExampleScenario}
