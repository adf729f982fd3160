"""Prepared statements on the driver's cursor (Postgres): when nothing but the content rule
listens to the engine, `EXECUTE` skips SQLAlchemy's execution machinery. The row must be the
one SQLAlchemy would give (its result processing included), errors must still be SQLAlchemy's
(a dead connection invalidated), the content rule must still clean what is written, and a
listener must still see every statement."""

from __future__ import annotations

import logging
from datetime import UTC
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.text import clean_text
from agent_jobs.store import Store
from agent_jobs.store.backend import prepared
from agent_jobs.store.backend.postgres_sql import CLAIM as _CLAIM_PREPARED
from agent_jobs.store.backend.postgres_sql import CLAIMABLE_ROW as _CLAIMABLE_ROW_PREPARED
from agent_jobs.testing import Harness
from agent_jobs.workflows import default_registry


def _task(store: Store, tenant: str, key: str = "k") -> str:
    harness = Harness(store, default_registry())
    return harness.submit(tenant, key, TaskRequest(workflow="noop@1", input={"steps": 2})).id


def test_the_row_from_the_cursor_is_the_row_sqlalchemy_gives(pg_store: Store, tenant: str) -> None:
    task_id = _task(pg_store, tenant)
    with pg_store.autocommit() as conn:
        # A session time zone far from UTC: psycopg2 hands back +05:30 datetimes, which the
        # columns' result processing (UTCDateTime) must turn into UTC on both paths.
        conn.exec_driver_sql("SET TIME ZONE 'Asia/Kolkata'")
        try:
            values = {"p_id": task_id}
            raw = prepared.execute(conn, _CLAIMABLE_ROW_PREPARED, values)
            assert isinstance(raw, prepared.RawResult)
            row = raw.first()
            assert row is not None
            via_sqlalchemy = conn.execute(_CLAIMABLE_ROW_PREPARED.statement, values).first()
            assert via_sqlalchemy is not None
            assert dict(row._mapping) == dict(via_sqlalchemy._mapping)
            assert list(row._mapping) == list(via_sqlalchemy._mapping)
            assert row._mapping["created_at"].tzinfo is UTC
            assert row._mapping["state"] == via_sqlalchemy._mapping["state"]
        finally:
            conn.exec_driver_sql("SET TIME ZONE 'UTC'")
        missing = prepared.execute(conn, _CLAIMABLE_ROW_PREPARED, {"p_id": "nope"})
        assert missing.first() is None


def test_a_listener_sees_every_prepared_statement(pg_store: Store, tenant: str) -> None:
    task_id = _task(pg_store, tenant)
    seen: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(pg_store.engine, "before_cursor_execute", before)
    try:
        with pg_store.autocommit() as conn:
            result = prepared.execute(conn, _CLAIMABLE_ROW_PREPARED, {"p_id": task_id})
            assert not isinstance(result, prepared.RawResult)
            assert result.first() is not None
    finally:
        event.remove(pg_store.engine, "before_cursor_execute", before)
    assert any(s.startswith("EXECUTE aj_claimable_row") for s in seen)


def test_an_error_on_the_cursor_is_sqlalchemys_and_a_dead_connection_is_replaced(
    pg_store: Store, tenant: str
) -> None:
    task_id = _task(pg_store, tenant)
    with pg_store.autocommit() as conn:
        assert pg_store.peek_claimable(conn, task_id) is not None  # prepared, on the cursor
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        with pg_store.autocommit() as other:
            other.exec_driver_sql(f"SELECT pg_terminate_backend({int(pid)})")
        with pytest.raises(DBAPIError) as caught:
            pg_store.peek_claimable(conn, task_id)
        assert caught.value.connection_invalidated
    # The pool handed the dead connection back invalidated: the next step gets a live one.
    with pg_store.autocommit() as conn:
        assert pg_store.peek_claimable(conn, task_id) is not None
        assert conn.exec_driver_sql("SELECT pg_backend_pid()").scalar() != pid


def test_a_failing_statement_on_the_cursor_leaves_its_transaction_to_roll_back(
    pg_store: Store, tenant: str
) -> None:
    task_id = _task(pg_store, tenant)
    with pytest.raises(DBAPIError) as caught, pg_store.tx() as conn:
        # A TTL no interval can hold: Postgres refuses the claim itself.
        pg_store.claim(task_id, "w1", 1e300, conn=conn)
    assert caught.value.orig is not None
    assert pg_store.get(task_id).lease_owner is None
    with pg_store.tx() as conn:
        assert pg_store.claim(task_id, "w1", 30.0, conn=conn) is not None


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(owner=st.text(max_size=40))
def test_the_content_rule_cleans_what_the_cursor_writes(
    pg_store: Store, tenant: str, owner: str
) -> None:
    """NUL and lone surrogates in a bound string become U+FFFD on the cursor path too."""
    task_id = _task(pg_store, tenant, key=f"k{len(owner)}")
    with pg_store.autocommit() as conn:
        # A lease already lapsed (negative TTL), so every example can claim the task again.
        values = {"p_id": task_id, "p_owner": owner, "p_ttl": -1.0}
        result = prepared.execute(conn, _CLAIM_PREPARED, values)
        assert isinstance(result, prepared.RawResult)
        row = result.first()
    assert row is not None
    assert row._mapping["lease_owner"] == clean_text(owner)
    assert pg_store.get(task_id).lease_owner == clean_text(owner)


def test_sql_logging_sees_every_prepared_statement(
    pg_store: Store, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    task_id = _task(pg_store, tenant)
    log = caplog.at_level(logging.INFO, logger="sqlalchemy.engine.Engine")
    with log, pg_store.autocommit() as conn:
        result = prepared.execute(conn, _CLAIMABLE_ROW_PREPARED, {"p_id": task_id})
        assert not isinstance(result, prepared.RawResult)
    assert any("EXECUTE aj_claimable_row" in r.getMessage() for r in caplog.records)
