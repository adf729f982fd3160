"""The hot path's prepared statements on Postgres: prepared once per connection, kept across
rollbacks, prepared again on a replaced connection, and the same results as the plain
statements (which `AGENT_JOBS_PG_PREPARE=0` selects)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, select
from sqlalchemy.exc import DBAPIError

from agent_jobs.core.contracts import Action, TaskRequest
from agent_jobs.core.errors import StaleTransition
from agent_jobs.core.patch import EffectWrite, Patch
from agent_jobs.core.states import Status
from agent_jobs.core.text import clean_text
from agent_jobs.store import Lease, Store
from agent_jobs.store.backend import prepared
from agent_jobs.store.guard import Guard
from agent_jobs.store.schema import approvals, effects
from agent_jobs.testing import TEST_SETTINGS, Harness
from agent_jobs.workflows import default_registry
from tests.contract.support import action, claim, intent, new_task, park_for_approval, running


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
        # No step reads: the submit hands the new row to the first step, and each quick
        # commit its row to the next quick step.
        used = {"aj_cas_pinned"}
        assert reads == 0
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


def test_a_statement_whose_result_type_a_migration_changed_is_prepared_again(tenant: str) -> None:
    """A migration that changes the type of a column a prepared statement returns makes the
    statement fail with SQLSTATE 0A000 ("cached plan must not change result type"): that
    transaction fails, the next one deallocates and prepares again instead of failing until
    the worker restarts. On a database of its own: the migration is not undone."""
    from agent_jobs.store.migrate import upgrade
    from tests.conftest import new_database

    with new_database() as url:
        store = Store.from_url(url)
        try:
            upgrade(store.engine)
            _, task_id = _noop(store, tenant)
            with store.tx() as conn:
                assert store.peek_claimable(conn, task_id) is not None
            with store.engine.begin() as conn:
                conn.exec_driver_sql("ALTER TABLE tasks ALTER COLUMN attempts TYPE bigint")
            with pytest.raises(DBAPIError) as failed, store.tx() as conn:
                store.peek_claimable(conn, task_id)
            assert getattr(failed.value.orig, "pgcode", None) == "0A000"
            for _ in range(2):  # recovered, and stays so
                with store.tx() as conn:
                    assert store.peek_claimable(conn, task_id) is not None
        finally:
            store.dispose()


def _approval_and_effect(
    store: Store, tenant: str, *, lean: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """An action parked for approval (with a NUL and a lone surrogate in its reason and args:
    the content rule cleans what either path writes), granted, used by its intent, then
    committed: the approval's and the effect's rows as those four statements leave them."""
    base = action(key=f"refund:{tenant}:pay_1")
    act = Action(**{**base.model_dump(), "args": {**base.args, "note": "a\x00b\ud800c"}})
    lease = running(store, tenant)
    parked = park_for_approval(act, f"apr_{tenant}")
    parked = replace(
        parked,
        approval_request=replace(parked.approval_request, reason="over\x00 the \ud800limit"),
    )

    # Lean, the approval rides in the compare-and-set's statement; else a statement of its own.
    def commit(lease: Lease, patch: Patch) -> None:
        store.transition(Guard.lease(lease), patch, returning=not lean)

    commit(lease, parked)
    store.decide_approval(f"apr_{tenant}", "usr_lead", grant=True, note="ok\x00")
    woken = store.get(lease.task_id)
    assert woken.next_attempt_at is not None and woken.dispatched_at is not None
    (decided,) = [e for e in store.events(lease.task_id) if e.type == "approval_granted"]
    assert decided.data["note"] == "ok\ufffd" and decided.from_status == "APPROVAL_WAIT"
    lease = claim(store, lease.task_id)
    lease = store.transition(Guard.lease(lease), intent(act, f"apr_{tenant}")).lease
    assert lease is not None
    done = EffectWrite(act, "committed", {"refund_id": "rf_1", "odd": "\x00\ud800"})
    commit(lease, Patch(to=Status.RUNNING, event="effect_committed", effect=done))
    with store.tx() as conn:
        approval = conn.execute(select(approvals).where(approvals.c.task_id == lease.task_id))
        effect = conn.execute(select(effects).where(effects.c.task_id == lease.task_id))
        rows = dict(approval.one()._mapping), dict(effect.one()._mapping)
    for row in rows:
        assert all(isinstance(v, datetime) for k, v in row.items() if k.endswith("_at") and v)
        for k in ("id", "task_id", "tenant_id", "idempotency_key"):
            row.pop(k, None)
        for k in ("created_at", "updated_at", "expires_at", "decided_at", "used_at"):
            row[k] = row.get(k) is not None
    return rows


@pytest.mark.parametrize("lean", [True, False], ids=["riding", "own-statements"])
def test_the_approval_and_effect_records_are_the_same_prepared_or_not(
    pg_store: Store, tenant: str, monkeypatch: pytest.MonkeyPatch, lean: bool
) -> None:
    with statements(pg_store) as seen:
        on = _approval_and_effect(pg_store, tenant, lean=lean)
    ran = {s.split()[1].split("(")[0] for s in seen if s.startswith("EXECUTE")}
    # The intent and the approval's use ride in the intent's compare-and-set (a transaction).
    assert {"aj_cas_intent_used", "aj_decide_approval"} <= ran
    assert not {"aj_approval_used", "aj_effect_intent"} & ran
    if lean:
        assert {"aj_cas_lean_approval", "aj_cas_lean_effect"} <= ran
    else:
        assert {"aj_approval_request", "aj_effect_outcome"} <= ran
    monkeypatch.setattr(prepared, "enabled", lambda: False)
    with statements(pg_store) as seen:
        off = _approval_and_effect(pg_store, tenant + "-off", lean=lean)
    assert not any(s.startswith(("EXECUTE", "PREPARE")) for s in seen)
    assert on == off
    approval, effect = on
    assert approval["status"] == "used" and approval["reason"] == "over\ufffd the \ufffdlimit"
    assert approval["args"]["note"] == "a\ufffdb\ufffdc" and approval["requester_principal"]
    assert effect["status"] == "committed" and effect["attempts"] == 1
    assert effect["result"] == {"refund_id": "rf_1", "odd": "\ufffd\ufffd"}


def test_the_clock_read_with_an_approval_is_the_databases(pg_store: Store, tenant: str) -> None:
    lease = running(pg_store, tenant)
    pg_store.transition(Guard.lease(lease), park_for_approval(action(), f"apr_{tenant}"))
    view, now = pg_store.approval_at_now(f"apr_{tenant}")
    assert view.status == "pending" and view.expires_at > now >= view.created_at
    assert now.utcoffset() == timedelta(0)


@pytest.mark.parametrize("on", [True, False], ids=["prepared", "plain"])
def test_a_claim_alone_commits_without_waiting_for_the_disk(
    pg_store: Store, tenant: str, on: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim's transaction turns `synchronous_commit` off for itself only: the transaction
    that commits the step's transition (and any other) still waits for its flush."""
    monkeypatch.setattr(prepared, "enabled", lambda: on)

    def setting(conn: Any) -> str:
        return str(conn.exec_driver_sql("SHOW synchronous_commit").scalar_one())

    with pg_store.tx() as conn:
        default = setting(conn)
    assert default != "off"
    task_id = new_task(pg_store, tenant).id
    with pg_store.tx() as conn:
        lease = pg_store.claim(task_id, "w-a:1", 30.0, conn=conn)
        assert lease is not None and setting(conn) == "off"
    with pg_store.tx() as conn:
        assert setting(conn) == default
    done = pg_store.transition(
        Guard.lease(lease), Patch(to=Status.RUNNING, event="started", keep_lease=True)
    )
    assert done.lease is not None
    with pg_store.tx() as conn:
        assert setting(conn) == default
        task = pg_store.peek_claimable(conn, task_id)
    assert task is None  # leased: the claim landed, and so did the transition
    assert pg_store.get(task_id).status is Status.RUNNING


@pytest.mark.parametrize("ride", ["approval", "effect"])
def test_a_stale_compare_and_set_writes_nothing_that_rides_in_it(
    store: Store, tenant: str, ride: str
) -> None:
    """The record that rides in a lean commit (an approval asked for, an effect's outcome) is
    written only if the compare-and-set matched: on a lost lease neither it nor the transition
    lands, on either backend."""
    act = action(key=f"refund:{tenant}:pay_1")
    lease = running(store, tenant)
    if ride == "effect":
        lease = store.transition(Guard.lease(lease), intent(act)).lease
        assert lease is not None
        patch = Patch(
            to=Status.RUNNING, event="effect_committed", effect=EffectWrite(act, "committed", {})
        )
    else:
        patch = park_for_approval(act, f"apr_{tenant}")
    stale = replace(lease, epoch=lease.epoch + 1)
    with pytest.raises(StaleTransition):
        store.transition(Guard.lease(stale), patch, returning=False)
    assert store.get(lease.task_id).status is lease.task.status
    assert [e.status for e in store.effects(lease.task_id)] == (
        ["intent"] if ride == "effect" else []
    )
    assert store.list_approvals(tenant) == []
    store.transition(
        Guard.lease(lease), patch, returning=False
    )  # the lease's own commit: both land
    if ride == "effect":
        assert [e.status for e in store.effects(lease.task_id)] == ["committed"]
    else:
        assert [a.approval_id for a in store.list_approvals(tenant)] == [f"apr_{tenant}"]


@pytest.mark.parametrize("on", [True, False])
def test_a_new_task_and_its_created_event_are_one_statement(
    pg_store: Store, tenant: str, on: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Postgres the row, its "created" event and its dispatch record are written by one
    statement (no BEGIN, no COMMIT), prepared or not; a repeated key writes nothing more."""
    monkeypatch.setattr(prepared, "enabled", lambda: on)
    request = TaskRequest(workflow="noop@1", input={"steps": 1, "note": "a\x00b"})
    with statements(pg_store) as seen:
        made = pg_store.create_or_get(tenant, "k-one", request, requester="svc\x00-a")
    writes = [s for s in seen if not s.startswith("PREPARE")]
    assert len(writes) == 1
    assert "INSERT INTO tasks" in prepared.sql_of(writes[0])
    task = pg_store.get(made.task.id)
    assert made.created and made.task == task
    assert (task.status, task.version, task.event_seq, task.requester) == (
        Status.RECEIVED,
        1,
        1,
        clean_text("svc\x00-a"),
    )
    assert task.dispatched_at is not None and task.created_at is not None
    (created,) = pg_store.events(task.id)
    assert (created.seq, created.type, created.to_status) == (1, "created", Status.RECEIVED)
    assert created.data == {"workflow": "noop@1", "requester": task.requester}
    assert created.at == task.created_at  # the same statement's clock
    again = pg_store.create_or_get(tenant, "k-one", request, requester="svc")
    assert not again.created and again.task.id == task.id
    assert len(pg_store.events(task.id)) == 1
