"""The database backends: one `Backend` of named operations (`base`), implemented for Postgres
(`postgres`, its SQL by name in `postgres_sql`) and SQLite (`sqlite`). The only package that
knows which database it talks to."""

from __future__ import annotations

from sqlalchemy import Engine

from agent_jobs.core.errors import ConfigError
from agent_jobs.store.backend.base import Backend, CasWrite, Decision, NewTask
from agent_jobs.store.backend.postgres import PostgresBackend
from agent_jobs.store.backend.sqlite import SqliteBackend

_BACKENDS: dict[str, Backend] = {"postgresql": PostgresBackend(), "sqlite": SqliteBackend()}
_SCHEMES = {"postgres": "postgresql", "postgresql": "postgresql", "sqlite": "sqlite"}

__all__ = ["Backend", "CasWrite", "Decision", "NewTask", "for_url", "of"]


def for_url(url: str) -> Backend:
    """The backend a database URL names (`postgresql://`, `postgres://`, `sqlite://`, with or
    without a `+driver`)."""
    scheme = url.split(":", 1)[0].split("+", 1)[0].lower()
    name = _SCHEMES.get(scheme)
    if name is None:
        raise ConfigError(f"unsupported database URL {scheme!r}: use postgresql or sqlite")
    return _BACKENDS[name]


def of(engine: Engine) -> Backend:
    """The backend of an engine made by `store.engine.make_engine`."""
    return _BACKENDS[engine.dialect.name]
