"""`Store.create_or_get`: one task per (tenant, idempotency key), written with its first event and
its dispatch record in one transaction. Runs on SQLite and Postgres."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from agent_jobs.core.errors import IdempotencyConflict
from agent_jobs.core.states import Status
from agent_jobs.store import CreateResult, Store
from agent_jobs.store.schema import task_events, tasks
from tests.contract.support import count, failing_statement, request


def test_same_key_and_payload_returns_the_same_task(store: Store, tenant: str) -> None:
    """Invariant 5 (nothing runnable is forgotten): a client's retry finds its task, not a twin."""
    first = store.create_or_get(tenant, "req-1", request(1), requester="svc:a")
    again = store.create_or_get(tenant, "req-1", request(1), requester="svc:a")
    assert first.created and not again.created
    assert again.task.id == first.task.id
    assert again.task.version == first.task.version == 1
    assert count(store, tasks, tenant_id=tenant) == 1
    assert count(store, task_events, task_id=first.task.id) == 1


def test_payload_identity_ignores_key_order(store: Store, tenant: str) -> None:
    """Invariant 5: the payload identity is canonical JSON, not the client's key order."""
    a = store.create_or_get(tenant, "k", request(1, a=1, b=2), requester="svc:a")
    b = store.create_or_get(tenant, "k", request(1, b=2, a=1), requester="svc:a")
    assert a.task.id == b.task.id and not b.created


def test_same_key_different_payload_is_a_conflict(store: Store, tenant: str) -> None:
    """Invariant 5: a reused key with another payload is a conflict, never a guess."""
    store.create_or_get(tenant, "req-1", request(1), requester="svc:a")
    with pytest.raises(IdempotencyConflict) as info:
        store.create_or_get(tenant, "req-1", request(2), requester="svc:a")
    assert info.value.idempotency_key == "req-1" and info.value.tenant_id == tenant
    assert count(store, tasks, tenant_id=tenant) == 1


def test_the_key_is_scoped_by_tenant(store: Store, tenant: str) -> None:
    """Invariant 7: one tenant's key never names another tenant's task."""
    mine = store.create_or_get(tenant, "req-1", request(1), requester="svc:a")
    theirs = store.create_or_get(tenant + "x", "req-1", request(2), requester="svc:b")
    assert theirs.created and theirs.task.id != mine.task.id


def test_row_created_event_and_dispatch_record_are_written_together(
    store: Store, tenant: str
) -> None:
    """Invariant 5: a new task is born dispatched (the sweeper can find a lost first message),
    and its trace starts with `created`."""
    result = store.create_or_get(tenant, "req-1", request(1), requester="svc:a")
    task = result.task
    assert task.status is Status.RECEIVED and task.version == 1 and task.lease_epoch == 0
    assert task.lease_owner is None and task.next_attempt_at is None
    assert task.dispatched_at is not None and task.dispatched_at == task.created_at
    (event,) = store.events(task.id)
    assert (event.seq, event.type, event.from_status, event.to_status) == (
        1,
        "created",
        None,
        Status.RECEIVED,
    )
    assert event.trace_id == task.trace_id
    assert task.event_seq == 1


def test_a_failed_event_append_leaves_no_task(store: Store, tenant: str) -> None:
    """Invariant 1/5: the row and its `created` event are one transaction; if the event cannot be
    written, there is no task either (and the key stays free for the retry)."""
    with failing_statement(store, "INSERT INTO task_events"), pytest.raises(RuntimeError):
        store.create_or_get(tenant, "req-1", request(1), requester="svc:a")
    assert count(store, tasks, tenant_id=tenant) == 0
    retry = store.create_or_get(tenant, "req-1", request(1), requester="svc:a")
    assert retry.created


def test_twenty_concurrent_creates_with_one_key_make_one_row(store: Store, tenant: str) -> None:
    """Invariant 5 + UNIQUE(tenant_id, idempotency_key): racing API processes that received the
    same request all get the one task, none an error, and exactly one `created` event exists."""
    gate = threading.Barrier(20)

    def submit(_: int) -> CreateResult:
        gate.wait()
        return store.create_or_get(tenant, "same-key", request(7), requester="svc:a")

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(submit, range(20)))
    ids = {r.task.id for r in results}
    assert len(ids) == 1
    assert sum(r.created for r in results) == 1
    assert count(store, tasks, tenant_id=tenant) == 1
    assert count(store, task_events, task_id=ids.pop()) == 1


def test_concurrent_creates_with_one_key_and_different_payloads(store: Store, tenant: str) -> None:
    """Invariant 5: the loser of a race with a different payload gets a conflict, never a
    second row."""
    gate = threading.Barrier(10)

    def submit(n: int) -> CreateResult | IdempotencyConflict:
        gate.wait()
        try:
            return store.create_or_get(tenant, "same-key", request(n % 2), requester="svc:a")
        except IdempotencyConflict as exc:
            return exc

    with ThreadPoolExecutor(max_workers=10) as pool:
        results = list(pool.map(submit, range(10)))
    created = [r for r in results if isinstance(r, CreateResult)]
    conflicts = [r for r in results if isinstance(r, IdempotencyConflict)]
    assert count(store, tasks, tenant_id=tenant) == 1
    assert len({r.task.id for r in created}) == 1
    assert len(created) == 5 and len(conflicts) == 5
