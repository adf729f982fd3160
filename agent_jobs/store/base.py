"""What every part of `Store` stands on: the engine, one short transaction, the database clock."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Self

from sqlalchemy import Connection, Engine, select
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from agent_jobs.store import backend
from agent_jobs.store.engine import make_engine
from agent_jobs.store.types import db_now

# Errors that mean "the database cannot be reached or cannot serve now" (connection refused or
# lost, pool exhausted, lock and statement timeouts, deadlocks): callers answer "try again" (503,
# a retry), not a bug.
UNAVAILABLE: tuple[type[Exception], ...] = (OperationalError, InterfaceError, PoolTimeout)


class StoreBase:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # How this database does each operation (`store.backend`): nothing else asks which
        # database it is.
        self.backend = backend.of(engine)

    @classmethod
    def from_url(cls, url: str) -> Self:
        return cls(make_engine(url))

    @contextmanager
    def tx(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """A connection whose every statement is atomic by itself, where the database has that:
        for a read or a write that is one statement, no BEGIN and no COMMIT or ROLLBACK round
        trip around it (a read on `engine.connect()` costs three). Elsewhere one transaction,
        as `tx` (`Backend.autocommit`)."""
        with self.backend.autocommit(self.engine) as conn:
            yield conn

    def dispose(self) -> None:
        self.engine.dispose()

    def db_now(self) -> datetime:
        with self.autocommit() as conn:
            value = conn.execute(select(db_now())).scalar_one()
        assert isinstance(value, datetime)
        return value

    def ping(self) -> None:
        """Raise if the database cannot answer a trivial query (readiness probes)."""
        with self.engine.connect() as conn:
            conn.execute(select(1)).scalar_one()
            conn.rollback()
