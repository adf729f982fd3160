"""Database administration for tools (benchmarks, the chaos run): create, reset, seed."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import make_url

from agent_jobs.store.engine import make_engine, normalize_pg_url
from agent_jobs.store.migrate import upgrade
from agent_jobs.store.schema import metadata
from agent_jobs.store.store import Store


def ensure_database(url: str) -> None:
    """Create the Postgres database named in `url` if it does not exist (SQLite: nothing)."""
    if not url.startswith(("postgres", "postgresql")):
        return
    parsed = make_url(normalize_pg_url(url))
    name = parsed.database
    admin = make_engine(parsed.set(database="postgres").render_as_string(hide_password=False))
    try:
        with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            exists = conn.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}
            ).first()
            if exists is None:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    finally:
        admin.dispose()


def prepare(url: str) -> Store:
    """Create (if needed) and migrate the database, and empty every table."""
    ensure_database(url)
    store = Store.from_url(url)
    upgrade(store.engine)
    truncate(store)
    return store


def truncate(store: Store) -> None:
    with store.engine.begin() as conn:
        if store.dialect == "postgresql":
            names = ", ".join(t.name for t in metadata.sorted_tables)
            conn.exec_driver_sql(f"TRUNCATE {names} CASCADE")
        else:
            for table in reversed(metadata.sorted_tables):
                conn.execute(table.delete())


def analyze(store: Store) -> None:
    if store.dialect == "postgresql":
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.exec_driver_sql("VACUUM ANALYZE tasks")
    else:
        with store.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")
