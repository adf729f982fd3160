"""What every part of `Store` stands on: the engine, one short transaction, the database clock."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Self

from sqlalchemy import Connection, Engine, select

from agent_jobs.store.engine import make_engine
from agent_jobs.store.types import db_now


class StoreBase:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name

    @classmethod
    def from_url(cls, url: str) -> Self:
        return cls(make_engine(url))

    @contextmanager
    def tx(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    @contextmanager
    def autocommit(self) -> Iterator[Connection]:
        """A connection whose every statement is atomic by itself, on Postgres: for a read or a
        write that is one statement, no BEGIN and no COMMIT or ROLLBACK round trip around it
        (a read on `engine.connect()` costs three: BEGIN, the query, the reset's ROLLBACK).
        On SQLite, one transaction, as `tx`."""
        if self.dialect != "postgresql":
            with self.tx() as conn:
                yield conn
            return
        with self.engine.connect() as conn:
            # The driver's own switch, not SQLAlchemy's `isolation_level="AUTOCOMMIT"`: that
            # one is undone on the connection's return to the pool with a `SET` sent to the
            # server, a round trip each time. psycopg2's flag is client-side: it changes nothing
            # on the server, and with it set `rollback()` (SQLAlchemy's reset) sends nothing.
            dbapi = conn.connection.dbapi_connection
            dbapi.autocommit = True  # type: ignore[union-attr]
            try:
                yield conn
            finally:
                if conn.in_transaction():
                    conn.rollback()  # SQLAlchemy's bookkeeping only: nothing is open
                # A connection found dead was invalidated and closed: there is no flag to put
                # back, and trying would hide the error that killed it.
                if not conn.invalidated and not dbapi.closed:  # type: ignore[union-attr]
                    dbapi.autocommit = False  # type: ignore[union-attr]

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
