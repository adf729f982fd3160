"""Invariant 1 for a commit from a carried row (`Guard.carried`, queue/carried_rows.py): the
compare-and-set and every record that moves with the status are one transaction, whichever
statement the backend picks for the pinned guard. Runs on SQLite and Postgres.

Defect D3 of issue 29: on Postgres the connection was chosen for a one-statement write (the CAS
with the record riding in it, on the step's autocommit connection) while the compare-and-set,
seeing the pinned guard, wrote the row alone and left the record to a second statement; the two
committed separately, so a failure between them left the status moved without its record.
"""

from __future__ import annotations

import pytest

from agent_jobs.core.patch import EffectWrite, Patch
from agent_jobs.store import Store, TaskRow
from agent_jobs.store.guard import Guard
from agent_jobs.store.schema import approvals, effects
from tests.contract.support import (
    S,
    action,
    claim,
    count,
    failing_statement,
    n_events,
    new_task,
    park_for_approval,
    to,
)


def _carried(store: Store, tenant: str) -> TaskRow:
    """A RUNNING task with no lease, as a quick step's commit returns it to the next message."""
    task = new_task(store, tenant)
    lease = claim(store, task.id)
    store.transition(Guard.lease(lease), to(S.RUNNING, "started"))
    row = store.get(task.id)
    assert row.status is S.RUNNING and row.lease_owner is None
    return row


def _approval(row: TaskRow) -> tuple[Patch, str, object]:
    return park_for_approval(action(), f"apr_{row.id}"), "INSERT INTO approvals", approvals


def _outcome(row: TaskRow) -> tuple[Patch, str, object]:
    patch = to(S.RUNNING, "effect_checked", effect=EffectWrite(action(), "committed", {"ok": 1}))
    return patch, "UPDATE effects", effects


@pytest.mark.parametrize("make", [_approval, _outcome], ids=["approval_request", "effect_outcome"])
@pytest.mark.parametrize("on_step_conn", [True, False], ids=["step_conn", "own_conn"])
@pytest.mark.parametrize("returning", [False, True], ids=["lean", "returning"])
def test_a_carried_commit_and_its_record_land_together_or_not_at_all(
    store: Store, tenant: str, make: object, on_step_conn: bool, returning: bool
) -> None:
    row = _carried(store, tenant)
    patch, fragment, table = make(row)  # type: ignore[operator]
    events = n_events(store, row.id)
    if table is effects:  # the outcome updates the intent's row: give it one
        with store.tx() as conn:
            store.backend.insert_intent(conn, row.id, action())
    records = count(store, table, task_id=row.id)  # type: ignore[arg-type]

    def commit() -> None:
        guard = Guard.carried(row)
        if on_step_conn:
            with store.step_conn() as conn:
                store.transition(guard, patch, conn=conn, actor="w", returning=returning)
        else:
            store.transition(guard, patch, actor="w", returning=returning)

    # The record's own statement fails after the compare-and-set ran: nothing may stay.
    with failing_statement(store, fragment), pytest.raises(RuntimeError):
        commit()
    assert store.get(row.id) == row, "the compare-and-set landed without its record"
    assert n_events(store, row.id) == events
    assert count(store, table, task_id=row.id) == records  # type: ignore[arg-type]

    # And without the failure both land, once.
    commit()
    after = store.get(row.id)
    assert (after.status, after.version) == (patch.to, row.version + 1)
    assert n_events(store, row.id) == events + 1
    if table is approvals:
        assert count(store, approvals, task_id=row.id) == 1
    else:
        (effect,) = store.effects(row.id)
        assert effect.status == "committed"
