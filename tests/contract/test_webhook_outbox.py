"""The webhook outbox on SQLite and Postgres: an event row exists exactly when the transition
that caused it committed, for the tenant's subscribed endpoints only, with the redaction rule."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from agent_jobs.core.errors import StaleTransition
from agent_jobs.core.park import PARK_KEY, THROTTLES_KEY, Park, ParkReason
from agent_jobs.store import Lease, Store
from agent_jobs.store.guard import Guard
from agent_jobs.store.schema import webhook_deliveries
from agent_jobs.store.webhook_outbox import PRESENCE, plan
from agent_jobs.store.webhooks import WebhookStore
from tests.contract.support import (
    S,
    action,
    count,
    failing_statement,
    park_for_approval,
    running,
    to,
)


def _endpoint(store: Store, tenant: str, *types: str) -> str:
    ws = WebhookStore(store.engine)
    return ws.create_endpoint(tenant, "https://hooks.example.com/x", list(types), "", "whsec_AA").id


def verifying(store: Store, tenant: str) -> Lease:
    """A task in VERIFYING, leased: its next commit may complete it."""
    lease = running(store, tenant)
    result = store.transition(Guard.lease(lease), to(S.VERIFYING, "drafted", keep_lease=True))
    assert result.lease is not None
    return result.lease


def _bodies(store: Store, task_id: str) -> list[tuple[str, str, dict]]:  # type: ignore[type-arg]
    d = webhook_deliveries
    q = select(d.c.endpoint_id, d.c.event_type, d.c.body).where(d.c.task_id == task_id)
    with store.engine.connect() as conn:
        return [(e, t, json.loads(b)) for e, t, b in conn.execute(q.order_by(d.c.id))]


def test_no_endpoint_writes_nothing_and_plans_nothing(store: Store, tenant: str) -> None:
    """The cheap path: a tenant without an endpoint plans no outbox (the write stays one
    statement) and gets no row; a read step's patch is not even looked at."""
    lease = verifying(store, tenant)
    assert plan(store.engine, lease.task, to(S.COMPLETED, "verified")) is None
    store.transition(Guard.lease(lease), to(S.COMPLETED, "verified"))
    assert count(store, webhook_deliveries) == 0


def test_finished_task_writes_one_row_per_subscribed_endpoint(store: Store, tenant: str) -> None:
    wants = _endpoint(store, tenant, "task.completed", "task.failed")
    _endpoint(store, tenant, "approval.requested")  # not subscribed to completions
    _endpoint(store, tenant + "x", "task.completed")  # another tenant's
    lease = verifying(store, tenant)
    store.transition(Guard.lease(lease), to(S.COMPLETED, "verified"))
    rows = _bodies(store, lease.task_id)
    assert [(e, t) for e, t, _ in rows] == [(wants, "task.completed")]
    body = rows[0][2]
    assert body["type"] == "task.completed"
    assert body["data"]["task_id"] == lease.task_id
    assert body["data"]["status"] == "COMPLETED"
    assert body["data"]["links"]["task"] == f"/v1/tasks/{lease.task_id}"
    assert "input" not in body["data"]


def test_stale_transition_writes_no_event(store: Store, tenant: str) -> None:
    _endpoint(store, tenant, "task.escalated")
    lease = running(store, tenant)
    store.transition(Guard.lease(lease), to(S.RUNNING, "read", keep_lease=True))
    with pytest.raises(StaleTransition):
        store.transition(Guard.lease(lease), to(S.ESCALATED, "gave_up"))
    assert count(store, webhook_deliveries) == 0


def test_failed_outbox_write_rolls_back_the_transition(store: Store, tenant: str) -> None:
    """One transaction: when the outbox insert fails, the status change is not there either."""
    _endpoint(store, tenant, "task.completed")
    lease = verifying(store, tenant)
    with (
        failing_statement(store, "INSERT INTO webhook_deliveries"),
        pytest.raises(RuntimeError, match="injected"),
    ):
        store.transition(Guard.lease(lease), to(S.COMPLETED, "verified"))
    assert store.get(lease.task_id).status is S.VERIFYING
    assert count(store, webhook_deliveries) == 0


def test_approval_requested_carries_what_an_approver_needs_and_no_arguments(
    store: Store, tenant: str
) -> None:
    _endpoint(store, tenant, "approval.requested")
    lease = running(store, tenant)
    act = action(amount=250_000)
    store.transition(Guard.lease(lease), park_for_approval(act, "apr_1"))
    [(_, kind, body)] = _bodies(store, lease.task_id)
    data = body["data"]
    assert kind == "approval.requested"
    assert data["approval_id"] == "apr_1"
    assert data["action"] == {
        "tool": "refunds.create",
        "tool_version": "2",
        "amount_minor": 250_000,
        "currency": "EUR",
    }
    assert data["policy_reason"] == "over the auto-approve limit"
    assert data["links"]["approval"] == "/v1/approvals/apr_1"
    assert "pay_1" not in json.dumps(body)  # an argument that is not the amount never goes


def test_dead_letter_from_a_sweeper_writes_its_event(store: Store, tenant: str) -> None:
    """A transition outside `Store.transition` (a sweeper's, in its own transaction) records
    its events too."""
    _endpoint(store, tenant, "task.dead_lettered", "task.failed")
    lease = running(store, tenant)
    store.transition(
        Guard.lease(lease), to(S.FAILED, "attempts_exhausted", dead_letter="boom", attempts=5)
    )
    kinds = sorted(t for _, t, _ in _bodies(store, lease.task_id))
    assert kinds == ["task.dead_lettered", "task.failed"]


def test_a_disabled_endpoint_gets_no_event(store: Store, tenant: str) -> None:
    endpoint = _endpoint(store, tenant, "task.completed")
    WebhookStore(store.engine).update_endpoint(tenant, endpoint, enabled=False)
    lease = verifying(store, tenant)
    store.transition(Guard.lease(lease), to(S.COMPLETED, "verified"))
    assert count(store, webhook_deliveries) == 0


def test_presence_is_cached_and_forgotten_on_registration(store: Store, tenant: str) -> None:
    """Registration in this process is seen at once (its own cache forgets); the answer is
    otherwise kept, so the hot path does not query per transition."""
    lease = verifying(store, tenant)
    assert not PRESENCE.has(store.engine, tenant)
    queries: list[str] = []
    from sqlalchemy import event

    def seen(*args: object) -> None:
        queries.append(str(args[2]))

    event.listen(store.engine, "before_cursor_execute", seen)
    try:
        for _ in range(5):
            assert plan(store.engine, lease.task, to(S.COMPLETED, "verified")) is None
    finally:
        event.remove(store.engine, "before_cursor_execute", seen)
    assert not [q for q in queries if "webhook_endpoints" in q]
    _endpoint(store, tenant, "task.completed")
    assert plan(store.engine, lease.task, to(S.COMPLETED, "verified")) is not None


def test_on_the_steps_own_connection_the_event_is_atomic_too(store: Store, tenant: str) -> None:
    """A step commits on its own connection (Postgres: each statement by itself): with an event
    to record, the transition still lands with its row or not at all."""
    _endpoint(store, tenant, "task.completed")
    lease = verifying(store, tenant)
    with (
        pytest.raises(RuntimeError, match="injected"),
        store.step_conn() as conn,
        failing_statement(store, "INSERT INTO webhook_deliveries"),
    ):
        store.transition(Guard.lease(lease), to(S.COMPLETED, "verified"), conn=conn)
    assert store.get(lease.task_id).status is S.VERIFYING
    with store.step_conn() as conn:
        store.transition(Guard.lease(lease), to(S.COMPLETED, "verified"), conn=conn)
    assert [t for _, t, _ in _bodies(store, lease.task_id)] == ["task.completed"]


def _parked(reason: ParkReason, count: int, detail: str) -> dict:  # type: ignore[type-arg]
    """A task's state as a park writes it: the park entry and its throttle counter."""
    park = Park.of(reason, detail).entry()
    return {"runtime": {PARK_KEY: park, THROTTLES_KEY: {"count": count, "waited_s": 0.0}}}


def test_a_levers_park_is_announced_once_not_at_every_poll(store: Store, tenant: str) -> None:
    """A lever (stop-effects, read-only, a disabled tool) parks the effect and re-parks it at
    every poll while it holds: only the first park is an event. A lever's park is known by its
    park reason (HELD_BY_OPERATOR), never by other fields of the patch."""
    _endpoint(store, tenant, "task.parked_by_operator")
    lease = running(store, tenant)
    detail = "effects_stopped: effects stopped by operator"
    held = _parked(ParkReason.HELD_BY_OPERATOR, 1, detail)
    result = store.transition(
        Guard.lease(lease),
        to(S.RETRY_WAIT, "effect_throttled", data={"count": 1}, state=held, wake_in_s=0.0),
    )
    assert [t for _, t, _ in _bodies(store, lease.task_id)] == ["task.parked_by_operator"]
    assert _bodies(store, lease.task_id)[0][2]["data"]["reason"] == detail
    assert result.task is not None
    again = store.claim(lease.task_id, "worker-a:1", 30.0)
    assert again is not None
    store.transition(
        Guard.lease(again),
        to(S.RETRY_WAIT, "effect_throttled",
           state=_parked(ParkReason.HELD_BY_OPERATOR, 2, detail), wake_in_s=1.0),
    )  # fmt: skip
    assert len(_bodies(store, lease.task_id)) == 1


def test_a_providers_throttle_is_no_levers_park(store: Store, tenant: str) -> None:
    """A provider's 429 parks the same way with another reason: no event, whatever the patch's
    data says (the previous code read `by_operator` there)."""
    _endpoint(store, tenant, "task.parked_by_operator")
    lease = running(store, tenant)
    throttled = _parked(ParkReason.THROTTLED, 1, "429 Too Many Requests")
    store.transition(
        Guard.lease(lease),
        to(S.RETRY_WAIT, "effect_throttled", data={"by_operator": True, "count": 1},
           state=throttled, wake_in_s=1.0),
    )  # fmt: skip
    assert _bodies(store, lease.task_id) == []
