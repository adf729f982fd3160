"""Seams for the deterministic simulator (`agent_jobs.simulation`): the database's clock, a hook
before every statement, and the errors a real database raises. Only the store imports
SQLAlchemy, so the simulator reaches the engine through these.

- `use_clock(engine, now)`: on SQLite, `now()` in SQL (leases, timers, approval expiry) reads
  `now()` of the simulator's virtual clock instead of the machine's, on every connection.
  On Postgres the simulator's own databases do the same (`SimulatedPostgres.use_clock`, in
  `backend.simulated_postgres`, which says how).
- `on_statement(engine, hook)`: `hook(sql)` runs before each statement the engine sends,
  `BEGIN` and `COMMIT` included; what it raises is what the statement raised (a crashed
  worker, a lost connection, a lock timeout).
- `database_error(kind, sql)`: the exception SQLAlchemy raises for `kind` on Postgres, made
  with psycopg2's own classes and SQLSTATEs, so the runtime's classification (outage or an
  answer from a server that is there) treats it exactly as the real one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Engine, event
from sqlalchemy import exc as sa_exc

from agent_jobs.store.backend.simulated_postgres import (
    SimulatedPostgres,
    create_template,
    drop_database,
)
from agent_jobs.store.backend.simulated_postgres import (
    in_transaction as postgres_in_transaction,
)
from agent_jobs.store.backend.sqlite import VIRTUAL_CLOCK, SqliteBackend

__all__ = [
    "DATABASE_ERRORS",
    "OpenTransactions",
    "SimulatedPostgres",
    "create_template",
    "database_error",
    "drop_database",
    "on_statement",
    "postgres_in_transaction",
    "simulated_sqlite",
    "use_clock",
]

_STAMP = "%Y-%m-%d %H:%M:%S.%f"


def simulated_sqlite(url: str) -> Engine:
    """The store's SQLite engine, with its connections pooled for one thread's reuse."""
    return SqliteBackend().engine(url, keep_connections=True)


def use_clock(engine: Engine, now: Callable[[], datetime]) -> None:
    """Make SQL's `now()` on this SQLite engine read `now()` (a UTC datetime). Call before the
    engine's first connection (connections made before keep the machine's clock)."""
    setattr(engine.dialect, VIRTUAL_CLOCK, True)

    def aj_now(offset_s: float) -> str:
        from datetime import timedelta  # noqa: PLC0415 - hot, but tiny

        # The text SQLite's strftime gives (and SQLAlchemy stores): six fractional digits.
        return (now() + timedelta(seconds=float(offset_s or 0.0))).strftime(_STAMP)

    @event.listens_for(engine, "connect")
    def _register(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.create_function("aj_now", 1, aj_now, deterministic=False)
        # One thread runs every simulated worker: a lock held by a worker the schedule
        # interleaved is a bug of the schedule, to surface at once, not after 30 s.
        dbapi_conn.execute("PRAGMA busy_timeout=0")

    engine.dispose()


def on_statement(engine: Engine, hook: Callable[[str], None]) -> Callable[[], None]:
    """Run `hook(sql)` before every statement; returns a function that removes it. On the
    simulated Postgres it may see the clock's `set_config` in front of the statement (the
    listeners of `use_clock` and of the connection it runs on are not ordered by `insert`)."""

    def _before(conn: Any, cursor: Any, statement: str, *_args: Any) -> None:
        hook(statement)

    event.listen(engine, "before_cursor_execute", _before, insert=True)
    return lambda: event.remove(engine, "before_cursor_execute", _before)


# psycopg2 ships no type stubs: its classes are looked up, not imported for the type checker.
_pg: Any = importlib.import_module("psycopg2")
_pg_errors: Any = importlib.import_module("psycopg2.errors")


def _coded(base: Any, code: str | None) -> type[Exception]:
    """A subclass of psycopg2's `base` carrying the SQLSTATE the server would have sent
    (psycopg2 sets `pgcode` from the server's answer; one made here has none)."""
    return cast(type[Exception], type(base.__name__, (base,), {"pgcode": code}))


_MESSAGES: dict[str, tuple[type[Exception], str]] = {
    "statement_timeout": (
        _coded(_pg_errors.QueryCanceled, "57014"),
        "canceling statement due to statement timeout",
    ),
    "lock_timeout": (
        _coded(_pg_errors.LockNotAvailable, "55P03"),
        "canceling statement due to lock timeout",
    ),
    "deadlock": (_coded(_pg_errors.DeadlockDetected, "40P01"), "deadlock detected"),
    "serialization": (
        _coded(_pg_errors.SerializationFailure, "40001"),
        "could not serialize access due to concurrent update",
    ),
    "connection_lost": (
        _coded(_pg.OperationalError, None),
        "server closed the connection unexpectedly",
    ),
}
DATABASE_ERRORS = tuple(_MESSAGES)


def database_error(kind: str, sql: str) -> sa_exc.DBAPIError:
    """The error SQLAlchemy raises when Postgres answers `sql` with `kind` (one of
    `DATABASE_ERRORS`)."""
    cls, message = _MESSAGES[kind]
    orig = cls(message)
    if kind == "connection_lost":
        return sa_exc.OperationalError(sql, None, orig, connection_invalidated=True)
    wrapper = (
        sa_exc.OperationalError if isinstance(orig, _pg.OperationalError) else sa_exc.DatabaseError
    )
    return wrapper(sql, None, orig)


def _sqlite_in_transaction(dbapi_conn: Any) -> bool:
    return bool(dbapi_conn.in_transaction)


class OpenTransactions:
    """How many transactions are open on an engine now, asked of the driver's connections
    (`in_transaction`: sqlite3's by default; `postgres_in_transaction` for psycopg2's). The
    simulator interleaves other work inside a step only where this is 0, as a real concurrent
    process could (one SQLite writer would otherwise wait on the step's own lock; on Postgres a
    row the suspended transaction locked would be waited for by the one thread holding it)."""

    def __init__(
        self, engine: Engine, in_transaction: Callable[[Any], bool] = _sqlite_in_transaction
    ) -> None:
        self._in_transaction = in_transaction
        self._conns: list[Any] = []
        event.listen(engine, "connect", lambda dbapi_conn, _record: self._conns.append(dbapi_conn))

    @property
    def count(self) -> int:
        n = 0
        live = []
        for conn in self._conns:
            try:
                n += self._in_transaction(conn)
            except Exception:  # closed: forget it
                continue
            live.append(conn)
        self._conns = live
        return n
