"""What a task has learned from its systems of record: the only evidence its policy and its
claims are judged on.

Facts are the results of the task's own tool calls, recorded by the agent's step as the executor
returned them (reads, and effects with the result the system of record gave or the lookup by key
found). Never model text: a model that writes "the order is open" in its rationale has not read
the order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# How many results a task keeps (the oldest are dropped first): a loop of reads must not grow
# the task's state without bound.
MAX_FACTS = 50


@dataclass(frozen=True)
class Facts:
    """The task's reads and effects, newest last. Read-only."""

    input: Mapping[str, Any]
    reads: Sequence[Mapping[str, Any]]
    effects: Sequence[Mapping[str, Any]]

    @classmethod
    def of(cls, state: Mapping[str, Any]) -> Facts:
        """The facts recorded in an agent task's state."""
        facts = state.get("facts") or {}
        return cls(
            input=state.get("input") or {},
            reads=tuple(facts.get("reads") or ()),
            effects=tuple(facts.get("effects") or ()),
        )

    def read(self, tool: str, **args: Any) -> Any:
        """The latest result of `tool` called with (at least) these arguments, or None."""
        for fact in reversed(self.reads):
            if fact.get("tool") == tool and _matches(fact.get("args") or {}, args):
                return fact.get("result")
        return None

    def effect(self, tool: str, **args: Any) -> Any:
        """The result of the committed effect of `tool` with these arguments, or None."""
        for fact in reversed(self.effects):
            if fact.get("tool") == tool and _matches(fact.get("args") or {}, args):
                return fact.get("result")
        return None

    def as_dict(self) -> dict[str, Any]:
        return {"input": dict(self.input), "reads": list(self.reads), "effects": list(self.effects)}


def _matches(recorded: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    return all(recorded.get(k) == v for k, v in wanted.items())


def record(state: dict[str, Any], kind: str, fact: dict[str, Any]) -> None:
    """Append a fact (`kind` is `reads` or `effects`) to `state`, bounded."""
    facts = dict(state.get("facts") or {})
    facts[kind] = [*(facts.get(kind) or []), fact][-MAX_FACTS:]
    state["facts"] = facts
