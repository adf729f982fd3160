"""The simulated worker processes: each an `Orchestrator` of its own (its own lease owner),
with a lease keeper the world drives instead of a thread, the faults drawn for the step it runs,
and the store as it sees it: after each call, the world may run other work in between."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agent_jobs.core.errors import IllegalTransition
from agent_jobs.ops.live import StoreSwitches
from agent_jobs.ops.switches import SwitchSet
from agent_jobs.orchestrator.leases import LeaseKeeper
from agent_jobs.orchestrator.runner import Orchestrator
from agent_jobs.simulation.oracle import Levers, Violation
from agent_jobs.store import Lease, Store

if TYPE_CHECKING:
    from agent_jobs.simulation.world import World


class WorkerCrashed(BaseException):
    """The simulated worker process died here (a BaseException: no step code catches it)."""


@dataclass
class StepFaults:
    """What goes wrong in one step: before its `crash_at`-th statement the worker dies, or the
    `error_at`-th statement fails with `error`; around a send it dies (`send`); or it dies at
    the first statement after a write once no transaction is open (`after_commit`: the write
    committed, alone in an autocommit step or with its transaction)."""

    crash_at: int | None = None
    after_commit: bool = False
    armed: bool = False  # (after_commit) a write was sent; die once it has committed
    error_at: int | None = None
    error: str = ""
    send: str = ""  # "", "before", "after" or "error_after" (the next statements fail)
    statements: int = 0
    injected: bool = False  # a database error was raised in this step


@dataclass
class Worker:
    name: str
    incarnation: int
    orchestrator: Orchestrator
    keeper: SimKeeper

    @property
    def owner_name(self) -> str:
        return f"{self.name}.{self.incarnation}"


class SimKeeper(LeaseKeeper):
    """Lease renewal without a thread: the world renews held leases when the clock moves, for
    live workers (a worker in the middle of a slow call renews too: its process is alive)."""

    def _ensure_thread(self) -> None:
        return None

    def held(self) -> list[Lease]:
        with self._lock:
            return [h.lease for h in self._held.values() if not h.lost]


@dataclass
class Context:
    worker: Worker | None
    faults: StepFaults
    levers_at_start: Levers
    task_id: str | None = None  # the task the step works on (a sweeper's: none)
    # The levers in force when the step last read the switches: what its decision rests on (a
    # lever let go between the step's start and its read is rightly not obeyed).
    levers_read: Levers | None = None
    stalled: bool = False  # its worker stalled past its lease and the task was taken over


class Interleaving:
    """The store as a worker or a sweeper sees it: after each call returns, the world may run
    other work in between (only where no transaction is open)."""

    _CONTEXTS = frozenset({"tx", "autocommit", "step_conn", "write_conn"})

    def __init__(self, store: Store, world: World) -> None:
        self._store = store
        self._world = world

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if not callable(value) or name in self._CONTEXTS or name.startswith("_"):
            return value
        world = self._world

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                result = value(*args, **kwargs)
            except IllegalTransition as exc:
                # The store refused it, as it must (invariant 1); but the runtime asking for a
                # transition the table does not have is its bug, whatever handler would then
                # count it as a failed attempt and carry on.
                raise Violation("legal_transitions", f"the runtime asked for {exc}") from exc
            world.after_store_call(name)
            return result

        return call


class ReadSwitches:
    """The operator's switches as the runtime reads them, telling the world each read: the oracle
    judges a send by the levers of the step's last read and of the send's moment."""

    def __init__(self, inner: StoreSwitches, world: World) -> None:
        self._inner = inner
        self._world = world

    def current(self) -> SwitchSet:
        self._world.switches_read()
        return self._inner.current()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
