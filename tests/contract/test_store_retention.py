"""The retention sweeper: rejected submissions are pruned after their retention, oldest first,
in batches, by the database clock; younger ones stay; `0` keeps everything; two at once delete
each row once. On SQLite and Postgres."""

from __future__ import annotations

import threading
from datetime import timedelta

from sqlalchemy import update

from agent_jobs.orchestrator.sweepers import Sweepers
from agent_jobs.store import Store
from agent_jobs.store.schema import rejected_submissions
from agent_jobs.testing import TEST_SETTINGS, LostBroker, RecordingPublisher

DAY_S = 86_400


def _reject(store: Store, n: int, prefix: str) -> list[str]:
    ids = [f"{prefix}-{i}" for i in range(n)]
    for record_id in ids:
        store.record_rejected_submission(
            record_id, via="celery", reason_code="invalid_token", reason="signature mismatch"
        )
    return ids


def _age(store: Store, ids: list[str], days: float) -> None:
    """Move the records' time back by `days`, relative to the database clock."""
    at = store.db_now() - timedelta(days=days)
    with store.tx() as conn:
        conn.execute(
            update(rejected_submissions).where(rejected_submissions.c.id.in_(ids)).values(at=at)
        )


def _left(store: Store) -> set[str]:
    return {r.id for r in store.rejected_submissions(limit=10_000)}


def _sweepers(store: Store, **overrides: object) -> Sweepers:
    settings = TEST_SETTINGS.with_overrides(**overrides)
    return Sweepers(store, RecordingPublisher(), settings, LostBroker())


def test_old_rejections_are_pruned_in_batches_and_young_ones_stay(store: Store) -> None:
    old = _reject(store, 23, "old")
    young = _reject(store, 4, "young")
    _age(store, old, 31)
    _age(store, young, 29)
    sweepers = _sweepers(store, rejected_retention_days=30.0, sweep_batch=5)  # five batches
    assert sweepers.run("retention") == 23
    assert _left(store) == set(young)
    assert sweepers.run("retention") == 0  # idempotent


def test_retention_zero_keeps_everything(store: Store) -> None:
    ids = _reject(store, 3, "kept")
    _age(store, ids, 3650)
    assert _sweepers(store, rejected_retention_days=0.0).all().counts["retention"] == 0
    assert _left(store) == set(ids)


def test_a_batch_takes_the_oldest_first(store: Store) -> None:
    ancient, old = _reject(store, 2, "ancient"), _reject(store, 2, "old")
    _age(store, ancient, 400)
    _age(store, old, 40)
    assert store.prune_rejected_submissions(30 * DAY_S, limit=2) == 2
    assert _left(store) == set(old)


def test_two_retention_sweepers_at_once_delete_every_row_once(pg_store: Store) -> None:
    """On Postgres (SQLite has one writer): no error, no row counted twice, and together they
    delete every old row (SKIP LOCKED lets them split the rows rather than wait on each other)."""
    store = pg_store
    ids = _reject(store, 60, "dup")
    _age(store, ids, 31)
    a = _sweepers(store, rejected_retention_days=30.0, sweep_batch=7)
    b = _sweepers(store, rejected_retention_days=30.0, sweep_batch=7)
    gate = threading.Barrier(2)
    counts: list[int] = []

    def sweep(s: Sweepers) -> None:
        gate.wait()
        counts.append(s.run("retention"))

    threads = [threading.Thread(target=sweep, args=(s,)) for s in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(counts) == 2 and sum(counts) == 60, counts
    assert _left(store) == set()
