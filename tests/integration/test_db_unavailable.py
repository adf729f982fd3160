"""What counts as "the database could not be reached" (a step then keeps its message and tries
again for the outage wait) and what is an answer from a server that is there (a statement or
lock timeout: the step fails as any step does, counted and bounded), on real Postgres."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from agent_jobs.orchestrator.outage import db_unavailable
from agent_jobs.store.engine import make_engine
from tests.conftest import new_database


def _error_of(url: str, *statements: str) -> DBAPIError:
    engine = make_engine(url)
    try:
        with pytest.raises(DBAPIError) as caught, engine.connect() as conn:
            for sql in statements:
                conn.execute(text(sql))
        return caught.value
    finally:
        engine.dispose()


def test_a_refused_connection_is_unreachable() -> None:
    err = _error_of("postgresql://postgres@127.0.0.1:1/none", "SELECT 1")
    assert db_unavailable(err)


def test_a_statement_timeout_is_an_answer_not_an_outage() -> None:
    with new_database() as url:
        err = _error_of(url, "SET statement_timeout = 1", "SELECT pg_sleep(0.5)")
        assert getattr(err.orig, "pgcode", None) == "57014"
        assert not db_unavailable(err)


def test_a_lock_timeout_is_an_answer_not_an_outage() -> None:
    with new_database() as url:
        engine = make_engine(url)
        try:
            with engine.begin() as holder:
                holder.execute(text("CREATE TABLE t (id int)"))
            with engine.connect() as holder:
                holder.execute(text("BEGIN; LOCK TABLE t IN ACCESS EXCLUSIVE MODE"))
                err = _error_of(url, "SET lock_timeout = 10", "SELECT * FROM t")
                holder.rollback()
        finally:
            engine.dispose()
        assert getattr(err.orig, "pgcode", None) == "55P03"
        assert not db_unavailable(err)


def test_a_connection_the_server_terminated_is_unreachable() -> None:
    with new_database() as url:
        engine = make_engine(url)
        try:
            with engine.connect() as victim:
                pid = victim.execute(text("SELECT pg_backend_pid()")).scalar_one()
                with engine.connect() as admin:
                    admin.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
                with pytest.raises(DBAPIError) as caught:
                    victim.execute(text("SELECT 1"))
        finally:
            engine.dispose()
        assert db_unavailable(caught.value)
