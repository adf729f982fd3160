"""`GET /v1/tasks/{id}?wait=S`: answers as soon as the task's status changes, at once for a
finished task, after S seconds otherwise; many waiting callers share one status read per
interval (one watcher per API process), never one each."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from agent_jobs.store.guard import Guard
from tests.contract.support import S, running, to
from tests.integration.api_env import HarnessApi, auth, harness_api, token

pytestmark = pytest.mark.postgres


@pytest.fixture
def api(pg_store: Any, tmp_path: Path) -> HarnessApi:
    return harness_api(pg_store, tmp_path / "ledger.db")


def _reads(api: HarnessApi) -> tuple[list[str], Any]:
    seen: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "tasks.status" in statement and "tasks.id IN" in statement:
            seen.append(statement)

    event.listen(api.store.engine, "before_cursor_execute", before)
    return seen, lambda: event.remove(api.store.engine, "before_cursor_execute", before)


def test_answers_when_the_status_changes(api: HarnessApi) -> None:
    lease = running(api.store, "acme")
    tok = token(api.cfg, "acme")

    def later() -> None:
        time.sleep(0.4)
        api.store.transition(Guard.lease(lease), to(S.ESCALATED, "gave_up"))

    threading.Thread(target=later).start()
    start = time.monotonic()
    r = api.client.get(f"/v1/tasks/{lease.task_id}?wait=20", headers=auth(tok))
    took = time.monotonic() - start
    assert r.status_code == 200 and r.json()["status"] == "ESCALATED"
    assert 0.3 < took < 5.0  # woken by the change, long before the 20 s


def test_a_finished_task_answers_at_once_and_a_quiet_one_after_the_wait(
    api: HarnessApi,
) -> None:
    tok = token(api.cfg, "acme")
    lease = running(api.store, "acme")
    start = time.monotonic()
    r = api.client.get(f"/v1/tasks/{lease.task_id}?wait=0.5", headers=auth(tok))
    assert r.json()["status"] == "RUNNING" and 0.5 <= time.monotonic() - start < 3
    api.store.transition(Guard.lease(lease), to(S.ESCALATED, "gave_up"))
    start = time.monotonic()
    r = api.client.get(f"/v1/tasks/{lease.task_id}?wait=30", headers=auth(tok))
    assert r.json()["status"] == "ESCALATED" and time.monotonic() - start < 1
    assert (
        api.client.get(f"/v1/tasks/{lease.task_id}?wait=61", headers=auth(tok)).status_code == 422
    )
    other = token(api.cfg, "other")
    assert (
        api.client.get(f"/v1/tasks/{lease.task_id}?wait=1", headers=auth(other)).status_code == 404
    )


def test_many_waiters_share_one_read_per_interval(api: HarnessApi) -> None:
    tok = token(api.cfg, "acme")
    leases = [running(api.store, "acme") for _ in range(12)]
    seen, stop = _reads(api)
    try:
        with ThreadPoolExecutor(max_workers=24) as pool:
            futures = [
                pool.submit(
                    api.client.get, f"/v1/tasks/{lease.task_id}?wait=1.5", headers=auth(tok)
                )
                for lease in leases
                for _ in range(2)
            ]
            answers = [f.result() for f in futures]
    finally:
        stop()
    assert all(a.status_code == 200 and a.json()["status"] == "RUNNING" for a in answers)
    # 24 callers waiting 1.5 s: at most one read per 0.1 s interval (~15), not one per caller
    # per interval (~360).
    assert 3 <= len(seen) <= 25, len(seen)
