"""Built-in workflows. Register your own with `default_registry().register(MyWorkflow())`."""

from __future__ import annotations

from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.workflows.example import ExampleWorkflow
from agent_jobs.workflows.noop import NoopWorkflow
from agent_jobs.workflows.refund import RefundWorkflow


def default_registry() -> WorkflowRegistry:
    registry = WorkflowRegistry()
    registry.register(ExampleWorkflow())
    registry.register(NoopWorkflow())
    # Its gateway, tools and credentials are built from the environment on first use.
    registry.register(RefundWorkflow())
    return registry
