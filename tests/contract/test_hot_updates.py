"""A read step (RUNNING -> RUNNING) updates the task row in place on Postgres (a HOT update: no
index entry written), which holds only while no index of `tasks` covers a column such a step
changes (migrations 0004 and 0009). Counted in the transaction's own statistics, which are exact
and immediate, through the real write path."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from agent_jobs.core.patch import Patch
from agent_jobs.core.states import Status
from agent_jobs.store.guard import Guard
from agent_jobs.store.transition import apply
from tests.contract.test_step_failures import Scripted, run

# What a read step changes on the row besides what is NULL before and after (next_attempt_at,
# lease columns): Postgres compares values, so only a changed value in an index rules out HOT.
READ_STEP_COLUMNS = ("version", "event_seq", "updated_at", "state", "dispatched_at")


def _running_task(store: Any, tenant: str) -> Any:
    h, task = run(store, tenant, Scripted())
    h.run_one()  # RECEIVED -> RUNNING
    task = store.get(task.id)
    assert task.status is Status.RUNNING and task.lease_owner is None
    return task


def test_read_steps_are_hot_updates(pg_store: Any, tenant: str) -> None:
    task = _running_task(pg_store, tenant)
    counts = text(
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = 'tasks'"
    )
    with pg_store.tx() as conn:
        upd0, hot0 = conn.execute(counts).one()
        for n in range(3):
            patch = Patch(to=Status.RUNNING, event="observed", state={**task.state, "n": n})
            new, _ = apply(pg_store.backend, conn, Guard.seen(task), patch, lease_ttl_s=30)
            assert new is not None
            task = new
        upd, hot = conn.execute(counts).one()
    # Three updates, all in place: a changed column in any index would make them write entries.
    assert (upd - upd0, hot - hot0) == (3, 3)


def test_no_index_of_tasks_covers_a_column_a_read_step_changes(pg_store: Any) -> None:
    with pg_store.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT c.relname, pg_get_indexdef(i.indexrelid), "
                "coalesce(pg_get_expr(i.indpred, i.indrelid), '') "
                "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE i.indrelid = 'tasks'::regclass"
            )
        ).all()
    assert rows
    for name, definition, predicate in rows:
        keyed = definition.split(" USING ", 1)[1]
        for column in READ_STEP_COLUMNS:
            assert f"({column}" not in keyed and f" {column}" not in keyed, (name, column)
            assert column not in predicate, (name, column)
