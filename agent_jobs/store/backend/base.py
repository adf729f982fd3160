"""`Backend`: the named operations the store needs from a database, one class per dialect.

The store (`store/*.py`) says *what* to do; a backend says *how* this database does it. Postgres
(`backend.postgres`, its SQL in `backend.postgres_sql`, every statement prepared by name) and
SQLite (`backend.sqlite`, SQLAlchemy Core) implement every operation below; nothing outside this
package asks which database it talks to. The contract suite (`tests/contract`, run on both) is
this interface's conformance test.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, Select, Table

from agent_jobs.core.contracts import Action
from agent_jobs.core.patch import ApprovalRequest, ApprovalUse, EffectWrite, Patch
from agent_jobs.store.guard import Guard
from agent_jobs.store.rows import PendingEvent, RowLike, TaskRow

if TYPE_CHECKING:
    from agent_jobs.config import Settings


@dataclass(frozen=True)
class NewTask:
    """A task to create: its row's values, as `Store.create_or_get` computed them."""

    id: str
    tenant_id: str
    idempotency_key: str
    payload_hash: str
    workflow: str
    requester: str
    input: dict[str, Any]
    pinned: dict[str, Any]
    state: dict[str, Any]
    trace_id: str


@dataclass(frozen=True)
class CasWrite:
    """What a transition's compare-and-set writes besides the patch: the `by` of its event
    (`data`), whether a step message follows (`dispatch`), the step's held events, the kept
    lease's time to live, and whether the caller wants the new row back (`returning`)."""

    data: dict[str, Any]
    dispatch: bool
    events: Sequence[PendingEvent]
    lease_ttl_s: float
    returning: bool


@dataclass(frozen=True)
class Decision:
    approval_id: str
    approver: str
    status: str  # granted | denied
    data: dict[str, Any]


class Backend(ABC):
    name: str

    # -- connections ---------------------------------------------------------------------------

    @abstractmethod
    def make_engine(self, url: str, *, pool_size: int, cfg: Settings | None) -> Engine:
        """An engine for `url` with this database's settings (bounded waits, content rule)."""

    @abstractmethod
    def autocommit(self, engine: Engine) -> AbstractContextManager[Connection]:
        """A connection whose every statement is atomic by itself, where the database has that
        (no BEGIN/COMMIT round trips); else one transaction around the block."""

    @abstractmethod
    def write_conn(
        self,
        engine: Engine,
        conn: Connection | None,
        guard: Guard,
        patch: Patch,
        *,
        returning: bool,
    ) -> AbstractContextManager[Connection]:
        """Where a transition of `patch` under `guard` runs: `conn` (the step's, from
        `autocommit`), a fresh autocommit connection, or a transaction of its own, as the
        statements `cas` picks for the same guard and patch need: whatever is more than one
        statement runs in one transaction (invariant 1)."""

    @abstractmethod
    def lifted_timeouts(self, conn: Connection) -> AbstractContextManager[Connection]:
        """`conn` without statement and lock timeouts (migrations, seeding, VACUUM)."""

    # -- tasks ---------------------------------------------------------------------------------

    @abstractmethod
    def insert_task(self, conn: Connection, new: NewTask) -> RowLike | None:
        """The new row with its `created` event, on a connection from `autocommit`; None when
        the (tenant, key) is taken."""

    @abstractmethod
    def claimable_row(self, conn: Connection, task_id: str) -> RowLike | None:
        """The task's row if it is claimable, without locking it."""

    @abstractmethod
    def claim(self, conn: Connection, task_id: str, owner: str, ttl_s: float) -> RowLike | None:
        """Take the lease if the task is claimable; the new row."""

    @abstractmethod
    def claim_seen(
        self, conn: Connection, task: TaskRow, owner: str, ttl_s: float
    ) -> RowLike | None:
        """`claim`, if the row is still as `task` was read; its `lease_epoch` and
        `lease_expires_at` only."""

    # -- the guarded write -----------------------------------------------------------------------

    @abstractmethod
    def cas(
        self, conn: Connection, guard: Guard, patch: Patch, w: CasWrite
    ) -> tuple[RowLike | None, str | None]:
        """The compare-and-set: the row moved and its events written if the guard holds, else
        None. With it, which of the patch's records it wrote in the same statement (a key of
        `RIDES`), or None: the caller writes them (`insert_intent`, `effect_outcome`,
        `request_approval`, `use_approval`). With `w.returning` the row is the whole new row."""

    @abstractmethod
    def insert_intent(self, conn: Connection, task_id: str, action: Action) -> bool:
        """The effect's intent row; False when the key's row is there already."""

    @abstractmethod
    def effect_outcome(self, conn: Connection, task_id: str, eff: EffectWrite) -> None: ...

    @abstractmethod
    def request_approval(self, conn: Connection, task: TaskRow, req: ApprovalRequest) -> None: ...

    @abstractmethod
    def use_approval(self, conn: Connection, task: TaskRow, use: ApprovalUse) -> bool:
        """Consume (single use, granted, unexpired) or close the approval; whether it did."""

    @abstractmethod
    def append_events(self, conn: Connection, task_id: str, events: Sequence[PendingEvent]) -> bool:
        """Events that change no status, numbered on the row and dated when they happened;
        False when the task is not there."""

    # -- approvals -------------------------------------------------------------------------------

    @abstractmethod
    def approval_at_now(self, conn: Connection, approval_id: str) -> RowLike | None:
        """The approval's row with the database's clock beside it (`aj_db_now`)."""

    @abstractmethod
    def decide_approval(self, conn: Connection, d: Decision) -> tuple[RowLike, str | None] | None:
        """Decide a pending, unexpired approval not requested by the approver's principal, wake
        its task if it waits in APPROVAL_WAIT and append the decision's event, on a connection
        from `autocommit`: the approval's new row and the woken task's tenant, or None when
        there was nothing to decide."""

    # -- statements the store builds ---------------------------------------------------------------

    @abstractmethod
    def insert_ignore(self, table: Table) -> Any:
        """`INSERT ... ON CONFLICT DO NOTHING` for `table` (call `.values(...)` on it)."""

    @abstractmethod
    def skip_locked(self, q: Select[Any]) -> Select[Any]:
        """`q` taking row locks that concurrent takers skip: two sweepers split the work."""

    # -- administration ----------------------------------------------------------------------------

    @abstractmethod
    def truncate(self, conn: Connection, tables: Sequence[Table]) -> None:
        """Empty `tables` (in dependency order)."""

    @abstractmethod
    def analyze(self, engine: Engine) -> None:
        """Refresh the planner's statistics (after a bulk seed)."""

    # -- benchmark data (`store.benchdata`) --------------------------------------------------------

    @abstractmethod
    def seed_finished(self, conn: Connection, start: int, count: int) -> None:
        """`count` COMPLETED tasks `tsk_fin_<start>`... in one bulk statement."""

    @abstractmethod
    def seed_history(self, conn: Connection, values: dict[str, Any]) -> None:
        """One batch of seeded history (`benchdata.seed_history`); `ValueError` where the
        database cannot generate it."""
