"""Where schedules keep their data: a SQLite file (the default) or a Postgres database of the
simulator's own (`--database postgres`, for the paths only Postgres runs: the one-statement
compare-and-set with what rides in it, autocommit steps, prepared statements, SKIP LOCKED).

Either way each schedule starts from a migrated, empty database (a migration per schedule would
cost more than the schedule), reads the clock of the world running now, and leaves nothing for
the next schedule but the empty database.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Protocol

from agent_jobs.simulation.clock import VirtualClock
from agent_jobs.store import Store
from agent_jobs.store.engine import make_engine
from agent_jobs.store.migrate import upgrade
from agent_jobs.store.seams import (
    OpenTransactions,
    SimulatedPostgres,
    create_template,
    drop_database,
    postgres_in_transaction,
    simulated_sqlite,
    use_clock,
)

KINDS = ("sqlite", "postgres")
SERVER_KINDS = ("postgres",)  # the kinds that run on a server named by a URL
_SERVER_SCHEMES = ("postgres://", "postgresql://", "postgresql+psycopg2://")


@dataclass(frozen=True)
class Database:
    """Which database the schedules run on: `kind` one of `KINDS`; for Postgres, `url` names
    a server (any database on it: the simulator creates its own there, `aj_sim_*`) and
    `template` the migrated database a run made once for its processes to copy."""

    kind: str = "sqlite"
    url: str | None = None
    template: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"database: one of {', '.join(KINDS)}")
        if self.kind not in SERVER_KINDS:
            if self.url is not None:
                raise ValueError(f"{self.kind} takes no server URL")
        elif not (self.url or "").startswith(_SERVER_SCHEMES):
            raise ValueError(
                f"{self.kind} needs a server's URL, postgresql://user@host/db (the simulator "
                "creates and drops databases of its own there, aj_sim_*)"
            )


SQLITE = Database()


class ScheduleDatabases(Protocol):
    """What a schedule needs of its database: a fresh store, the clock it reads, and how many
    transactions are open on it (`world.World` interleaves work only where none is)."""

    clock: VirtualClock
    transactions: OpenTransactions

    # Whether the runtime's steps may commit statement by statement here (Postgres's autocommit
    # steps): then `example@1` runs its I/O-free steps quick, the path that takes them, and a
    # worker may die right after any commit (`run`, `World`).
    autocommit_steps: bool

    def fresh(self) -> AbstractContextManager[Store]: ...

    def machine_failure(self) -> str | None:
        """What failed under the last schedule that was not drawn from its seed (a server
        refusing connections), if anything: such a schedule proves nothing either way."""
        ...

    def close(self) -> None: ...


class Databases:
    """One SQLite engine for every schedule of a process, on a file that a migrated template is
    copied over before each schedule: the engine's compiled statements outlive the schedules,
    the data does not. Its clock is whichever world runs now."""

    autocommit_steps = False

    def __init__(self) -> None:
        # In memory where the machine has a tmpfs: a schedule commits hundreds of times.
        shm = Path("/dev/shm")
        self._dir = Path(tempfile.mkdtemp(prefix="aj-sim-", dir=shm if shm.is_dir() else None))
        self.template = self._dir / "template.db"
        self.path = self._dir / "schedule.db"
        built = self._dir / "built.db"
        engine = make_engine(f"sqlite:///{built}")
        upgrade(engine)
        engine.dispose()
        with sqlite3.connect(built) as db:
            db.execute(f"VACUUM INTO '{self.template}'")
        built.unlink()
        self.clock = VirtualClock()
        self.engine = simulated_sqlite(f"sqlite:///{self.path}")
        use_clock(self.engine, self._now)
        self.transactions = OpenTransactions(self.engine)

    def _now(self) -> datetime:
        return self.clock.now()  # the clock of the world running now

    @contextmanager
    def fresh(self) -> Iterator[Store]:
        self.engine.dispose()
        for suffix in ("-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        shutil.copyfile(self.template, self.path)
        # Held open for the schedule: the last connection to close a WAL database checkpoints
        # it and deletes the log, and the runtime's connections come and go by the hundred.
        hold = sqlite3.connect(self.path)
        hold.execute("PRAGMA journal_mode=WAL")
        try:
            yield Store(self.engine)
        finally:
            self.engine.dispose()
            hold.close()

    def machine_failure(self) -> str | None:
        return None  # a file on this machine: nothing between it and the schedule

    def close(self) -> None:
        self.engine.dispose()
        shutil.rmtree(self._dir, ignore_errors=True)


class PostgresDatabases:
    """A Postgres database of this process's own, copied from the run's template (or from one
    it makes and drops itself), emptied before each schedule: every schedule starts with no
    connection and no row, as the first one did, so a seed replays the same alone or in a run.

    Here `example@1` declares its I/O-free steps quick (on Postgres a quick step is one round
    trip, the path deployments take), and a worker may die right after any commit (between the
    statements of an autocommit step): the two modes between them cover both ways to a payout,
    and the SQLite seeds keep the schedules their figures were measured on."""

    autocommit_steps = True

    def __init__(self, database: Database) -> None:
        assert database.url is not None
        self._url = database.url
        self._own_template = database.template is None
        template = database.template or create_template(database.url)
        self._template = template
        try:
            self._db = SimulatedPostgres(database.url, template)
        except BaseException:
            self._drop_template()
            raise
        self.clock = VirtualClock()
        self._db.use_clock(self._now)
        self.engine = self._db.engine
        self.transactions = OpenTransactions(self.engine, postgres_in_transaction)

    def _now(self) -> datetime:
        return self.clock.now()

    @contextmanager
    def fresh(self) -> Iterator[Store]:
        self._db.empty()
        try:
            yield Store(self.engine)
        finally:
            self.engine.dispose()

    def machine_failure(self) -> str | None:
        failures = self._db.failures
        return f"the Postgres server failed: {failures[0]}" if failures else None

    def close(self) -> None:
        try:
            self._db.close()
        finally:
            self._drop_template()

    def _drop_template(self) -> None:
        if self._own_template:
            drop_database(self._url, self._template)


def open_databases(database: Database = SQLITE) -> ScheduleDatabases:
    """The databases for one process's schedules; the caller closes them."""
    if database.url is not None:  # a server's: Postgres
        return PostgresDatabases(database)
    return Databases()


@contextmanager
def for_run(database: Database) -> Iterator[Database]:
    """`database` with its template made once for a whole run (a Postgres migration costs
    seconds; a copy, milliseconds), dropped when the run ends, however it ends."""
    if database.url is None or database.template is not None:
        yield database
        return
    template = create_template(database.url)
    try:
        yield replace(database, template=template)
    finally:
        drop_database(database.url, template)
