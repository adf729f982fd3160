"""The simulator on Postgres (`agent-jobs simulate --database postgres`): the runtime's Postgres
paths (the one-statement compare-and-set with what rides in it, autocommit steps, prepared
statements) under the same faults and oracle. A seed replays exactly there too, the database
reads the simulated clock, schedules run clean, a mutant is caught, and the databases it made
are gone when it ends, however it ends.

Needs Postgres (skipped without it; failed under AGENT_JOBS_REQUIRE_SERVICES=1). The session's
test database (`pg_database`) names the server: the simulator makes its own databases beside it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from agent_jobs.cli import main
from agent_jobs.simulation import mutants
from agent_jobs.simulation.clock import START
from agent_jobs.simulation.databases import Database, PostgresDatabases, for_run
from agent_jobs.simulation.parallel import explore_parallel
from agent_jobs.simulation.run import explore, run_schedule
from agent_jobs.store.backend.simulated_postgres import create_template, drop_database
from agent_jobs.store.engine import normalize_pg_url

SCHEDULES = int(os.environ.get("AGENT_JOBS_TEST_SIM_PG_SCHEDULES", "50"))
FIRST_SEED = int(os.environ.get("AGENT_JOBS_TEST_SIM_SEED", "1"))


@pytest.fixture(scope="module")
def server(pg_database: str) -> str:
    return pg_database


@pytest.fixture(scope="module")
def databases(server: str) -> Iterator[PostgresDatabases]:
    d = PostgresDatabases(Database("postgres", server))
    yield d
    d.close()


def _ours(server: str) -> list[str]:
    """The simulator's databases this process made that are still there."""
    engine = create_engine(normalize_pg_url(server), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text("SELECT datname FROM pg_database WHERE datname LIKE :p"),
                {"p": f"aj\\_sim\\_{os.getpid()}\\_%"},
            )
            return [r[0] for r in rows]
    finally:
        engine.dispose()


@pytest.mark.parametrize("scenario", ["example", "agent"])
def test_a_seed_replays_its_schedule_exactly_on_postgres(
    databases: PostgresDatabases, scenario: str
) -> None:
    first = run_schedule(databases, 11, scenario=scenario)
    other = run_schedule(databases, 12, scenario=scenario)  # in between: nothing carries over
    again = run_schedule(databases, 11, scenario=scenario)
    replayed = run_schedule(databases, 11, scenario=scenario, replay=first.drawn)
    assert first.report.steps > 3, first.report.trace
    assert not first.failed, first.report.trace
    assert again.report.trace == first.report.trace
    assert again.drawn == first.drawn
    assert replayed.report.trace == first.report.trace
    assert other.report.trace != first.report.trace, "the seed must matter"


def test_the_runtime_reads_the_simulated_clock(databases: PostgresDatabases) -> None:
    """Every time the runtime wrote (leases, timers, events: `now()` in SQL text, in prepared
    statements and in Core statements) is the world's time, never the machine's."""
    outcome = run_schedule(databases, 11, scenario="example")
    end = databases.clock.now()
    assert outcome.report.steps > 3
    with databases.engine.connect() as conn:
        low, high, n = conn.execute(
            text(
                "SELECT min(t), max(t), count(*) FROM ("
                " SELECT created_at AS t FROM tasks UNION ALL SELECT updated_at FROM tasks"
                " UNION ALL SELECT at FROM task_events) x"
            )
        ).one()
        db_now = conn.execute(text("SELECT now()")).scalar_one()
    assert n > 3
    # Events are stamped a few real microseconds before the step's commit (`held_events`).
    assert START - timedelta(seconds=1) <= low <= high <= end, (low, high, end)
    assert db_now == end


def test_schedules_run_clean_on_postgres(server: str) -> None:
    summary = explore_parallel(
        FIRST_SEED,
        SCHEDULES,
        scenarios=("example", "agent"),
        jobs=2,
        stop_at_first=False,
        database=Database("postgres", server),
    )
    print(f"\n{summary.schedules} schedules on Postgres in {summary.seconds:.1f} s")
    assert summary.schedules == SCHEDULES
    assert summary.failures == []
    assert summary.steps > SCHEDULES and summary.faults > SCHEDULES


def test_a_mutant_is_caught_on_postgres(databases: PostgresDatabases) -> None:
    with mutants.active("send_before_intent"):
        caught = next(
            (
                o
                for seed in range(1, 41)
                if (
                    o := run_schedule(databases, seed, scenario=("example", "agent")[seed % 2])
                ).failed
            ),
            None,
        )
    assert caught is not None, "send_before_intent survived 40 schedules on Postgres"
    assert caught.invariant == "intent_first", caught.report.trace


def test_an_interrupted_run_drops_every_database_it_made(server: str) -> None:
    before = _ours(server)

    def interrupt(_summary: object) -> None:
        assert len(_ours(server)) == len(before) + 2  # its template and its copy
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        explore([1, 2], progress=interrupt, database=Database("postgres", server))
    assert _ours(server) == before
    with pytest.raises(RuntimeError), for_run(Database("postgres", server)) as run:
        assert run.template in _ours(server)
        raise RuntimeError("the run failed")
    assert _ours(server) == before


def test_the_command_runs_on_postgres(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--seed", "5", "--schedules", "2", "--scenario", "example", "--json"]
    assert main([*args, "--database", "postgres", "--database-url", server]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["database"] == "postgres" and out["schedules"] == 2 and out["failures"] == []
    assert main([*args, "--database", "postgres", "--database-url", "sqlite:///x.db"]) != 0


def test_rows_in_an_order_sql_leaves_open_come_sorted(databases: PostgresDatabases) -> None:
    """Postgres returns an UPDATE's RETURNING rows, or a SELECT's without ORDER BY, in the
    order it met them on disk, which other sessions' snapshots can change from run to run; the
    simulator takes them sorted. An ORDER BY is kept."""
    with databases.engine.connect() as conn:
        conn.execute(text("CREATE TEMP TABLE disk_order (k int)"))
        conn.execute(text("INSERT INTO disk_order VALUES (3), (1), (2)"))
        returned = conn.execute(text("UPDATE disk_order SET k = k RETURNING k")).scalars().all()
        selected = conn.execute(text("SELECT k FROM disk_order")).scalars().all()
        ordered = conn.execute(text("SELECT k FROM disk_order ORDER BY k DESC")).scalars()
        assert (returned, selected, ordered.all()) == ([1, 2, 3], [1, 2, 3], [3, 2, 1])
        conn.rollback()


def test_no_autovacuum_runs_in_the_simulators_databases(server: str) -> None:
    """Autovacuum moves rows and changes plans, and truncating a table or its TOAST table takes
    an exclusive lock that a statement would wait on past the simulator's 50 ms lock timeout: a
    schedule would then fail for the machine's load, not its seed. Off everywhere in the
    template, which every schedule's database is copied from."""
    name = create_template(server)
    engine = create_engine(
        normalize_pg_url(server.rsplit("/", 1)[0] + f"/{name}"), poolclass=NullPool
    )
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT c.relname, c.reloptions, t.oid, t.reloptions FROM pg_class c "
                    "LEFT JOIN pg_class t ON t.oid = c.reltoastrelid "
                    "WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r'"
                )
            ).all()
    finally:
        engine.dispose()
        drop_database(server, name)
    assert len(rows) > 10
    for table, own, toast, toast_options in rows:
        assert "autovacuum_enabled=false" in (own or []), table
        if toast is not None:
            assert "autovacuum_enabled=false" in (toast_options or []), f"{table}'s TOAST table"
    assert any(toast is not None for _, _, toast, _ in rows), "no table has a TOAST table"
