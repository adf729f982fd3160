"""The store's side of the sweepers and the dispatch gate: sweeps, holds, marks, dead letters."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import case, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from agent_jobs.core.contracts import DeadLetterView
from agent_jobs.core.patch import Patch
from agent_jobs.core.states import TERMINAL, Status
from agent_jobs.store import holds, sweeps
from agent_jobs.store.base import StoreBase
from agent_jobs.store.rows import Dispatch, Lease, TaskRow
from agent_jobs.store.schema import approvals, dead_letters, marks, signing_keys, tasks
from agent_jobs.store.types import db_now, db_now_plus

_TERMINAL = [s.value for s in TERMINAL]
# The statuses of `ix_tasks_active_tenant`'s predicate, spelled as an IN list so that Postgres
# can use that partial index.
_UNFINISHED = sorted(s.value for s in Status if s not in TERMINAL)


class MaintenanceStore(StoreBase):
    def dead_letters(self, tenant_id: str | None = None, limit: int = 100) -> list[DeadLetterView]:
        q = select(dead_letters).order_by(dead_letters.c.at.desc()).limit(limit)
        if tenant_id is not None:
            q = q.where(dead_letters.c.tenant_id == tenant_id)
        with self.engine.connect() as conn:
            return [DeadLetterView(**dict(r._mapping)) for r in conn.execute(q)]

    def unfinished_counts(self, tenant_id: str) -> tuple[dict[str, int], int]:
        """A tenant's unfinished tasks by status, and how many of them hold a live lease (a step
        running now): one grouped count in the database, no task row read."""
        live = (tasks.c.lease_owner.is_not(None)) & (tasks.c.lease_expires_at > db_now())
        q = (
            select(tasks.c.status, func.count(), func.sum(case((live, 1), else_=0)))
            .where((tasks.c.tenant_id == tenant_id) & tasks.c.status.in_(_UNFINISHED))
            .group_by(tasks.c.status)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(q).all()
        return {str(st): int(n) for st, n, _ in rows}, sum(int(r or 0) for _, _, r in rows)

    def mark(self, name: str) -> datetime | None:
        with self.engine.connect() as conn:
            value = conn.execute(
                select(marks.c.at).where(marks.c.name == name)
            ).scalar_one_or_none()
        return value

    def set_mark_now(self, name: str) -> datetime:
        """Record the database's now() under `name` (moving it forward only)."""
        with self.tx() as conn:
            now = conn.execute(select(db_now())).scalar_one()
            try:
                with conn.begin_nested():
                    conn.execute(insert(marks).values(name=name, at=now))
            except IntegrityError:
                conn.execute(
                    update(marks).where((marks.c.name == name) & (marks.c.at < now)).values(at=now)
                )
        assert isinstance(now, datetime)
        return now

    def signing_key(self, name: str) -> bytes:
        """The key named `name`, made (32 random bytes) by whichever process asks first."""
        with self.tx() as conn:
            stmt = self.backend.insert_ignore(signing_keys).values(
                name=name, secret=secrets.token_hex(32), created_at=db_now()
            )
            conn.execute(stmt.on_conflict_do_nothing(index_elements=["name"]))
            secret = conn.execute(
                select(signing_keys.c.secret).where(signing_keys.c.name == name)
            ).scalar_one()
        return bytes.fromhex(secret)

    # -- sweeps (see sweeps.py) ----------------------------------------------------------------

    def sweep_expired_leases(
        self,
        limit: int,
        lost_lease: Callable[[TaskRow], Patch],
        set_aside_row: Callable[[TaskRow, str], None] = lambda task, reason: None,
    ) -> list[Dispatch]:
        """Lapsed leases (see `sweeps.expired_leases`); a row that cannot take its patch is
        dead-lettered and reported to `set_aside_row(task, reason)`."""
        with self.tx() as conn:
            return sweeps.expired_leases(self.backend, conn, limit, lost_lease, set_aside_row)

    def sweep_lost_dispatch(self, limit: int, cutoff: datetime) -> list[Dispatch]:
        with self.tx() as conn:
            return sweeps.lost_dispatch(self.backend, conn, limit, cutoff)

    def sweep_due(self, status: Status, limit: int, cutoff: datetime) -> list[Dispatch]:
        with self.tx() as conn:
            return sweeps.due_timers(self.backend, conn, status, limit, cutoff)

    def sweep_expired_approvals(self, limit: int) -> list[Dispatch]:
        with self.tx() as conn:
            return sweeps.expired_approvals(self.backend, conn, limit)

    # -- the dispatch gate's holds (see holds.py and queue/gate.py) ---------------------------

    def hold(self, task_id: str, reason: str, lease: Lease | None = None) -> bool:
        """Keep a runnable task without a step message until the gate lets it go."""
        with self.tx() as conn:
            return holds.hold(conn, task_id, reason, lease, _TERMINAL)

    def take_held(
        self, reason: str, *, tenant_id: str | None = None, limit: int = 1
    ) -> list[Dispatch]:
        with self.tx() as conn:
            return holds.take_held(self.backend, conn, reason, tenant_id, limit)

    def held_tenants(self, reason: str) -> list[str]:
        with self.engine.connect() as conn:
            return holds.held_tenants(conn, reason)

    def held_ages(self, reason: str | None = None) -> dict[str, tuple[int, float]]:
        with self.engine.connect() as conn:
            return holds.held_ages(conn, reason)

    # -- time passing, for tests and evals (`agent_jobs.testing`, `evals.runner`) ---------------

    def make_due(self, task_id: str) -> None:
        """Move a RETRY_WAIT or EXEC_UNKNOWN timer to now (an approval's expiry is left alone)."""
        parked = [Status.RETRY_WAIT.value, Status.EXEC_UNKNOWN.value]
        with self.tx() as conn:
            conn.execute(
                update(tasks)
                .where((tasks.c.id == task_id) & tasks.c.status.in_(parked))
                .values(next_attempt_at=db_now())
            )

    def lapse_lease(self, task_id: str) -> None:
        """Make the task's lease lapse now, as if its worker died."""
        with self.tx() as conn:
            conn.execute(
                update(tasks)
                .where(tasks.c.id == task_id)
                .values(lease_expires_at=db_now_plus(-1.0))
            )

    def lapse_approval(self, approval_id: str) -> None:
        """The approval's grant window passes now, and its waiting task's timer falls due after
        the task's last dispatch, as a real expiry does (the sweepers skip a timer that was
        dispatched since it fell due)."""
        with self.tx() as conn:
            row = conn.execute(
                update(approvals)
                .where(approvals.c.id == approval_id)
                .values(expires_at=db_now_plus(-1.0))
                .returning(approvals.c.task_id)
            ).first()
            if row is not None:
                conn.execute(
                    update(tasks)
                    .where((tasks.c.id == row[0]) & (tasks.c.status == Status.APPROVAL_WAIT.value))
                    .values(next_attempt_at=db_now_plus(-1.0), dispatched_at=db_now_plus(-2.0))
                )
