"""Loading workflows of your own: the modules `AGENT_JOBS_WORKFLOWS` names, then the entry points
of group `agent_jobs.workflows`, imported into a registry.

What a module does (either, or both):

- defines a module-level `workflows`: a list of workflow instances, registered by the loader; or
- calls `agent_jobs.workflows.register(MyWorkflow())` when it is imported.

An entry point names a module (`hello = mypkg.workflows`, the same rules) or an object in one
(`hello = mypkg.workflows:HELLO`): a workflow instance or a list of them.

Every failure is a `WorkflowLoadError` whose message is one line naming the setting (or the
entry point) and the module: a module that does not import (with its exception's first line),
that registers no workflow, or whose workflow takes a `name@version` another already has. A
process that cannot load what it was told to stops at start, not with `422 unknown_workflow`
on the first request.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import Any

from agent_jobs.config import env_name
from agent_jobs.core.errors import ConfigError
from agent_jobs.core.text import for_log
from agent_jobs.orchestrator.registry import InvalidWorkflow, WorkflowConflict, WorkflowRegistry
from agent_jobs.orchestrator.workflow import Workflow

SETTING = env_name("workflows")
ENTRY_POINT_GROUP = "agent_jobs.workflows"
# The hooks every workflow has: the methods of the `Workflow` protocol, read from it.
HOOKS = tuple(n for n, v in vars(Workflow).items() if callable(v) and not n.startswith("_"))
HOW = "define a module-level `workflows` list or call agent_jobs.workflows.register(...) at import"


class WorkflowLoadError(ConfigError):
    """A module or entry point of workflows that could not be loaded (one line, for a person)."""

    code = "workflow_load_error"


@dataclass(frozen=True)
class Origin:
    """Where a registered workflow came from: `built-in`, `module` (named by
    `AGENT_JOBS_WORKFLOWS`), `entry point`, or `code` (a `register()` call of the process's own,
    outside any loading)."""

    kind: str
    where: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.where}" if self.where else self.kind


BUILT_IN = Origin("built-in")


def summary(exc: BaseException) -> str:
    """An exception as one bounded line: `ZeroDivisionError: division by zero`."""
    lines = str(exc).strip().splitlines()
    first = lines[0].strip() if lines else ""
    name = type(exc).__name__
    return for_log(f"{name}: {first}" if first else name, 200)


def load_workflows(
    registry: WorkflowRegistry,
    modules: Sequence[str],
    points: Iterable[EntryPoint] = (),
) -> dict[str, Origin]:
    """Import `modules` (in order), then load `points`, registering into `registry`. Returns the
    origin of each workflow they registered. Idempotent: loading what is already loaded again
    registers nothing new and reports the same origins."""
    origins: dict[str, Origin] = {}
    for name in modules:
        where = f"{SETTING}: module {name!r}"
        origin = Origin("module", f"{name} ({SETTING})")
        for key in _load(registry, where, name, partial(_import, name)):
            origins[key] = origin
    for point in points:
        where = f"entry point {for_log(point.name, 60)!r} = {for_log(point.value, 120)!r} "
        where += f"(group {ENTRY_POINT_GROUP}{_dist(point)})"
        origin = Origin("entry point", for_log(f"{point.name} = {point.value}{_dist(point)}", 200))
        module = point.value.partition(":")[0].strip()
        for key in _load(registry, where, module, partial(_load_point, point, module)):
            origins[key] = origin
    return origins


def installed_entry_points() -> list[EntryPoint]:
    """The entry points of group `agent_jobs.workflows` of every installed distribution."""
    return sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: (p.name, p.value))


def _dist(point: EntryPoint) -> str:
    dist = getattr(point, "dist", None)
    if dist is None:
        return ""
    return f", from {for_log(dist.name, 60)} {for_log(dist.version, 30)}"


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise _NotFound from None
        raise


def _load_point(point: EntryPoint, module: str) -> Any:
    _import(module)  # first: a module that is not there is reported as such
    return point.load()


class _NotFound(Exception):
    """The module itself (not one it imports) is not on the path."""


def _load(registry: WorkflowRegistry, where: str, module: str, load: Any) -> list[str]:
    before = set(registry.names())
    try:
        loaded = load()
    except _NotFound:
        raise WorkflowLoadError(
            f"{where} was not found (is it installed, or on PYTHONPATH?)"
        ) from None
    except (WorkflowConflict, InvalidWorkflow) as exc:
        # Raised by a register() call during the import: name the module.
        raise WorkflowLoadError(f"{where}: {for_log(str(exc), 200)}") from None
    except (Exception, SystemExit) as exc:  # any failure of user code at import
        raise WorkflowLoadError(f"{where} did not import: {summary(exc)}") from None
    keys = set(registry.names()) - before
    for workflow in _listed(where, loaded):
        try:
            keys.add(registry.register(workflow))
        except ConfigError as exc:
            raise WorkflowLoadError(f"{where}: {for_log(str(exc), 200)}") from None
    if not keys:
        # Imported earlier in this process (its register() calls already ran): its workflows
        # are the ones defined in it.
        keys = {k for k in before if _defined_in(registry.get(k), module)}
    if not keys:
        raise WorkflowLoadError(f"{where} registers no workflow ({HOW})")
    return sorted(keys)


def _listed(where: str, loaded: Any) -> list[Any]:
    """The workflows an imported object offers: a module's `workflows`, an instance, a list."""
    if isinstance(loaded, ModuleType):
        if not hasattr(loaded, "workflows"):
            return []
        loaded = loaded.workflows
        where += ", its `workflows`"
    items = list(loaded) if isinstance(loaded, list | tuple) else [loaded]
    for item in items:
        missing = [h for h in HOOKS if not callable(getattr(item, h, None))]
        if isinstance(item, type) or missing:
            what = f"the class {item.__qualname__}" if isinstance(item, type) else repr(item)
            hint = ", not the class: MyWorkflow()" if isinstance(item, type) else ""
            raise WorkflowLoadError(
                f"{where}: {for_log(what, 80)} is not a workflow instance{hint}"
                + (f" (no {', '.join(missing)})" if missing and not isinstance(item, type) else "")
            )
    return items


def _defined_in(workflow: object, module: str) -> bool:
    own = type(workflow).__module__
    return own == module or own.startswith(module + ".")
