"""The deterministic simulator on Postgres (`agent-jobs simulate --database postgres`): databases
of its own on a server it is given, and the seams the SQLite mode has (`store.seams`) made for
Postgres: the database's clock, and how many transactions are open.

Its databases are named `aj_sim_<pid>_<random>` and only those this process created are ever
dropped. A run migrates one template (`create_template`); each process copies it once into a
database of its own (`SimulatedPostgres`), which is emptied between schedules with one
`TRUNCATE ... RESTART IDENTITY` of the tables it wrote: measured on this machine, idle, at
about 25 ms for all 18 tables, against 30-45 ms to create and drop a database from the template
(`STRATEGY WAL_LOG`; `FILE_COPY` checkpoints, about 80 ms); under load the TRUNCATE of the two
to six tables a schedule writes took half the time of all 18. A truncated table gets a new,
empty file, as a fresh database would, so a schedule finds the same physical state (the order
of rows a scan returns, and so of ties under an ORDER BY) whatever ran before it. DELETE would
not: the dead rows' space, and when it is reused, would carry over.

The clock. The Postgres backend says the time as `now()`, in SQL text and in the statements
it prepares, and `now()` is a function, not a keyword: so the simulator's connections put a
schema `aj_sim` before `pg_catalog` on their search path (`pg_catalog` searched first only
when it is not named), and `aj_sim.now()` reads the setting `aj_sim.now`. Every statement is
sent with `SELECT set_config('aj_sim.now', <the virtual clock>, false);` in front of it, in the
same round trip. Set per statement, not per checkout or per transaction: the step's
autocommit connection stays checked out while the world moves the clock between its
statements, and a setting made inside a transaction that rolls back reverts. The world moves
the clock only where no transaction is open (after a store call, inside a business system's
call), so within a transaction every statement reads one time, as Postgres's `now()` (the
transaction's start) would. No product code changes: the runtime's SQL is what production runs.
"""

from __future__ import annotations

import importlib
import os
import re
import secrets
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from agent_jobs.core.text import to_json
from agent_jobs.store.engine import install_rules, make_engine, normalize_pg_url
from agent_jobs.store.migrate import upgrade

# psycopg2 ships no type stubs: its classes are looked up, not imported for the type checker.
_pg: Any = importlib.import_module("psycopg2")
_pg_extensions: Any = importlib.import_module("psycopg2.extensions")

PREFIX = "aj_sim_"
CLOCK_SCHEMA = "aj_sim"
CLOCK_SETTING = "aj_sim.now"
# `now()` is the only clock function the store's SQL uses (`db_now`, `db_now_plus` and the
# Postgres backend's SQL text compile to it); STABLE, as Postgres's own is, so one statement
# reads one time. A setting never made fails the statement: a connection that bypassed the
# simulator's clock is an error, not the machine's time.
_CLOCK_SQL = f"""
CREATE SCHEMA {CLOCK_SCHEMA};
CREATE FUNCTION {CLOCK_SCHEMA}.now() RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE
  AS $$ SELECT current_setting('{CLOCK_SETTING}')::timestamptz $$;
"""
# One process's one thread runs every simulated worker: a row lock waited for can only be held
# by a transaction the schedule suspended, so the wait would never end. Fail it at once, as the
# SQLite mode does (busy_timeout 0); the runtime meets it as the lock timeout it is.
# No commit waits for its WAL to reach the disk (`synchronous_commit=off`): the simulator
# fails the worker, never the server, and a schedule commits hundreds of times.
_FAST = "-c synchronous_commit=off"
_OPTIONS = (
    f"-c search_path={CLOCK_SCHEMA},pg_catalog,public -c lock_timeout=50 "
    f"-c statement_timeout=30000 -c idle_in_transaction_session_timeout=0 {_FAST}"
)
# Transaction control reads no clock, and must run where the prefix cannot: `ROLLBACK TO
# SAVEPOINT` in a transaction a failed statement aborted (which refuses any other statement).
_CONTROL = re.compile(r"\s*(ROLLBACK|SAVEPOINT|RELEASE|COMMIT|BEGIN|END)\b", re.I)
_created: set[str] = set()  # the databases this process created: the only ones it drops


def _admin(server_url: str) -> Engine:
    return create_engine(
        normalize_pg_url(server_url), poolclass=NullPool, isolation_level="AUTOCOMMIT"
    )


def _url(server_url: str, database: str) -> str:
    url = make_url(normalize_pg_url(server_url)).set(database=database)
    return url.render_as_string(hide_password=False)


def _new_name(suffix: str) -> str:
    return f"{PREFIX}{os.getpid()}_{secrets.token_hex(4)}_{suffix}"


def _create(server_url: str, name: str, template: str | None = None) -> None:
    source = f' TEMPLATE "{template}" STRATEGY WAL_LOG' if template else ""
    admin = _admin(server_url)
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"{source}')
        _created.add(name)
    finally:
        admin.dispose()


def drop_database(server_url: str, name: str) -> None:
    """Drop `name`, a database this process created (anything else is refused)."""
    if name not in _created or not name.startswith(PREFIX):
        raise ValueError(f"not a database this simulator created: {name!r}")
    admin = _admin(server_url)
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        _created.discard(name)
    finally:
        admin.dispose()


def create_template(server_url: str) -> str:
    """A database migrated to head with the clock schema installed, for `SimulatedPostgres`
    to copy; its name. The caller drops it (`drop_database`)."""
    name = _new_name("tpl")
    _create(server_url, name)
    try:
        engine = make_engine(_url(server_url, name))
        try:
            upgrade(engine)
            with engine.begin() as conn:
                conn.exec_driver_sql(_CLOCK_SQL)
                # Autovacuum and autoanalyze off: either would move rows or change a plan (and so
                # the order of rows a query without ORDER BY returns) at a moment of its own. Off
                # for each TOAST table too: a vacuum that truncates one takes its exclusive lock
                # for a moment, and a statement waiting on it past the 50 ms lock timeout would
                # fail for the machine's load, not for the seed.
                for (table,) in conn.execute(text(_TABLES)).all():
                    conn.exec_driver_sql(
                        f'ALTER TABLE "{table}" SET '
                        "(autovacuum_enabled = false, toast.autovacuum_enabled = false)"
                    )
        finally:
            engine.dispose()
    except BaseException:
        drop_database(server_url, name)
        raise
    return name


_TABLES = "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
# The tables a schedule wrote: a heap of any size (a row rolled back leaves one too). A table
# never written has none, as in the template.
_WRITTEN = """
SELECT quote_ident(relname) FROM pg_class
 WHERE relnamespace = 'public'::regnamespace AND relkind = 'r' AND relname <> 'alembic_version'
   AND pg_relation_size(oid) > 0
 ORDER BY relname"""
_SEQUENCES = """
SELECT quote_ident(schemaname) || '.' || quote_ident(sequencename), start_value FROM pg_sequences
 WHERE schemaname = 'public' ORDER BY 1"""


# Rows in an order SQL leaves open: what an UPDATE or DELETE ... RETURNING gives, and a SELECT
# with no ORDER BY. Postgres gives them in the order it met them on disk, and that order is
# not the seed's: whether an update's new row version fits its old page depends on pruning,
# and what pruning may remove depends on the oldest snapshot on the whole server (other
# sessions' transactions, in other databases). Measured: seed 193 of `--scenario all` swapped
# the two tasks a retry sweep woke (and so the order of their steps) in 3 of 6 runs. The
# simulator takes these rows in one order Postgres could have given, sorted; a runtime right
# under any order is right under this one. A SELECT whose ORDER BY has ties among the rows
# it returns keeps the disk's order for them (the statement is not parsed).
_UNORDERED = re.compile(
    r"\s*(UPDATE|DELETE)\b.*\bRETURNING\b|\s*SELECT\b(?!.*\bORDER\s+BY\b)", re.I | re.S
)
_CLOCK_PREFIX = re.compile(r"\s*SELECT set_config\('aj_sim\.now', '[^']*', false\); ")


def _sort_key(row: tuple[Any, ...]) -> tuple[tuple[bool, str], ...]:
    return tuple((value is None, repr(value)) for value in row)


class _SortedCursor(_pg_extensions.cursor):  # type: ignore[misc]
    """A psycopg2 cursor that hands out the rows of an unordered result sorted (`_UNORDERED`)."""

    _sorted: list[tuple[Any, ...]] | None = None

    def execute(self, query: Any, vars: Any = None) -> None:
        self._sorted = None
        super().execute(query, vars)
        text_ = query.decode() if isinstance(query, bytes) else str(query)
        statement = _CLOCK_PREFIX.sub("", text_, count=1)
        if self.description is not None and self.rowcount > 1 and _UNORDERED.match(statement):
            self._sorted = sorted(super().fetchall(), key=_sort_key)

    def fetchone(self) -> Any:
        if self._sorted is None:
            return super().fetchone()
        return self._sorted.pop(0) if self._sorted else None

    def fetchmany(self, size: int | None = None) -> Any:
        if self._sorted is None:
            return super().fetchmany(size) if size is not None else super().fetchmany()
        n = self.arraysize if size is None else size
        out, self._sorted = self._sorted[:n], self._sorted[n:]
        return out

    def fetchall(self) -> Any:
        if self._sorted is None:
            return super().fetchall()
        out, self._sorted = self._sorted, []
        return out

    def __iter__(self) -> Any:
        if self._sorted is None:
            return super().__iter__()
        return iter(self.fetchall())


def in_transaction(dbapi_conn: Any) -> bool:
    """Whether a psycopg2 connection has a transaction open (idle is status 0). A closed one
    raises, and `OpenTransactions` forgets it."""
    if dbapi_conn.closed:
        raise ConnectionError("closed")
    return bool(dbapi_conn.info.transaction_status)


class SimulatedPostgres:
    """One process's database, copied from a template: `engine` (pooled for one thread), emptied
    by `empty`, dropped by `close`."""

    def __init__(self, server_url: str, template: str) -> None:
        self._server = server_url
        self.name = _new_name("run")
        _create(server_url, self.name, template)
        url = _url(server_url, self.name)
        try:
            self.engine = create_engine(
                url,
                pool_size=4,  # a schedule holds two at most (a step and what interleaves)
                max_overflow=20,
                pool_timeout=1,  # one thread: a connection waited for never comes back
                hide_parameters=True,
                json_serializer=to_json,
                connect_args={
                    "options": _OPTIONS,
                    "application_name": "agent_jobs:simulate",
                    "cursor_factory": _SortedCursor,
                },
            )
            install_rules(self.engine)
            self.failures: list[str] = []
            event.listen(self.engine, "handle_error", self._server_failed)
            # Its own connection, kept: TRUNCATE between schedules (with the plain search path).
            self._maintenance = create_engine(
                url, pool_size=1, isolation_level="AUTOCOMMIT", connect_args={"options": _FAST}
            )
            with self._maintenance.connect() as conn:
                starts = conn.execute(text(_SEQUENCES)).all()
            # Every sequence back to its start, each time: one can move with its table empty
            # (a `nextval` for a row a constraint then refused).
            self._restart = "; ".join(
                f"SELECT setval('{seq}', {start}, false)" for seq, start in starts
            )
        except BaseException:
            drop_database(server_url, self.name)
            raise

    def _server_failed(self, ctx: Any) -> None:
        """Record a connection the server refused or lost for real (no SQLSTATE: not an
        answer to a statement). The runtime takes it for an outage and carries on, so the
        schedule would go where the machine's load sent it, not where its seed did."""
        orig = ctx.original_exception
        if isinstance(orig, _pg.Error) and getattr(orig, "pgcode", None) is None:
            self.failures.append(str(orig).strip().splitlines()[0] if str(orig) else repr(orig))

    def use_clock(self, now: Callable[[], datetime]) -> None:
        """Every statement of `engine` reads `now()` (an aware datetime) as SQL's `now()`."""

        def _stamp(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> Any:
            if _CONTROL.match(statement):
                return statement, params
            # isoformat: digits, '-', ':', '+', '.', 'T' only, so no quote and no '%' (the
            # driver's parameter marker) can appear in the text put in front.
            at = now().isoformat()
            return f"SELECT set_config('{CLOCK_SETTING}', '{at}', false); {statement}", params

        event.listen(self.engine, "before_cursor_execute", _stamp, retval=True)

    def empty(self) -> None:
        """Every table as the migration left it (empty), every sequence restarted, and no
        connection of the last schedule left (each prepared its statements afresh). Only the
        tables written are truncated: a TRUNCATE's commit waits for the disk whatever
        `synchronous_commit` says (it drops files), and its time grows with the tables."""
        self.engine.dispose()
        self.failures.clear()
        with self._maintenance.connect() as conn:
            written = [name for (name,) in conn.execute(text(_WRITTEN))]
            truncate = (
                f"TRUNCATE {', '.join(written)} RESTART IDENTITY CASCADE; " if written else ""
            )
            if truncate or self._restart:
                conn.exec_driver_sql(truncate + self._restart)

    def close(self) -> None:
        self.engine.dispose()
        self._maintenance.dispose()
        drop_database(self._server, self.name)
