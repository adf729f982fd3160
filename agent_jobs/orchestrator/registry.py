"""Workflows by `name@version`. A task is pinned to the version it was created with.

A process serves from one registry, `agent_jobs.workflows.default_registry()`; tests may build
their own `WorkflowRegistry` to keep their workflows apart.
"""

from __future__ import annotations

from pydantic import ValidationError

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.errors import ConfigError, UnknownWorkflow
from agent_jobs.core.text import for_log
from agent_jobs.orchestrator.workflow import Workflow


class WorkflowConflict(ConfigError):
    """A second, different workflow under a `name@version` already registered."""

    code = "workflow_conflict"


class InvalidWorkflow(ConfigError):
    """A workflow whose `name@version` no request could name (or that is not a workflow)."""

    code = "invalid_workflow"


def workflow_key(workflow: object) -> str:
    """`name@version` of a workflow, checked against the pattern a task request must match
    (`TaskRequest.workflow`): a workflow no request can name would be registered for nothing."""
    name = getattr(workflow, "name", None)
    version = getattr(workflow, "version", None)
    if not isinstance(name, str) or isinstance(version, bool) or not isinstance(version, int):
        raise InvalidWorkflow(
            f"{for_log(type(workflow).__qualname__, 80)} is not a workflow: it needs a `name` "
            f"(str) and a `version` (int), has {for_log(repr(name), 60)} and "
            f"{for_log(repr(version), 30)}"
        )
    key = f"{name}@{version}"
    try:
        TaskRequest(workflow=key)
    except ValidationError:
        raise InvalidWorkflow(
            f"workflow {for_log(key, 80)!r} cannot be requested: a name is 1-63 of a-z 0-9 _ . - "
            "(starting with a letter or digit) and a version 0-999999"
        ) from None
    return key


class WorkflowRegistry:
    def __init__(self) -> None:
        self._by_key: dict[str, Workflow] = {}

    def register(self, workflow: Workflow) -> str:
        """Add `workflow`; returns its key. The same object again is a no-op; another object
        under a key already taken raises `WorkflowConflict`."""
        key = workflow_key(workflow)
        known = self._by_key.get(key)
        if known is not None and known is not workflow:
            raise WorkflowConflict(
                f"workflow {key} is already registered (by {type(known).__module__}."
                f"{type(known).__qualname__})"
            )
        self._by_key[key] = workflow
        return key

    def get(self, key: str) -> Workflow:
        try:
            return self._by_key[key]
        except KeyError:
            raise UnknownWorkflow(key, list(self._by_key)) from None

    def names(self) -> list[str]:
        return sorted(self._by_key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key
