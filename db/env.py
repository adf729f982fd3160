"""Alembic environment: the engine comes from `agent_jobs.store.migrate` (or the URL in
AGENT_JOBS_DATABASE_URL when the `alembic` command is used directly)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Engine

from agent_jobs.config import load_settings
from agent_jobs.store import backend
from agent_jobs.store.engine import make_engine
from agent_jobs.store.schema import metadata

config = context.config
engine = config.attributes.get("engine")
if not isinstance(engine, Engine):
    engine = make_engine(load_settings().database_url)

# A migration may build an index over millions of rows: no statement or lock timeout for it.
with engine.connect() as connection, backend.of(engine).lifted_timeouts(connection):
    # SQLite cannot ALTER most things in place; batch mode rebuilds tables for it.
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
