"""Engines for Postgres (production) and SQLite (embedded), with the settings each needs.

Every wait on Postgres is bounded (`AGENT_JOBS_DB_*_TIMEOUT_S`): opening a connection, waiting
for one from the pool, a statement's run and its wait for a lock; a connection whose peer
vanished is found by TCP keepalives. And no error carries a row's values: parameters are hidden
and a driver's message is cut to its value-free first line (`redact_driver_error`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from agent_jobs.core.errors import ConfigError
from agent_jobs.core.text import clean_text, to_json

if TYPE_CHECKING:
    from sqlalchemy.engine import ExceptionContext

    from agent_jobs.config import Settings


def clean_params(params: Any) -> Any:
    """The content rule (core.text) for text columns: NUL and lone surrogates in a string
    parameter become U+FFFD, so no value from outside can make the database refuse a write.
    JSON columns are cleaned by the engine's serializer (`to_json`)."""
    if isinstance(params, dict):
        out = None
        for k, v in params.items():
            if isinstance(v, str):
                c = clean_text(v)
                if c is not v:
                    out = out if out is not None else dict(params)
                    out[k] = c
        return params if out is None else out
    if isinstance(params, (list, tuple)):
        items = [clean_params(p) if isinstance(p, (dict, list, tuple)) else p for p in params]
        items = [clean_text(p) if isinstance(p, str) else p for p in items]
        return type(params)(items) if isinstance(params, tuple) else items
    return params


def _content_rule(*args: Any) -> tuple[str, Any]:
    # (conn, cursor, statement, parameters, context, executemany)
    return args[2], clean_params(args[3])


def is_content_rule(listener: Any) -> bool:
    """Whether a `before_cursor_execute` listener is the content rule's (`store.prepared`
    applies the rule itself when it runs a statement on the driver's cursor)."""
    return listener is _content_rule


def _install_content_rule(engine: Engine) -> None:
    event.listen(engine, "before_cursor_execute", _content_rule, retval=True)


def make_engine(url: str, *, pool_size: int = 5, cfg: Settings | None = None) -> Engine:
    """Create an engine for `url`, its waits bounded by `cfg` (default: the process's settings).
    SQLite gets WAL and a busy timeout so the embedded worker's threads and a CLI in another
    process can share one file."""
    if url.startswith("sqlite"):
        engine = _sqlite_engine(url)
        _install_content_rule(engine)
        _install_redaction(engine)
        return engine
    if url.startswith(("postgresql", "postgres")):
        if cfg is None:
            from agent_jobs.config import settings  # noqa: PLC0415 - config reads the environment

            cfg = settings()
        url = normalize_pg_url(url)
        engine = create_engine(
            url,
            pool_size=pool_size,
            max_overflow=10,
            # No pre-ping: it would add a round trip to every transaction of the hot path. A
            # connection that died is discarded on its first error (and with it every pooled
            # connection older than the error: SQLAlchemy invalidates the pool on a
            # disconnect); a connection whose peer vanished without a word is found by the
            # keepalives below, within seconds, instead of hanging its caller.
            pool_pre_ping=False,
            pool_recycle=1800,
            pool_timeout=cfg.db_pool_timeout_s,
            # Errors and logs never show a statement's values (task state, approval arguments).
            hide_parameters=True,
            connect_args=pg_connect_args(cfg),
            json_serializer=to_json,
        )
        _install_content_rule(engine)
        _install_redaction(engine)
        return engine
    raise ConfigError(
        f"unsupported database URL {url.split(':', 1)[0]!r}: use postgresql or sqlite"
    )


def pg_connect_args(cfg: Settings) -> dict[str, Any]:
    """libpq's connection parameters for the bounds in `cfg`. The statement and lock timeouts
    are the session's defaults, set at connection start (`options`), so they cost no round trip;
    `lifted_timeouts` lifts them for a migration or a benchmark's seeding."""
    options = [
        f"-c {name}={max(1, round(seconds * 1000))}"
        for name, seconds in (
            ("statement_timeout", cfg.db_statement_timeout_s),
            ("lock_timeout", cfg.db_lock_timeout_s),
        )
        if seconds > 0
    ]
    idle = max(1, cfg.db_connect_timeout_s)
    # Both at 0, no `options` at all: some poolers refuse the startup parameter (PgBouncer
    # unless `ignore_startup_parameters = options`); the server's own defaults apply.
    extra = {"options": " ".join(options)} if options else {}
    return {
        "application_name": f"agent_jobs:{os.getpid()}",
        "connect_timeout": cfg.db_connect_timeout_s,
        **extra,
        # A peer that vanished (a partition, a host that died) answers no keepalive: the
        # connection fails after about idle + 3 x interval seconds instead of hanging a caller
        # until the kernel gives up (minutes). tcp_user_timeout covers data sent and never
        # acknowledged, where keepalives do not run.
        "keepalives": 1,
        "keepalives_idle": idle,
        "keepalives_interval": max(1, idle // 3),
        "keepalives_count": 3,
        "tcp_user_timeout": 2 * idle * 1000,
    }


@contextmanager
def lifted_timeouts(conn: Connection) -> Iterator[Connection]:
    """`conn` without the statement and lock timeouts, for work that is long by design (a
    migration building an index, a benchmark seeding millions of rows, VACUUM); put back after.
    Nothing on SQLite.

    Inside a transaction the change is the transaction's (a rollback undoes it); outside one it
    is committed at once, so that whoever runs on `conn` next (Alembic) finds no transaction of
    ours open. A connection left without its bounds by an error is discarded, never pooled."""
    if conn.dialect.name != "postgresql":
        yield conn
        return
    own = _set_timeouts(conn, "SET statement_timeout = 0", "SET lock_timeout = 0")
    ok = False
    try:
        yield conn
        ok = True
    finally:
        if conn.invalidated:
            pass
        elif ok:
            # RESET: back to the session's defaults, the bounds set at connection start.
            _set_timeouts(conn, "RESET statement_timeout", "RESET lock_timeout")
        elif own:
            conn.invalidate()  # committed without bounds, and failed: not for the pool
        # else: the enclosing transaction's rollback undoes the SET


def _set_timeouts(conn: Connection, *statements: str) -> bool:
    """Run `statements`; commit them when no transaction was open. Whether it committed."""
    own = not conn.in_transaction()
    for statement in statements:
        conn.exec_driver_sql(statement)
    if own:
        conn.commit()
    return own


# SQLSTATE classes whose first line quotes a value: 22 (data exceptions: `invalid input syntax
# for type integer: "..."`) and P0 (a PL/pgSQL RAISE's own text). Their errors keep only the
# condition's name.
_QUOTING_CLASSES = ("22", "P0")


def redact_driver_error(orig: BaseException) -> str:
    """The driver's error message without a row's values: its first line only (the DETAIL,
    CONTEXT and LINE lines that follow quote the row or the statement with its values), and for
    the SQLSTATE classes that quote a value in the first line, the condition's name and code."""
    code = getattr(orig, "pgcode", None)
    if isinstance(code, str) and code.startswith(_QUOTING_CLASSES):
        words = re.sub(r"(?<!^)(?=[A-Z])", " ", type(orig).__name__).lower()
        return f"{words} ({code})"
    text = str(orig.args[0]) if orig.args else ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(orig).__name__


def _redact(context: ExceptionContext) -> None:
    # The documented seam for rewriting a failure: the driver's exception and SQLAlchemy's
    # wrapper get the redacted text, so every log line, `last_error` and answer built from
    # either (str, repr, a traceback) shows no value.
    orig = context.original_exception
    if not isinstance(orig, Exception):
        return
    clean = redact_driver_error(orig)
    orig.args = (clean,)
    wrapped = context.sqlalchemy_exception
    if isinstance(wrapped, DBAPIError):
        wrapped.args = (f"({type(orig).__module__}.{type(orig).__name__}) {clean}",)


def _install_redaction(engine: Engine) -> None:
    event.listen(engine, "handle_error", _redact)


def database_error_line(exc: BaseException) -> str:
    """One line for a person about a database error: the redacted driver message (`connection
    refused`), or the error's class and first line; never a statement, a parameter or a row."""
    orig = getattr(exc, "orig", None)
    if isinstance(orig, BaseException):
        return redact_driver_error(orig)
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if isinstance(exc, DBAPIError) or not first:
        return type(exc).__name__
    return first


def shown_url(url: str) -> str:
    """`url` as a person typed it, with the password hidden (`postgresql://u:***@h/db`)."""
    try:
        parsed = make_url(url)
        # libpq also takes the password as a query parameter (`?password=...`).
        hidden = {k: "***" for k in parsed.query if k.lower() in ("password", "passwd")}
        if hidden:
            parsed = parsed.update_query_dict(hidden)
        return parsed.render_as_string(hide_password=True).replace("%2A%2A%2A", "***")
    except Exception:  # not a URL SQLAlchemy can parse: its scheme at most
        return url.split("://", 1)[0] + "://..." if "://" in url else "(not a URL)"


def normalize_pg_url(url: str) -> str:
    """`postgres://` and bare `postgresql://` mean psycopg2 here (SQLAlchemy 2.1 would pick
    psycopg 3, which we do not ship)."""
    scheme, _, rest = url.partition("://")
    if scheme in ("postgres", "postgresql"):
        return f"postgresql+psycopg2://{rest}"
    return url


def _sqlite_engine(url: str) -> Engine:
    memory = url in ("sqlite://", "sqlite:///:memory:")
    kwargs: dict[str, Any] = {
        "connect_args": {"check_same_thread": False, "timeout": 30},
        "json_serializer": to_json,
        "hide_parameters": True,
    }
    if not memory:
        # A pool of file connections would hold write locks across checkouts; a fresh connection
        # per use is cheap for SQLite and keeps every transaction short.
        kwargs["poolclass"] = NullPool
    engine = create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # pysqlite's own transaction handling defers BEGIN; take control so that writes start
        # with BEGIN IMMEDIATE and two writers never deadlock upgrading a read lock.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        if not memory:
            cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine
