"""What a command says when the database is not there or not migrated.

A newcomer's first command on a fresh database (`agent-jobs status`, `submit`, `sweep`) met a
driver error (`relation "tasks" does not exist`, `no such table: tasks`, `connection refused`)
with no word of which database or what to do. `database_problem` turns those into the line the
worker and beat already print at start: the database (password hidden) and `agent-jobs db
upgrade`. Reactive, not a check before every command: a migrated database pays nothing.
"""

from __future__ import annotations

import sys

# Postgres: undefined_table / undefined_column (a schema older than this code).
_MISSING_PG = ("42P01", "42703")
_MISSING_SQLITE = ("no such table", "no such column")


def database_problem(exc: BaseException, database_url: str) -> str | None:
    """One line when `exc` is the database missing, unreachable or not migrated; None for any
    other error. Needs SQLAlchemy only when it is already loaded (the command used it)."""
    if "sqlalchemy" not in sys.modules:
        return None
    from sqlalchemy.exc import DBAPIError, OperationalError  # noqa: PLC0415

    from agent_jobs.store.engine import database_error_line, shown_url  # noqa: PLC0415

    if not isinstance(exc, DBAPIError):
        return None
    where = shown_url(database_url)
    orig = exc.orig
    code = getattr(orig, "pgcode", None)
    text = str(orig).lower()
    if code in _MISSING_PG or any(s in text for s in _MISSING_SQLITE):
        return _schema_line(database_url, where)
    if not isinstance(exc, OperationalError) or code is not None or exc.connection_invalidated:
        return None  # a failed statement, or a connection lost mid-command: not "unreachable"
    if database_url.startswith("sqlite") and "unable to open" not in text:
        return None  # a locked or busy file is reached: its own message says more
    return f"cannot reach the database at {where} ({database_error_line(exc)})"


def _schema_line(database_url: str, where: str) -> str:
    """Where the schema is (the line a worker prints at start); a plain hint if even that fails."""
    from agent_jobs.store.engine import make_engine  # noqa: PLC0415
    from agent_jobs.store.migrate import schema_problem  # noqa: PLC0415

    fallback = (
        f"{where}: the database schema is missing or older than this code: "
        "run `agent-jobs db upgrade`"
    )
    try:
        engine = make_engine(database_url)
        try:
            return schema_problem(engine, where) or fallback
        finally:
            engine.dispose()
    except Exception:  # the hint must not hide the error it explains
        return fallback
