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

    def dispose(self) -> None:
        self.engine.dispose()

    def db_now(self) -> datetime:
        with self.engine.connect() as conn:
            value = conn.execute(select(db_now())).scalar_one()
            conn.rollback()
        assert isinstance(value, datetime)
        return value

    def ping(self) -> None:
        """Raise if the database cannot answer a trivial query (readiness probes)."""
        with self.engine.connect() as conn:
            conn.execute(select(1)).scalar_one()
            conn.rollback()
