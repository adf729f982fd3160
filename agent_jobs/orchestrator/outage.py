"""A step that cannot reach the database: told apart from a step that failed, and waited out.

Before, a step whose database was away raised out of the Celery task, its message was acked,
and the task waited for the dispatch sweeper's grace (60 s by default) after the database came
back. Now the step keeps its message and tries again (`Orchestrator.run_step_waiting`), with a
short capped backoff, for at most `AGENT_JOBS_OUTAGE_WAIT_S`; the last try is an ordinary step,
whose failure is recorded and counted as before. A try is a whole step from a fresh read: the
compare-and-set on the row's version and the fenced lease make a repeated try as harmless as a
duplicate delivery, and an effect whose outcome could not be recorded is found again by its
intent (EXECUTING, then reconciled by its idempotency key), never sent blind.
"""

from __future__ import annotations

from sqlalchemy import exc as sa_exc

from agent_jobs.store import Lease


def _driver_unreachable(error: BaseException) -> bool:
    """psycopg2's errors for a server it cannot talk to (its `OperationalError` and
    `InterfaceError` and their subclasses): connection refused or dropped (no SQLSTATE, or a
    connection exception's), the server shutting down. A statement or lock timeout is an
    `OperationalError` too, but an answer from a server that is there (SQLSTATE 57014, 55P03):
    not one, or a step blocked on a lock would be tried again for the whole outage wait, each
    try up to the statement timeout. SQLite's `OperationalError` (a missing table, a locked
    file) says nothing about reachability and is not one. Matched by class name and module, so
    that nothing here imports the driver."""
    if not any(
        cls.__module__.startswith("psycopg2") and cls.__name__ in _DRIVER_UNREACHABLE
        for cls in type(error).__mro__
    ):
        return False
    code = getattr(error, "pgcode", None)
    return code is None or code.startswith("08") or code in _SHUTTING_DOWN


_DRIVER_UNREACHABLE = ("OperationalError", "InterfaceError")
# admin_shutdown, crash_shutdown, cannot_connect_now: the server is going or not there yet.
_SHUTTING_DOWN = frozenset({"57P01", "57P02", "57P03"})


def db_unavailable(error: BaseException) -> bool:
    """Whether `error` (or an error it was raised from) says the database could not be reached,
    rather than that it refused a statement."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < 8:
        seen.add(id(current))
        if isinstance(current, sa_exc.DBAPIError) and current.connection_invalidated:
            return True
        if isinstance(current, sa_exc.TimeoutError):  # no pooled connection came free
            return True
        if isinstance(current, sa_exc.OperationalError | sa_exc.InterfaceError):
            if current.orig is not None and _driver_unreachable(current.orig):
                return True
        elif _driver_unreachable(current):
            return True
        current = current.__cause__ or current.__context__
    return False


class StepInterrupted(Exception):
    """A step stopped because the database could not be reached. Nothing of it was committed
    after its last commit; `lease`: the lease it took and could not give back (None if it held
    none, or gave it back), for the next try to release first (fenced by epoch and owner)."""

    def __init__(self, task_id: str, lease: Lease | None) -> None:
        super().__init__(f"step for {task_id} interrupted: the database could not be reached")
        self.task_id = task_id
        self.lease = lease


def backoff_s(attempt: int, cap_s: float, jitter: float) -> float:
    """The pause before try `attempt + 1` (0-based `attempt`): 0.1 s doubling up to `cap_s`,
    with equal jitter (`jitter` in [0, 1)) so that workers waiting out one outage do not all
    come back in the same instant."""
    ceiling = min(cap_s, 0.1 * 2.0 ** min(attempt, 20))
    return ceiling / 2 + ceiling / 2 * jitter
