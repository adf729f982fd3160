"""Server-side prepared statements for the statements every step runs, on Postgres.

psycopg2 sends each statement as text, so Postgres parses and plans it on every call. For the
hot path that costs more than running it: reading a claimable task plans in about 0.15 ms and
runs in 0.02 ms, because the planner weighs every partial index of `tasks` (the sweepers') on
each call. Each statement here is prepared once per connection, on its first use, and then run
as `EXECUTE name(...)`, which reuses the plan.

A prepared statement lives as long as its session, and `PREPARE` is not undone by a rollback, so
a flag in the connection's `info` (which SQLAlchemy clears when the connection is replaced)
records what this connection has prepared; a statement found missing anyway (`DISCARD ALL`)
fails its transaction and is prepared again by the next. A pooler that does not keep sessions
(PgBouncer in transaction mode) cannot hold them at all: `AGENT_JOBS_PG_PREPARE=0` runs the plain
statements instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sqlalchemy import Column, Connection, CursorResult, Executable, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.elements import ClauseElement

from agent_jobs.config import settings

ENV = "AGENT_JOBS_PG_PREPARE"
_INFO_KEY = "agent_jobs_prepared"
_NO_SUCH_STATEMENT = "26000"  # invalid_sql_statement_name
_EXECUTE = re.compile(r"\s*(?:EXECUTE|PREPARE)\s+(\w+)")
_BY_NAME: dict[str, Prepared] = {}


def enabled() -> bool:
    """`AGENT_JOBS_PG_PREPARE`, read once per process through the settings schema."""
    return settings().pg_prepare


def execute(
    conn: Connection, prepared: Prepared, plain: Executable, values: dict[str, Any]
) -> CursorResult[Any]:
    """`prepared` on Postgres (unless turned off), else the same statement as `plain`."""
    if conn.dialect.name == "postgresql" and enabled():
        return prepared.run(conn, values)
    return conn.execute(plain, values)


@dataclass(frozen=True)
class Prepared:
    """One statement with `$1..$n` parameters, their SQL types, and the names callers bind."""

    name: str
    body: str
    params: tuple[tuple[str, str], ...]  # (bind name, SQL type), in $n order
    columns: tuple[Column[Any], ...] = ()

    @property
    def prepare_sql(self) -> str:
        types = ", ".join(t for _, t in self.params)
        return f"PREPARE {self.name} ({types}) AS {self.body}"

    @cached_property
    def statement(self) -> Executable:
        """`EXECUTE name(:a, :b, ...)`, typed like the statement's own result."""
        binds = ", ".join(f":{n}" for n, _ in self.params)
        stmt = text(f"EXECUTE {self.name}({binds})")
        return stmt.columns(*self.columns) if self.columns else stmt

    def run(self, conn: Connection, values: dict[str, Any]) -> CursorResult[Any]:
        done: set[str] = conn.info.setdefault(_INFO_KEY, set())
        if self.name not in done:
            conn.exec_driver_sql(self.prepare_sql)
            done.add(self.name)
        try:
            return conn.execute(self.statement, values)
        except DBAPIError as exc:
            if getattr(exc.orig, "pgcode", None) == _NO_SUCH_STATEMENT:
                # Deallocated behind our back (DISCARD ALL, a pooler that swapped sessions):
                # this transaction is lost, but the next one on this connection prepares again.
                done.clear()
            raise


def from_text(
    name: str, sql: str, types: dict[str, str], columns: tuple[Column[Any], ...] = ()
) -> Prepared:
    """A statement written with `:name` binds (a bind may repeat); `types` gives each one's
    SQL type."""
    order: list[str] = []

    def number(m: re.Match[str]) -> str:
        bind = m.group(1)
        if bind not in order:
            order.append(bind)
        return f"${order.index(bind) + 1}"

    body = re.sub(r"(?<![:\w]):(\w+)", number, sql)
    if name in _BY_NAME:
        raise ValueError(f"prepared statement {name!r} defined twice")
    made = _BY_NAME[name] = Prepared(name, body, tuple((b, types[b]) for b in order), columns)
    return made


def sql_of(statement: str) -> str:
    """The SQL a statement runs: for `EXECUTE name(...)` (or `PREPARE name`), the prepared
    body; otherwise the statement itself. For logs and tests that look for a statement."""
    m = _EXECUTE.match(statement)
    found = _BY_NAME.get(m.group(1)) if m else None
    return found.body if found is not None else statement


def from_clause(
    name: str, stmt: ClauseElement, types: dict[str, str], columns: tuple[Column[Any], ...] = ()
) -> Prepared:
    """A SQLAlchemy statement with named `bindparam`s, compiled for Postgres."""
    compiled = stmt.compile(dialect=postgresql.dialect())  # type: ignore[no-untyped-call]
    constants = {k: v for k, v in compiled.params.items() if k not in types}

    def bind(m: re.Match[str]) -> str:
        key = m.group(1)
        if key not in constants:
            return f":{key}"
        value = constants[key]  # a constant SQLAlchemy made a parameter, e.g. `epoch + 1`
        if type(value) is not int:
            raise TypeError(f"{name}: cannot inline parameter {key}={value!r}")
        return str(value)

    sql = re.sub(r"%\((\w+)\)s", bind, str(compiled)).replace("%%", "%")
    return from_text(name, sql, types, columns)
