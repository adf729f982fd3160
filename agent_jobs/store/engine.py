"""What every engine gets (the content rule, error redaction) and how one is made for a URL
(by its backend: `store.backend.postgres`, `store.backend.sqlite`).

Every wait on Postgres is bounded (`AGENT_JOBS_DB_*_TIMEOUT_S`): opening a connection, waiting
for one from the pool, a statement's run and its wait for a lock; a connection whose peer
vanished is found by TCP keepalives. And no error carries a row's values: parameters are hidden
and a driver's message is cut to its value-free first line (`redact_driver_error`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from agent_jobs.core.text import clean_text

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
    """Whether a `before_cursor_execute` listener is the content rule's (`store.backend.prepared`
    applies the rule itself when it runs a statement on the driver's cursor)."""
    return listener is _content_rule


def _install_content_rule(engine: Engine) -> None:
    event.listen(engine, "before_cursor_execute", _content_rule, retval=True)


def install_rules(engine: Engine) -> None:
    """What every engine gets, whatever its database: the content rule and error redaction."""
    _install_content_rule(engine)
    _install_redaction(engine)


def make_engine(url: str, *, pool_size: int = 5, cfg: Settings | None = None) -> Engine:
    """An engine for `url`, made by the backend its scheme names (`store.backend`), its waits
    bounded by `cfg` (default: the process's settings)."""
    from agent_jobs.store import backend  # noqa: PLC0415 - the backends build on this module

    return backend.for_url(url).make_engine(url, pool_size=pool_size, cfg=cfg)


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
