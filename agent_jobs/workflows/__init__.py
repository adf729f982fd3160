"""The process's workflows: the built-ins plus your own, in one registry per process.

`default_registry()` is that registry, the same object on every call. Its first call loads the
workflows of your own (`agent_jobs.workflows.loading`): the modules `AGENT_JOBS_WORKFLOWS` names,
then the entry points of group `agent_jobs.workflows`. A module there either defines a
module-level `workflows` list or calls `register(MyWorkflow())` when imported.

Workers and beat load at start (`exit_unless_loaded`, on Celery's `worker_init`/`beat_init`),
before the pool forks, so every child inherits the same set; the API and the CLI load when they
build their runtime. A failure is one line and a non-zero exit there, not a 422 later.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Any

from agent_jobs.config import Settings, load_settings
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.orchestrator.workflow import Workflow
from agent_jobs.workflows.example import ExampleWorkflow
from agent_jobs.workflows.loading import (
    BUILT_IN,
    Origin,
    WorkflowLoadError,
    installed_entry_points,
    load_workflows,
)
from agent_jobs.workflows.noop import NoopWorkflow
from agent_jobs.workflows.refund import RefundWorkflow

EXIT_WORKFLOWS = 2  # as any other configuration error of the CLI


def builtin_registry() -> WorkflowRegistry:
    """A new registry holding new built-ins and nothing else: for a test that registers
    workflows of its own, or must not share the built-ins' lazily built clients. A process
    serves from `default_registry()`."""
    registry = WorkflowRegistry()
    registry.register(ExampleWorkflow())
    registry.register(NoopWorkflow())
    # Its gateway, tools and credentials are built from the environment on first use.
    registry.register(RefundWorkflow())
    return registry


# The process's registry, its workflows' origins, and the settings it was loaded for.
# Reentrant: a module being loaded calls `register()` (or `default_registry()`) from inside.
_lock = threading.RLock()
_registry: WorkflowRegistry | None = None
_origins: dict[str, Origin] = {}
_loaded_for: Settings | None = None
_loading = False


def _the_registry() -> WorkflowRegistry:
    """The process's registry with its built-ins, made on first use (under `_lock`)."""
    global _registry
    if _registry is None:
        _registry = builtin_registry()
        _origins.update(dict.fromkeys(_registry.names(), BUILT_IN))
    return _registry


def default_registry() -> WorkflowRegistry:
    """This process's registry: the built-ins plus everything `AGENT_JOBS_WORKFLOWS` and the
    `agent_jobs.workflows` entry points register, loaded on the first call; the same object on
    every call while the settings stay as they are. Raises `WorkflowLoadError` (one line) when
    something cannot be loaded.

    A process that changes its settings as it runs (the evals and demos, tests) gets a new
    registry at its next call: new built-ins, which build their clients from the settings when
    first used, and every other workflow carried over, then what the new settings list loaded.
    A runtime built before the change keeps the registry it was built with."""
    global _loaded_for, _loading
    cfg = load_settings()  # the environment's, as the built-ins read it
    with _lock:
        registry = _the_registry()
        if _loading or cfg == _loaded_for:
            return registry
        if _loaded_for is not None:
            registry = _renewed(registry)
        _loading = True
        try:
            origins = load_workflows(registry, cfg.workflows, installed_entry_points())
        finally:
            _loading = False
        _origins.update(origins)
        _loaded_for = cfg
        return registry


def _renewed(old: WorkflowRegistry) -> WorkflowRegistry:
    """A new process registry: new built-ins, and the other workflows of `old` (under `_lock`)."""
    global _registry
    _registry = new = builtin_registry()
    for key in old.names():
        if _origins.get(key) != BUILT_IN:
            new.register(old.get(key))
    return new


def register(workflow: Workflow) -> None:
    """Register `workflow` in this process's registry (call it when your module is imported).
    A different workflow under a `name@version` already taken raises `WorkflowConflict`."""
    with _lock:
        key = _the_registry().register(workflow)
        # Outside the loading, the process's own code; the loader names the module it imports.
        _origins.setdefault(key, Origin("code", type(workflow).__module__))


@dataclass(frozen=True)
class Loaded:
    """One registered workflow and where it came from."""

    name: str
    version: int
    origin: Origin
    workflow: Workflow

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"


def loaded_workflows() -> list[Loaded]:
    """Every workflow of this process's registry (loading it first), by name and version."""
    registry = default_registry()
    with _lock:
        out = []
        for key in registry.names():
            wf = registry.get(key)
            out.append(Loaded(wf.name, wf.version, _origins.get(key, Origin("code")), wf))
    return sorted(out, key=lambda w: (w.name, w.version))


def exit_unless_loaded(**_: Any) -> None:
    """At worker and beat start (Celery's `worker_init` / `beat_init`): load the workflows now,
    in the parent, so the pool's children inherit the same set; when a module cannot be loaded,
    one line and exit status 2 instead of a worker that answers every task `unknown_workflow`.
    (An exception in a signal receiver is only logged; `SystemExit` stops the start.)"""
    try:
        default_registry()
    except WorkflowLoadError as exc:
        # The real stderr: beat has redirected sys.stderr into its logger by now.
        print(f"agent-jobs: {exc}", file=sys.__stderr__ or sys.stderr, flush=True)
        raise SystemExit(EXIT_WORKFLOWS) from None


__all__ = [
    "EXIT_WORKFLOWS",
    "Loaded",
    "WorkflowLoadError",
    "builtin_registry",
    "default_registry",
    "exit_unless_loaded",
    "loaded_workflows",
    "register",
]
