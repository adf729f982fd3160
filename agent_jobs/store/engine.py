"""Engines for Postgres (production) and SQLite (embedded), with the settings each needs."""

from __future__ import annotations

import os
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.pool import NullPool

from agent_jobs.core.errors import ConfigError
from agent_jobs.core.text import clean_text, to_json


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


def make_engine(url: str, *, pool_size: int = 5) -> Engine:
    """Create an engine for `url`. SQLite gets WAL and a busy timeout so the embedded worker's
    threads and a CLI in another process can share one file."""
    if url.startswith("sqlite"):
        engine = _sqlite_engine(url)
        _install_content_rule(engine)
        return engine
    if url.startswith(("postgresql", "postgres")):
        url = normalize_pg_url(url)
        engine = create_engine(
            url,
            pool_size=pool_size,
            max_overflow=10,
            # No pre-ping: it would add a round trip to every transaction of the hot path. A
            # connection that died is discarded on its first error; the step is then retried.
            pool_pre_ping=False,
            pool_recycle=1800,
            # One statement per round trip; the hot path is a handful of short transactions.
            connect_args={"application_name": f"agent_jobs:{os.getpid()}"},
            json_serializer=to_json,
        )
        _install_content_rule(engine)
        return engine
    raise ConfigError(
        f"unsupported database URL {url.split(':', 1)[0]!r}: use postgresql or sqlite"
    )


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
