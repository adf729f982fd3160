"""The process's observers as one list: metrics, trace export, and any a caller adds.

A step notifies one object (`Observers`) once per hook; it calls, in order, that hook on every
member that has it. A member implements only the hooks it cares about (the trace export: just
`task_ended`), so nothing forwards by hand and a hook added to the port cannot be dropped by a
wrapper that forgot it. The bound methods are collected once, at construction: a hook's cost is
one loop over the members that have it.

Platform time is not an observer: it is derived afterwards from the task's event log
(`obs/platform_time.py`), which the store writes in the same transaction as the transition.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

# Every hook of `orchestrator.ports.Observer` (obs sits below the orchestrator, so the port is
# not imported here; tests/unit/test_observers.py holds this equal to the Protocol's methods).
HOOKS = (
    "transition",
    "step",
    "lease_expired",
    "reconciled",
    "dead_letter",
    "stale_commit",
    "task_created",
    "policy_decision",
    "model_call",
    "tool_call",
    "unauthorised_action",
    "held",
    "task_ended",
)


class Observers:
    """An `orchestrator.ports.Observer` that notifies each of `members`, in order."""

    def __init__(self, *members: Any) -> None:
        flat: list[Any] = []
        for member in members:
            # A list inside the list is its members: each is notified once.
            flat.extend(member.members if isinstance(member, Observers) else (member,))
        self.members: tuple[Any, ...] = tuple(flat)
        self._hooks: dict[str, tuple[Callable[..., None], ...]] = {
            name: tuple(getattr(m, name) for m in self.members if callable(getattr(m, name, None)))
            for name in HOOKS
        }

    def transition(self, workflow: str, frm: str, to: str) -> None:
        for hook in self._hooks["transition"]:
            hook(workflow, frm, to)

    def step(self, status: str, seconds: float, result: str) -> None:
        for hook in self._hooks["step"]:
            hook(status, seconds, result)

    def lease_expired(self, count: int) -> None:
        for hook in self._hooks["lease_expired"]:
            hook(count)

    def reconciled(self, result: str) -> None:
        for hook in self._hooks["reconciled"]:
            hook(result)

    def dead_letter(self, workflow: str) -> None:
        for hook in self._hooks["dead_letter"]:
            hook(workflow)

    def stale_commit(self) -> None:
        for hook in self._hooks["stale_commit"]:
            hook()

    def task_created(self, workflow: str, via: str) -> None:
        for hook in self._hooks["task_created"]:
            hook(workflow, via)

    def policy_decision(self, policy_version: str, decision: str) -> None:
        for hook in self._hooks["policy_decision"]:
            hook(policy_version, decision)

    def model_call(
        self,
        route: str,
        outcome: str,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cached_input_tokens: int = 0,
        cost: Decimal | float = 0,
    ) -> None:
        for hook in self._hooks["model_call"]:
            hook(
                route,
                outcome,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cached_input_tokens=cached_input_tokens,
                cost=cost,
            )

    def tool_call(self, tool: str, outcome: str) -> None:
        for hook in self._hooks["tool_call"]:
            hook(tool, outcome)

    def unauthorised_action(self, tool: str) -> None:
        for hook in self._hooks["unauthorised_action"]:
            hook(tool)

    def held(self, reason: str) -> None:
        for hook in self._hooks["held"]:
            hook(reason)

    def task_ended(self, task_id: str) -> None:
        for hook in self._hooks["task_ended"]:
            hook(task_id)


__all__ = ["HOOKS", "Observers"]
