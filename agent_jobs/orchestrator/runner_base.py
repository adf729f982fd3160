"""What the orchestrator's step paths share: `StepReport` and `RunnerBase`.

`Orchestrator` (`runner`) is put together from mixins, one module per path a step takes:

- `runner`: the entry points (submit, cancel, an approval's decision), `run_step` and the start
  of a step (the read, or the claim), the session a step runs in, riding out an outage;
- `quick.QuickStep`: a step without I/O, computed at once and committed with compare-and-set;
- `leased.LeasedStep`: a step under a fenced lease, its commit (or its failure recorded), the
  events its hooks recorded, and the next step's message with its hints.

`RunnerBase` declares the dependencies every path reads (set by `Orchestrator.__init__`) and
the methods one path calls in another, each implemented where it belongs.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass

from agent_jobs.config import Settings
from agent_jobs.core.patch import Patch
from agent_jobs.core.states import Status
from agent_jobs.orchestrator.leases import LeaseKeeper
from agent_jobs.orchestrator.ports import Observer
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.orchestrator.steps import Session, Steps
from agent_jobs.orchestrator.workflow import Workflow
from agent_jobs.store import Dispatch, Lease, Store, TaskRow


@dataclass(frozen=True)
class StepReport:
    task_id: str
    from_status: Status
    to_status: Status | None  # None: nothing to do, or the commit lost the race
    stale: bool = False
    tenant_id: str = ""
    # The step raised; the failure was recorded as a failed attempt (or a dead letter).
    failed: bool = False
    # The next step's message, published by run_step once the step's gate slot is given back.
    dispatch: Dispatch | None = None


class RunnerBase(ABC):
    # The dependencies, set by `Orchestrator.__init__`.
    store: Store
    workflows: WorkflowRegistry
    settings: Settings
    observer: Observer
    keeper: LeaseKeeper
    steps: Steps
    # Per thread: the step's hook clock (`run_step`) and whether an outage is tolerated.
    _local: threading.local

    # -- declared here, implemented in `runner` ---------------------------------------------

    @abstractmethod
    def _workflow(self, task: TaskRow) -> Workflow | None:
        """The task's workflow, or None if it is not registered."""

    @abstractmethod
    def _session(self, lease: Lease, workflow: Workflow, *, quick: bool = False) -> Session:
        """The session a step runs in (quick: no intermediate commit, events written at once)."""

    @abstractmethod
    def _dispatch_status(self, s: Session) -> Patch | None:
        """The step for the task's status."""

    @abstractmethod
    def _outage(self, exc: BaseException) -> bool:
        """Whether `exc` is an outage to ride out rather than a failure to record."""

    @abstractmethod
    def _interrupted(self, task_id: str, lease: Lease | None, exc: BaseException) -> Exception:
        """The `StepInterrupted` to raise for `exc`, after trying to give `lease` back."""

    # -- declared here, implemented in `quick` ----------------------------------------------

    @abstractmethod
    def _quick(self, task: TaskRow, workflow: Workflow) -> bool:
        """Whether the step for `task` runs as a quick step."""

    # -- declared here, implemented in `leased` ---------------------------------------------

    @abstractmethod
    def _told(
        self, dispatch: Dispatch, after: TaskRow, workflow: Workflow, *, carry: bool
    ) -> Dispatch:
        """The next step's message, with the hints of what that step may skip."""
