"""Apply the Alembic migrations in `db/` (shipped inside the wheel as `agent_jobs/_migrations`)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

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
