"""A step that starts from the row its message carried (`Dispatch.row`, queue/carried_rows.py)
instead of reading it, on both backends: it commits only on the very row it was computed from,
and anything that moved the task since — another step, a cancel, the gate's hold — sends it back
to a read; the signature admits only rows agent_jobs wrote, for the task the message names."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import Status
from agent_jobs.queue.carried_rows import CarriedRows
from agent_jobs.store import Store
from agent_jobs.store.rows import task_from_json, task_to_json
from agent_jobs.testing import Harness
from agent_jobs.workflows import default_registry

S = Status


def _noop(store: Store, tenant: str, steps: int = 5) -> tuple[Harness, str]:
    harness = Harness(store, default_registry())
    task = harness.submit(
        tenant, f"k-{steps}", TaskRequest(workflow="noop@1", input={"steps": steps})
    )
    return harness, task.id


def test_quick_steps_hand_their_row_on_and_it_is_the_databases(store: Store, tenant: str) -> None:
    harness, task_id = _noop(store, tenant)
    harness.run_one()  # RECEIVED -> RUNNING: read, then committed
    carried = harness.publisher.queue[0].row
    assert carried is not None and carried.status is S.RUNNING
    assert carried == store.get(task_id)  # what the commit returned is the stored row
    assert task_from_json(task_to_json(carried)) == carried


def test_a_row_that_moved_on_sends_the_step_back_to_a_read(store: Store, tenant: str) -> None:
    harness, task_id = _noop(store, tenant)
    harness.run_one()
    stale = harness.publisher.queue.popleft().row
    assert stale is not None
    # Another delivery of the same step ran first (a duplicate): the row carried is stale now.
    harness.orchestrator.run_step(task_id)
    moved = store.get(task_id)
    report = harness.orchestrator.run_step(task_id, stale)
    # It started over from a read and advanced the task by exactly one transition.
    assert report is not None and report.to_status is not None
    assert store.get(task_id).version == moved.version + 1
    harness.run_until_idle()
    assert store.get(task_id).status is S.COMPLETED


def test_a_cancel_after_the_commit_is_honoured_at_the_very_next_step(
    store: Store, tenant: str
) -> None:
    """A cancel lands while the next step's message (carrying the row the commit returned)
    waits: that step, not a later one, ends the task (the carried row predates the cancel, so
    its compare-and-set must not match; the step reads the row again and honours it)."""
    harness, task_id = _noop(store, tenant, steps=50)
    harness.run_one()
    harness.run_one()
    waiting = harness.publisher.queue[0].row
    assert waiting is not None and waiting.cancel_requested_at is None
    assert harness.orchestrator.cancel(task_id, tenant).accepted
    report = harness.run_one()
    assert report is not None and report.to_status is S.CANCELLED
    assert store.get(task_id).status is S.CANCELLED
    harness.run_until_idle()
    assert store.get(task_id).status is S.CANCELLED


def test_a_held_task_is_not_run_from_a_carried_row(store: Store, tenant: str) -> None:
    harness, task_id = _noop(store, tenant)
    harness.run_one()
    carried = harness.publisher.queue.popleft().row
    assert carried is not None
    assert store.hold(task_id, "paused")  # the gate holds it: no version change
    report = harness.orchestrator.run_step(task_id, carried)
    assert report is None or report.to_status is None
    after = store.get(task_id)
    assert after.version == carried.version and after.held_since is not None


def test_signed_rows_round_trip_between_two_processes(store: Store, tenant: str) -> None:
    harness, task_id = _noop(store, tenant)
    harness.run_one()
    row = harness.publisher.queue[0].row
    assert row is not None
    sender, receiver = CarriedRows(store, 8192), CarriedRows(store, 8192)  # one key, in the db
    carried = sender.encode(row)
    assert carried is not None
    assert receiver.decode(carried, task_id) == row
    assert receiver.decode(carried, "tsk_another") is None  # for the task the message names only
    forged_state = json.loads(carried["row"])
    forged_state["state"] = {"left": 0}
    forged = {"row": json.dumps(forged_state, separators=(",", ":")), "sig": carried["sig"]}
    assert receiver.decode(forged, task_id) is None
    assert receiver.decode({"row": carried["row"], "sig": "0" * 64}, task_id) is None
    assert CarriedRows(store, 64).encode(row) is None  # longer than allowed: not carried
    assert CarriedRows(store, 0).encode(row) is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(carried=json_values | st.fixed_dictionaries({"row": json_values, "sig": json_values}))
def test_whatever_a_message_carries_never_raises(sqlite_store: Store, carried: Any) -> None:
    assert CarriedRows(sqlite_store, 8192).decode(carried, "tsk_x") is None


def test_a_row_of_another_shape_is_refused(store: Store, tenant: str) -> None:
    harness, task_id = _noop(store, tenant)
    harness.run_one()
    row = harness.publisher.queue[0].row
    assert row is not None
    rows = CarriedRows(store, 8192)
    odd = replace(row, lease_owner="someone")  # signed, but not a row a step may start from
    carried = rows.encode(odd)
    assert carried is not None and rows.decode(carried, task_id) == odd
    report = harness.orchestrator.run_step(task_id, odd)  # the orchestrator reads instead
    assert report is not None and report.to_status is not None


def test_a_key_the_database_could_not_give_is_asked_for_again_later(
    store: Store, tenant: str, monkeypatch: Any
) -> None:
    from agent_jobs.queue import carried_rows

    harness, _ = _noop(store, tenant)
    harness.run_one()
    row = harness.publisher.queue[0].row
    assert row is not None
    rows = CarriedRows(store, 8192)
    real = store.signing_key
    monkeypatch.setattr(store, "signing_key", lambda name: (_ for _ in ()).throw(OSError("down")))
    assert rows.encode(row) is None  # the database is down: no row is carried
    monkeypatch.setattr(store, "signing_key", real)
    assert rows.encode(row) is None  # not asked again at once
    now = carried_rows.time.monotonic()
    monkeypatch.setattr(carried_rows.time, "monotonic", lambda: now + carried_rows.KEY_RETRY_S)
    assert rows.encode(row) is not None  # asked again later: carried
