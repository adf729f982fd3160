"""Workflows by `name@version`. A task is pinned to the version it was created with."""

from __future__ import annotations

from agent_jobs.core.errors import UnknownWorkflow
from agent_jobs.orchestrator.workflow import Workflow


class WorkflowRegistry:
    def __init__(self) -> None:
        self._by_key: dict[str, Workflow] = {}

    def register(self, workflow: Workflow) -> None:
        key = f"{workflow.name}@{workflow.version}"
        if key in self._by_key and self._by_key[key] is not workflow:
            raise ValueError(f"workflow {key} is already registered")
        self._by_key[key] = workflow

    def get(self, key: str) -> Workflow:
        try:
            return self._by_key[key]
        except KeyError:
            raise UnknownWorkflow(key, list(self._by_key)) from None

    def names(self) -> list[str]:
        return sorted(self._by_key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key
