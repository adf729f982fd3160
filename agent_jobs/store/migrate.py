"""Apply the Alembic migrations in `db/` (shipped inside the wheel as `agent_jobs/_migrations`)."""

from __future__ import annotations

import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from agent_jobs.core.errors import ConfigError


def migrations_dir() -> Path:
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_migrations", package.parent / "db"):
        if (candidate / "env.py").is_file():
            return candidate
    raise ConfigError("the Alembic migrations (db/) are missing from this installation")


def _config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to `revision`; a no-op when it is there already."""
    command.upgrade(_config(engine), revision)


def downgrade(engine: Engine, revision: str) -> None:
    command.downgrade(_config(engine), revision)


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision(engine: Engine) -> str | None:
    return ScriptDirectory.from_config(_config(engine)).get_current_head()


def head_revisions() -> frozenset[str]:
    """The head revision(s) of the migrations shipped with this installation (no database)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    return frozenset(ScriptDirectory.from_config(cfg).get_heads())


def schema_lag(engine: Engine, heads: frozenset[str] | None = None) -> str | None:
    """None when the database is migrated to head; otherwise one line saying what it is at.

    One small query (`alembic_version`); pass `heads` (from `head_revisions()`, which reads the
    migration scripts) to keep a frequent caller, such as a readiness probe, off the disk."""
    wanted = head_revisions() if heads is None else heads
    with engine.connect() as conn:
        current = frozenset(MigrationContext.configure(conn).get_current_heads())
    if current == wanted:
        return None
    at = ", ".join(sorted(current)) or "no revision (never migrated)"
    head = ", ".join(sorted(wanted))
    return f"the database schema is at {at}, not at head {head}: run `agent-jobs db upgrade`"


def schema_problem(engine: Engine, where: str | None = None) -> str | None:
    """Why this database cannot serve this code yet (None: it can): not migrated, at another
    revision, or unreachable; one line naming it (password hidden). A worker and beat print it
    at start, a CLI command when a statement met a missing table: every step, sweep or command
    would otherwise fail with a driver traceback. `where`: the database as the line names it
    (default: the engine's URL, password hidden)."""
    where = where or engine.url.render_as_string(hide_password=True)
    # Alembic logs its plugins (on import) and its context at INFO: noise at every start.
    alembic_log = logging.getLogger("alembic")
    level = alembic_log.level
    alembic_log.setLevel(logging.WARNING)
    try:
        lag = schema_lag(engine)
    except SQLAlchemyError as exc:
        first = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        return f"cannot reach the database at {where} ({first[0] if first else type(exc).__name__})"
    finally:
        alembic_log.setLevel(level)
    return None if lag is None else f"{where}: {lag}"
