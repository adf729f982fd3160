"""The hot path's prepared statements on Postgres: prepared once per connection, kept across
rollbacks, prepared again on a replaced connection, and the same results as the plain
statements (which `AGENT_JOBS_PG_PREPARE=0` selects)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.exc import DBAPIError

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.store import Store, prepared
from agent_jobs.testing import TEST_SETTINGS, Harness
from agent_jobs.workflows import default_registry


@contextmanager
def statements(store: Store) -> Iterator[list[str]]:
    seen: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement.strip())

    event.listen(store.engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(store.engine, "before_cursor_execute", before)


def _noop(
    store: Store, tenant: str, steps: int = 4, *, carried: bool = True
) -> tuple[Harness, str]:
    cfg = TEST_SETTINGS if carried else TEST_SETTINGS.with_overrides(step_row_max_bytes=0)
    harness = Harness(store, default_registry(), cfg)
    request = TaskRequest(workflow="noop@1", input={"steps": steps})
    return harness, harness.submit(tenant, f"k-{steps}", request).id


def test_from_text_numbers_each_bind_once_and_leaves_casts_alone() -> None:
    made = prepared.from_text(
        "aj_test_numbering",
        "SELECT :a, :b, :a, CAST(:b AS integer), x::int, '10:30' FROM t WHERE id = :c",
        {"a": "varchar", "b": "integer", "c": "varchar"},
    )
    assert (
        made.body == "SELECT $1, $2, $1, CAST($2 AS integer), x::int, '10:30' FROM t WHERE id = $3"
    )
    assert made.prepare_sql.startswith("PREPARE aj_test_numbering (varchar, integer, varchar) AS")
    assert prepared.sql_of("EXECUTE aj_test_numbering('x', 1, 'y')") == made.body
    assert prepared.sql_of("SELECT 1") == "SELECT 1"


@pytest.mark.parametrize("carried", [True, False], ids=["rows-carried", "rows-read"])
def test_each_statement_is_prepared_once_per_connection(
    pg_store: Store, tenant: str, carried: bool
) -> None:
    harness, task_id = _noop(pg_store, tenant, carried=carried)
    with statements(pg_store) as seen:
        harness.run_until_idle()
    prepares = [s.split()[1] for s in seen if s.startswith("PREPARE")]
    assert len(prepares) == len(set(prepares)), prepares  # the pool keeps one connection here
    reads = sum(s.startswith("EXECUTE aj_claimable_row") for s in seen)
    if carried:
        # Only the first step reads: each quick commit hands its row to the next quick step.
        used = {"aj_claimable_row", "aj_cas", "aj_cas_unheld"}
        assert reads == 1
    else:
        used = {"aj_claimable_row", "aj_cas_lean"}
        assert reads >= 6
    assert used <= set(prepares)
    assert pg_store.get(task_id).status.value == "COMPLETED"
    with pg_store.tx() as conn:
        names = {r[0] for r in conn.exec_driver_sql("SELECT name FROM pg_prepared_statements")}
    assert used <= names


def test_a_rollback_keeps_the_statement_and_a_new_connection_prepares_again(
    pg_store: Store, tenant: str
) -> None:
    _, task_id = _noop(pg_store, tenant)
    with pytest.raises(RuntimeError), pg_store.tx() as conn:
        assert pg_store.peek_claimable(conn, task_id) is not None  # prepares
        raise RuntimeError("roll back")
    with statements(pg_store) as seen, pg_store.tx() as conn:
        assert pg_store.peek_claimable(conn, task_id) is not None
    assert not [s for s in seen if s.startswith("PREPARE")]
    with pg_store.engine.connect() as conn:
        conn.invalidate()  # the connection is replaced: what it prepared is gone with it
    with statements(pg_store) as seen, pg_store.tx() as conn:
        assert pg_store.peek_claimable(conn, task_id) is not None
    assert [s.split()[1] for s in seen if s.startswith("PREPARE")] == ["aj_claimable_row"]


def test_turned_off_the_plain_statements_give_the_same_task(
    pg_store: Store, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def run(key: str) -> tuple[Any, list[Any], list[str]]:
        harness = Harness(pg_store, default_registry())
        request = TaskRequest(workflow="noop@1", input={"steps": 3})
        task_id = harness.submit(tenant, key, request).id
        with statements(pg_store) as seen:
            harness.run_until_idle()
        task = pg_store.get(task_id)
        trail = [(e.seq, e.type, e.from_status, e.to_status) for e in pg_store.events(task_id)]
        return (task.status, task.version, task.event_seq, task.outcome), trail, seen

    on = run("on")
    monkeypatch.setattr(prepared, "enabled", lambda: False)
    off = run("off")
    assert on[:2] == off[:2]
    assert any(s.startswith("EXECUTE") for s in on[2])
    assert not any(s.startswith(("EXECUTE", "PREPARE")) for s in off[2])


def test_a_statement_deallocated_behind_its_back_is_prepared_again(
    pg_store: Store, tenant: str
) -> None:
    """`DISCARD ALL` (or a pooler swapping sessions) drops what the connection prepared: that
    transaction fails, the next one prepares again instead of failing forever."""
    _, task_id = _noop(pg_store, tenant)
    with pg_store.tx() as conn:
        assert pg_store.peek_claimable(conn, task_id) is not None
    with pg_store.engine.connect() as conn:
        conn.exec_driver_sql("DEALLOCATE ALL")
        conn.commit()
    with pytest.raises(DBAPIError), pg_store.tx() as conn:
        pg_store.peek_claimable(conn, task_id)
    with pg_store.tx() as conn:
        assert pg_store.peek_claimable(conn, task_id) is not None
