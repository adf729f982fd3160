"""Quick steps: a step with no I/O runs in one transaction, fenced by compare-and-set alone.

The guarantees must not change: the transition is still a compare-and-set with its event
(invariant 1), a zombie holding a lapsed lease is still fenced (invariant 2), and a second
delivery of the same message does nothing.
"""

from __future__ import annotations

import threading
from typing import Any

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.errors import StaleTransition
from agent_jobs.core.patch import Patch
from agent_jobs.core.states import Status
from agent_jobs.store.guard import Guard
from agent_jobs.testing import Harness
from agent_jobs.workflows import builtin_registry, default_registry


def _noop(h: Harness, tenant: str, steps: int = 2) -> str:
    return h.submit(tenant, "k1", TaskRequest(workflow="noop@1", input={"steps": steps})).id


def test_quick_steps_take_no_lease_and_write_one_event_each(store: Any, tenant: str) -> None:
    h = Harness(store, default_registry())
    task_id = _noop(h, tenant, steps=3)
    h.run_until_idle()
    task = store.get(task_id)
    assert task.status is Status.COMPLETED
    assert task.lease_epoch == 0, "a quick step never took a lease"
    moves = [(e.from_status, e.to_status) for e in store.events(task_id) if e.to_status]
    # created, start, three observations, the draft, completion: one event per version.
    assert len(moves) == task.version
    assert all(e.data.get("by") for e in store.events(task_id) if e.to_status and e.from_status)


def test_a_zombie_with_a_lapsed_lease_is_fenced_by_a_quick_step(store: Any, tenant: str) -> None:
    h = Harness(store, default_registry())
    task_id = _noop(h, tenant, steps=5)
    h.run_one()  # RECEIVED -> RUNNING
    zombie = store.claim(task_id, "zombie", 30)
    assert zombie is not None
    h.expire_lease(task_id)
    h.orchestrator.run_step(task_id)  # claimable again: the lease lapsed
    try:
        store.transition(Guard.lease(zombie), Patch(to=Status.RUNNING, event="late"))
    except StaleTransition:
        pass
    else:
        raise AssertionError("the zombie's late commit was accepted")
    assert "late" not in [e.type for e in store.events(task_id)]


def test_a_duplicate_delivery_of_a_quick_step_does_nothing(pg_store: Any, tenant: str) -> None:
    """Two workers run the same message at once: one commits, the other skips the locked row
    (SKIP LOCKED) or finds the task moved on; the version moves by exactly one."""
    h = Harness(pg_store, default_registry())
    task_id = _noop(h, tenant, steps=50)
    h.run_one()
    before = pg_store.get(task_id).version
    barrier = threading.Barrier(4)
    results: list[Any] = []

    def race() -> None:
        barrier.wait()
        results.append(h.orchestrator.run_step(task_id))

    threads = [threading.Thread(target=race) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    moved = [r for r in results if r is not None and r.to_status is not None]
    # Up to four steps may run one after another, each from the version the last one left.
    after = pg_store.get(task_id).version
    assert after - before == len(moved) >= 1
    transitions = [e for e in pg_store.events(task_id) if e.to_status]
    assert len(transitions) == after


def test_a_quick_hook_that_raises_fails_neither_the_submit_nor_a_commit(
    store: Any, tenant: str
) -> None:
    """The hint a submit or a commit gives the next step asks the workflow's `quick` hook; a
    hook that raises gives no hint (the step runs it again and records the failure, counted
    and bounded), and the task created or the transition committed stands."""
    from agent_jobs.workflows.noop import NoopWorkflow

    class Raising(NoopWorkflow):
        name, version = "raising-quick", 1

        def quick(self, inp: Any) -> bool:
            raise RuntimeError("a buggy quick hook")

    registry = builtin_registry()  # its own: the process's registry is not a test's to add to
    registry.register(Raising())
    h = Harness(store, registry)
    request = TaskRequest(workflow="raising-quick@1", input={"steps": 1})
    task_id = h.submit(tenant, "k-raise", request).id  # no exception
    assert store.get(task_id).status is Status.RECEIVED
    (sent,) = h.publisher.published
    assert sent.row is None and not sent.claim  # a plain message: the step reads
    # Each step runs the hook again and fails: counted, retried, then FAILED (bounded).
    task = h.settle(task_id)
    assert task.status is Status.FAILED
    assert task.attempts == h.settings.max_attempts
