"""Database administration for tools (benchmarks, the chaos run): create, claim, reset, seed.

Nothing here empties a database it did not make. A benchmark's database is created by
`claim_database` and marked (`COMMENT ON DATABASE ... IS 'agent_jobs bench'`); `truncate` (and
so `prepare`) refuses any other database unless the person running the tool named it with
`--wipe DATABASE` (`allow_wipe`). Pointing a benchmark at a deployment's
AGENT_JOBS_DATABASE_URL is then a one-line refusal, with nothing touched.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import text
from sqlalchemy.engine import make_url

from agent_jobs.core.errors import ConfigError
from agent_jobs.store.engine import make_engine, normalize_pg_url, shown_url
from agent_jobs.store.migrate import upgrade
from agent_jobs.store.schema import metadata
from agent_jobs.store.store import Store

# The comment a benchmark's database carries from its creation: the mark that lets a tool empty it.
BENCH_MARK = "agent_jobs bench"

# The databases named with `--wipe` in this process: a tool may empty these though unmarked.
_wipe_allowed: frozenset[str] = frozenset()


class WipeRefused(ConfigError):
    """A tool was about to empty a database it did not create and nobody named with `--wipe`."""


def allow_wipe(names: Iterable[str]) -> None:
    """Let this process empty the databases `names` (the `--wipe DATABASE` options), marked or
    not. Replaces any earlier list; an empty one allows none."""
    global _wipe_allowed
    _wipe_allowed = frozenset(n for n in names if n)


def database_name(url: str) -> str:
    """The database a URL names (`postgresql://h/db` -> `db`; SQLite: the file's path)."""
    if url.startswith("sqlite"):
        return make_url(url).database or ":memory:"
    return str(make_url(normalize_pg_url(url)).database or "")


def ensure_database(url: str) -> bool:
    """Create the Postgres database named in `url` if it does not exist, marked as a benchmark's
    (SQLite: nothing). Whether it was created now."""
    if not url.startswith(("postgres", "postgresql")):
        return False
    parsed = make_url(normalize_pg_url(url))
    name = parsed.database
    admin = make_engine(parsed.set(database="postgres").render_as_string(hide_password=False))
    try:
        with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            exists = conn.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}
            ).first()
            if exists is not None:
                return False
            quoted = conn.dialect.identifier_preparer.quote(str(name))
            conn.exec_driver_sql(f"CREATE DATABASE {quoted}")
            # Marked at once, by the process that created it: a crash between the two leaves an
            # unmarked database, which is refused (the safe side), never one marked by mistake.
            conn.exec_driver_sql(f"COMMENT ON DATABASE {quoted} IS '{BENCH_MARK}'")
            return True
    finally:
        admin.dispose()


def is_marked(url: str) -> bool:
    """Whether the Postgres database `url` names carries the benchmark mark."""
    parsed = make_url(normalize_pg_url(url))
    admin = make_engine(parsed.set(database="postgres").render_as_string(hide_password=False))
    try:
        with admin.connect() as conn:
            comment = conn.execute(
                text(
                    "SELECT shobj_description(oid, 'pg_database') FROM pg_database "
                    "WHERE datname = :n"
                ),
                {"n": parsed.database},
            ).scalar()
    finally:
        admin.dispose()
    return comment == BENCH_MARK


def check_disposable(url: str) -> None:
    """Raise `WipeRefused` unless the database `url` names may be emptied: marked as a
    benchmark's, or named with `--wipe`. SQLite files: only when named with `--wipe`."""
    name = database_name(url)
    if name in _wipe_allowed:
        return
    if url.startswith(("postgres", "postgresql")) and is_marked(url):
        return
    raise WipeRefused(
        f"refusing to empty the database {name!r} ({shown_url(url)}): it was not created by an "
        f"agent_jobs benchmark; name it with --wipe {name} to empty it, or point "
        "AGENT_JOBS_DATABASE_URL at a database that does not exist yet (the benchmark creates "
        "and marks it)"
    )


def claim_database(url: str) -> None:
    """Create and mark the database `url` names if it does not exist; otherwise refuse unless it
    may be emptied (`check_disposable`). Every benchmark calls this before anything else."""
    if not ensure_database(url):
        check_disposable(url)


def prepare(url: str) -> Store:
    """Create (if needed, marked) and migrate the database, and empty every table; refused on a
    database that is neither marked nor named with `--wipe`."""
    claim_database(url)
    store = Store.from_url(url)
    try:
        upgrade(store.engine)
        truncate(store)
    except BaseException:
        store.dispose()
        raise
    return store


def truncate(store: Store) -> None:
    """Empty every table, after `check_disposable`."""
    check_disposable(store.engine.url.render_as_string(hide_password=False))
    with store.engine.begin() as conn:
        store.backend.truncate(conn, metadata.sorted_tables)


def analyze(store: Store) -> None:
    """Refresh the planner's statistics (Postgres: VACUUM ANALYZE of the tasks)."""
    store.backend.analyze(store.engine)
