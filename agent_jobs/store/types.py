"""Column types and database-clock expressions that behave the same on Postgres and SQLite.

Leases and timers are computed from the database clock, never a worker's, so two workers with
skewed clocks still agree on who owns a task. How each database says "now" is its backend's
(`store.backend.postgres_sql`, `store.backend.sqlite`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime
from sqlalchemy.dialects.postgresql import JSON as PG_JSON
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import expression
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.types import TypeDecorator

JsonType = JSON().with_variant(JSONB(), "postgresql")
# A task's state: stored and loaded whole, never queried inside, so Postgres keeps the text as
# sent (`json`) instead of parsing every write into `jsonb` and printing every read back
# (migration 0012).
StateJsonType = JSON().with_variant(PG_JSON(), "postgresql")


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both backends (SQLite stores naive UTC text)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; pass an aware UTC datetime")
        # In UTC: SQLite's DATETIME stores the wall time without the offset.
        return value.astimezone(UTC)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):  # SQLite text written by strftime in SQL
            value = datetime.fromisoformat(value)
        assert isinstance(value, datetime)
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class db_now(expression.FunctionElement[datetime]):
    """The database's current time."""

    type = UTCDateTime()
    inherit_cache = True
    name = "db_now"


class db_now_plus(expression.FunctionElement[datetime]):
    """The database's current time plus a number of seconds (may be a bound parameter)."""

    type = UTCDateTime()
    inherit_cache = True
    name = "db_now_plus"


class commits_without_flush(expression.ColumnElement[bool]):
    """A condition that is always true and, on Postgres, lets the statement's transaction commit
    without waiting for its WAL to reach the disk (`synchronous_commit` off for that
    transaction only). For a claim alone: a lease is a soft lock that a crash may lose like any
    other. What a lost claim guarded is lost with it (a model call or a read runs again; an
    effect only ever follows the intent's own commit, which is synchronous and flushes every
    earlier record, the claim's included), and the step's commit, fenced on the claimed epoch
    and owner, fails. Every transition still waits for its flush."""

    type = Boolean()
    inherit_cache = True


@compiles(commits_without_flush)
def _other_commits_without_flush(
    element: commits_without_flush, compiler: SQLCompiler, **kw: Any
) -> str:
    return "1 = 1"
