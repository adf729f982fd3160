"""A tenant's unfinished tasks counted in the database (the console's queue view): one grouped
count, exact past any cap, with the steps running now (a live lease), on both backends."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import insert

from agent_jobs.core.states import Status
from agent_jobs.store import Store
from agent_jobs.store.schema import tasks
from tests.contract.test_store_sweeps import _task

S = Status


def test_unfinished_tasks_are_counted_in_sql_by_status_with_live_leases(
    store: Store, tenant: str
) -> None:
    now = store.db_now()
    live = {"lease_owner": "w-1:1", "lease_expires_at": now + timedelta(minutes=5)}
    lapsed = {"lease_owner": "w-2:2", "lease_expires_at": now - timedelta(seconds=5)}
    rows: list[dict[str, Any]] = [_task(tenant, now, S.RECEIVED) for _ in range(1001)]
    rows += [_task(tenant, now, S.RUNNING, **live) for _ in range(2)]
    rows += [_task(tenant, now, S.RUNNING, **lapsed), _task(tenant, now, S.APPROVAL_WAIT)]
    rows += [_task(tenant, now, S.COMPLETED), _task(tenant, now, S.FAILED)]
    rows += [_task(f"{tenant}-other", now, S.RUNNING, **live) for _ in range(3)]
    with store.tx() as conn:
        conn.execute(insert(tasks), rows)
    by_status, in_flight = store.unfinished_counts(tenant)
    # Exact: the view once read at most 1000 rows per status (and every one of them whole).
    assert by_status == {"RECEIVED": 1001, "RUNNING": 3, "APPROVAL_WAIT": 1}
    assert in_flight == 2
    assert store.unfinished_counts(f"{tenant}-nobody") == ({}, 0)
