"""The claim hint (issue 14): a commit whose next step needs a lease says so in that step's
message (`Dispatch.claim`), and the step claims at once instead of reading first. A hint only:
the guarantees are those of any claim, on both backends."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import Status
from agent_jobs.testing import Harness
from agent_jobs.workflows import default_registry


def _submit(h: Harness, tenant: str, **input_: Any) -> str:
    request = TaskRequest(workflow="noop@1", input=input_)
    return h.submit(tenant, "k1", request).id


def _statements(store: Any) -> tuple[list[str], Any]:
    seen: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(" ".join(statement.split()).lower())

    event.listen(store.engine, "before_cursor_execute", before)
    return seen, before


def test_a_leased_steps_commit_hints_a_claim_and_the_next_step_claims_without_a_read(
    store: Any, tenant: str
) -> None:
    h = Harness(store, default_registry())
    task_id = _submit(h, tenant, steps=3, sleep_ms=1)  # sleeping steps are not quick
    h.run_one()  # RECEIVED -> RUNNING: a leased step (sleep_ms), whose commit dispatches
    [dispatch] = list(h.publisher.queue)
    assert dispatch.claim, "the next step needs a lease: the message says to claim at once"
    seen, before = _statements(store)
    try:
        report = h.run_one()
    finally:
        event.remove(store.engine, "before_cursor_execute", before)
    assert report is not None and report.to_status is Status.RUNNING
    reads = [s for s in seen if s.startswith("select") or "aj_claimable_row" in s]
    assert reads == [], f"the hinted step read the row before claiming it: {reads}"
    h.run_until_idle()
    task = store.get(task_id)
    assert task.status is Status.COMPLETED
    moves = [e for e in store.events(task_id) if e.to_status]
    assert len(moves) == task.version  # one event per transition, as without the hint


def test_a_quick_steps_message_carries_no_hint(store: Any, tenant: str) -> None:
    h = Harness(store, default_registry())
    _submit(h, tenant, steps=3)
    h.run_one()
    assert not any(d.claim for d in h.publisher.queue)


def test_a_wrong_hint_on_a_quick_step_runs_it_under_a_lease(store: Any, tenant: str) -> None:
    """A hint is not trusted: a step that turns out quick is run, correctly, under the lease."""
    h = Harness(store, default_registry())
    task_id = _submit(h, tenant, steps=2)
    h.run_one()  # RECEIVED -> RUNNING (quick)
    h.publisher.queue.clear()
    before = store.get(task_id)
    report = h.orchestrator.run_step(task_id, claim=True)
    assert report is not None and report.to_status is Status.RUNNING
    after = store.get(task_id)
    assert after.version == before.version + 1
    assert after.lease_epoch == before.lease_epoch + 1  # it took the lease
    assert after.lease_owner is None  # and gave it back with the commit


def test_a_hinted_step_for_a_task_held_elsewhere_does_nothing(store: Any, tenant: str) -> None:
    h = Harness(store, default_registry())
    task_id = _submit(h, tenant, steps=2, sleep_ms=1)
    h.run_one()
    other = store.claim(task_id, "someone-else", 30)
    assert other is not None
    before = store.get(task_id)
    assert h.orchestrator.run_step(task_id, claim=True) is None
    after = store.get(task_id)
    assert (after.version, after.lease_epoch, after.lease_owner) == (
        before.version,
        before.lease_epoch,
        "someone-else",
    )
