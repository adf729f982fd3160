"""Server-side prepared statements for the statements every step runs, on Postgres.

psycopg2 sends each statement as text, so Postgres parses and plans it on every call. For the
hot path that costs more than running it: reading a claimable task plans in about 0.15 ms and
runs in 0.02 ms, because the planner weighs every partial index of `tasks` (the sweepers') on
each call. Each statement here is prepared once per connection, on its first use, and then run
as `EXECUTE name(...)`, which reuses the plan.

SQLAlchemy's execution machinery (compiled-statement cache, bind processing, the cursor
result, the `Row`) costs more CPU than psycopg2's own `execute` for these statements, about
0.1 ms a call. So when nothing else listens to the engine's cursor events (only the content
rule, which this module applies itself), `EXECUTE` runs on the driver's cursor and the row comes
back as a `RawRow` with the columns' own result processing; errors still reach the caller as
SQLAlchemy's, through the connection's own handling (a lost connection is invalidated). A
listener (a test injecting a failure, OpenTelemetry's SQLAlchemy instrumentation) and SQL
logging (`echo`) see every statement, because then the statement runs through SQLAlchemy.

A prepared statement lives as long as its session, and `PREPARE` is not undone by a rollback, so
a flag in the connection's `info` (which SQLAlchemy clears when the connection is replaced)
records what this connection has prepared; a statement found missing anyway (`DISCARD ALL`),
or one whose plan a migration made stale (a returned column changed type: SQLSTATE 0A000),
fails its transaction and is prepared again by the next. A pooler that does not keep sessions
(PgBouncer in transaction mode) cannot hold them at all: `AGENT_JOBS_PG_PREPARE=0` runs the plain
statements instead.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from sqlalchemy import Column, Connection, Executable, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.elements import ClauseElement

from agent_jobs.config import settings
from agent_jobs.store.engine import clean_params, is_content_rule
from agent_jobs.store.rows import RowLike

ENV = "AGENT_JOBS_PG_PREPARE"
_INFO_KEY = "agent_jobs_prepared"
_NO_SUCH_STATEMENT = "26000"  # invalid_sql_statement_name
# feature_not_supported: "cached plan must not change result type", after a migration changed
# the type of a column a prepared statement returns. The statement still exists, so it must be
# deallocated before it can be prepared again.
_PLAN_CHANGED = "0A000"
_STALE_KEY = "agent_jobs_prepared_stale"
_EXECUTE = re.compile(r"\s*(?:EXECUTE|PREPARE)\s+(\w+)")
_BY_NAME: dict[str, Prepared] = {}
_SQL_LOG = logging.getLogger("sqlalchemy.engine.Engine")  # the logger SQLAlchemy logs SQL to
_PROCESSORS: dict[str, Sequence[tuple[str, Callable[[Any], Any]]]] = {}


def enabled() -> bool:
    """`AGENT_JOBS_PG_PREPARE`, read once per process through the settings schema."""
    return settings().pg_prepare


class FirstRow(Protocol):
    """What callers read of a result: its first row."""

    def first(self) -> RowLike | None: ...


class RawRow:
    """A row read on the driver's cursor: its columns by name, as `Row._mapping` gives them."""

    __slots__ = ("_mapping",)

    def __init__(self, mapping: dict[str, Any]) -> None:
        self._mapping = mapping

    def __repr__(self) -> str:
        return f"RawRow({self._mapping!r})"


class RawResult:
    """The rows of one `EXECUTE` run on the driver's cursor, already fetched."""

    __slots__ = ("rows",)

    def __init__(self, rows: list[RawRow]) -> None:
        self.rows = rows

    def first(self) -> RawRow | None:
        return self.rows[0] if self.rows else None


def execute(conn: Connection, prepared: Prepared, values: dict[str, Any]) -> FirstRow:
    """`prepared` (the Postgres backend's statements), unless turned off: then the same
    statement through SQLAlchemy (`Prepared.plain`)."""
    if enabled():
        return prepared.run(conn, values)
    return conn.execute(prepared.plain, values)


def _observed(conn: Connection) -> bool:
    """Whether anything but the content rule listens to this connection's cursor events, or
    SQLAlchemy would log its statements (`echo`, or its logger at INFO)."""
    dispatch = conn.dispatch
    if dispatch.after_cursor_execute or conn.engine.echo or _SQL_LOG.isEnabledFor(logging.INFO):
        return True
    return any(not is_content_rule(fn) for fn in dispatch.before_cursor_execute)


@dataclass(frozen=True)
class Prepared:
    """One statement with `$1..$n` parameters, their SQL types, and the names callers bind."""

    name: str
    body: str
    params: tuple[tuple[str, str], ...]  # (bind name, SQL type), in $n order
    columns: tuple[Column[Any], ...] = ()
    source: str = ""  # the statement with its `:name` binds, as written
    # The SQLAlchemy statement it was compiled from (`from_clause`), which SQLite can run too.
    clause: Executable | None = field(default=None, compare=False)

    @cached_property
    def plain(self) -> Executable:
        """What runs when the statement is not prepared (SQLite, `AGENT_JOBS_PG_PREPARE=0`):
        the SQLAlchemy statement it was made from, else its text as written."""
        if self.clause is not None:
            return self.clause
        stmt = text(self.source)
        return stmt.columns(*self.columns) if self.columns else stmt

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

    @cached_property
    def driver_sql(self) -> str:
        """`EXECUTE name(%(a)s, ...)`, in the driver's own parameter style."""
        binds = ", ".join(f"%({n})s" for n, _ in self.params)
        return f"EXECUTE {self.name}({binds})"

    def run(self, conn: Connection, values: dict[str, Any]) -> FirstRow:
        done: set[str] = conn.info.setdefault(_INFO_KEY, set())
        if self.name not in done:
            if conn.info.pop(_STALE_KEY, False):
                conn.exec_driver_sql("DEALLOCATE ALL")
            conn.exec_driver_sql(self.prepare_sql)
            done.add(self.name)
        try:
            if _observed(conn) or not _in_transaction(conn):
                return conn.execute(self.statement, values)
            return self._run_on_cursor(conn, values)
        except DBAPIError as exc:
            if getattr(exc.orig, "pgcode", None) in (_NO_SUCH_STATEMENT, _PLAN_CHANGED):
                # Deallocated behind our back (DISCARD ALL, a pooler that swapped sessions), or
                # its plan outlived a migration that changed a returned column's type: this
                # transaction is lost, but the next one on this connection deallocates what is
                # left and prepares again, instead of failing until the process restarts.
                done.clear()
                conn.info[_STALE_KEY] = True
            raise

    def _run_on_cursor(self, conn: Connection, values: dict[str, Any]) -> RawResult:
        params = clean_params(values)
        cursor = None
        try:
            cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            cursor.execute(self.driver_sql, params)
            fetched = cursor.fetchall() if cursor.description is not None else []
            names = [d[0] for d in cursor.description or ()]
            cursor.close()
        except Exception as exc:
            # Wrapped as SQLAlchemy would (DBAPIError, with `orig`), and a connection found
            # dead is invalidated, so the pool does not hand it out again.
            conn._handle_dbapi_exception(exc, self.driver_sql, params, cursor, None)
        processors = self._processors(conn.dialect)
        rows = []
        for values_ in fetched:
            mapping = dict(zip(names, values_, strict=True))
            for name, process in processors:
                if name in mapping:
                    mapping[name] = process(mapping[name])
            rows.append(RawRow(mapping))
        return RawResult(rows)

    def _processors(self, dialect: Dialect) -> Sequence[tuple[str, Callable[[Any], Any]]]:
        """The result processing SQLAlchemy would apply to the declared columns (e.g.
        `UTCDateTime`'s conversion to UTC), once per statement."""
        cached: Sequence[tuple[str, Callable[[Any], Any]]] | None = _PROCESSORS.get(self.name)
        if cached is None:
            found = []
            for column in self.columns:
                process = column.type.dialect_impl(dialect).result_processor(dialect, None)
                if process is not None:
                    found.append((column.name, process))
            cached = _PROCESSORS[self.name] = tuple(found)
        return cached


def _in_transaction(conn: Connection) -> bool:
    """Whether a statement sent on the driver's cursor is where SQLAlchemy thinks it is: on an
    autocommit connection (`StoreBase.autocommit`), or inside a transaction SQLAlchemy began.
    Otherwise SQLAlchemy runs it, so that its autobegin happens."""
    return bool(getattr(conn.connection.dbapi_connection, "autocommit", False)) or (
        conn.in_transaction()
    )


def from_text(
    name: str,
    sql: str,
    types: dict[str, str],
    columns: tuple[Column[Any], ...] = (),
    *,
    clause: Executable | None = None,
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
    made = _BY_NAME[name] = Prepared(
        name, body, tuple((b, types[b]) for b in order), columns, source=sql, clause=clause
    )
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
    plain = stmt if isinstance(stmt, Executable) else None
    return from_text(name, sql, types, columns, clause=plain)
