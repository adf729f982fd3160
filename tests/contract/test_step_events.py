"""A step's own events (model calls, tool audit records) are written with its transition, in the
same transaction, on both backends: a read step costs one commit, not one per call. What a step
recorded is never lost by the step ending otherwise (no transition, a failure, a stale commit),
and while an effect is in flight the audit record is written at once."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import select, text

from agent_jobs.core.contracts import Action
from agent_jobs.core.states import Status
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.store.schema import task_events
from tests.contract.test_step_failures import Boom, Scripted, events, raises, run

S = Status


def _reading(calls: int, *, wait_s: float = 0.0) -> Any:
    """A decide hook that, on its read, records `calls` events (as the model gateway and the
    tool executor do) and then observes."""

    def decide(self: Scripted, i: wf.StepInput) -> wf.StepDecision:
        if i.state.get("phase") == "read":
            for n in range(calls):
                i.emit("chat", {"n": n, "text": "ünïcode\x00 kept as data"})
            time.sleep(wait_s)
            return wf.Observe({**i.state, "phase": "act"})
        if i.state.get("phase") == "act":
            return wf.Act(
                Action(tool="ledger.pay", tool_version="1", args={}, idempotency_key="k"),
                {**i.state, "phase": "done"},
            )
        return wf.ToVerify(i.state)

    return decide


def test_a_steps_events_land_with_its_transition_in_order(store: Any, tenant: str) -> None:
    h, task = run(store, tenant, Scripted(decide=_reading(3)))
    final = h.settle(task.id)
    assert final.status is S.COMPLETED
    evs = store.events(task.id)
    chats = [e for e in evs if e.type == "chat"]
    assert [e.data["n"] for e in chats] == [0, 1, 2]
    assert chats[0].data["text"] == "ünïcode\ufffd kept as data"
    observed = next(e for e in evs if e.type == "observed")
    # Written first, with consecutive sequence numbers just before the read's transition.
    assert [e.seq for e in chats] == [observed.seq - 3, observed.seq - 2, observed.seq - 1]
    assert all(e.from_status == "RUNNING" and e.to_status is None for e in chats)
    assert [e.seq for e in evs] == list(range(1, len(evs) + 1)), "no gaps, no duplicates"
    if store.backend.name == "postgresql":
        # One transaction: the rows share the inserting transaction's id.
        with store.engine.connect() as conn:
            xids = conn.execute(
                text(
                    "SELECT DISTINCT xmin::text FROM task_events WHERE task_id = :t "
                    "AND seq BETWEEN :a AND :b"
                ),
                {"t": task.id, "a": chats[0].seq, "b": observed.seq},
            ).all()
        assert len(xids) == 1


def test_a_held_event_is_dated_when_it_happened(store: Any, tenant: str) -> None:
    h, task = run(store, tenant, Scripted(decide=_reading(1, wait_s=0.3)))
    h.settle(task.id)
    evs = store.events(task.id)
    chat = next(e for e in evs if e.type == "chat")
    observed = next(e for e in evs if e.type == "observed")
    assert (observed.at - chat.at).total_seconds() >= 0.2


def test_events_of_a_step_that_fails_are_kept_with_the_failed_attempt(
    store: Any, tenant: str
) -> None:
    def start(self: Scripted, i: wf.StepInput) -> dict[str, Any]:
        i.emit("chat", {"n": self.calls["start"]})
        raise Boom("after the model answered")

    def decide(self: Scripted, i: wf.StepInput) -> wf.StepDecision:
        i.emit("chat", {"n": 0})
        raise Boom("after the model answered")

    h, task = run(store, tenant, Scripted(start=start))
    h.run_until_idle()
    names = events(store, task.id)
    assert names[names.index("chat") + 1] == "step_failed"  # the orchestrator's failure path
    h, task = run(store, f"{tenant}x", Scripted(decide=decide))
    h.run_until_idle()
    names = events(store, task.id)
    assert names[names.index("chat") + 1] == "retry_scheduled"  # the decide hook's own


def test_events_of_a_step_that_makes_no_transition_are_written(store: Any, tenant: str) -> None:
    """A held approval step finds nothing decided: no transition, but what it recorded stays."""

    def authorize(self: Scripted, i: wf.StepInput, a: Action) -> wf.Authorization:
        i.emit("policy_read", {"n": 1})
        return wf.Authorization("needs_approval", "P@1")

    h, task = run(store, tenant, Scripted(authorize=authorize))
    h.run_until_idle()
    assert store.get(task.id).status is S.APPROVAL_WAIT
    before = events(store, task.id).count("policy_read")
    h.make_due(task.id)  # the approval step runs again and finds it still pending
    h.run_until_idle()
    assert store.get(task.id).status is S.APPROVAL_WAIT
    assert events(store, task.id).count("policy_read") >= before >= 1


def test_events_of_a_stale_step_are_kept_beside_the_dropped_result(store: Any, tenant: str) -> None:
    holder: dict[str, Any] = {}

    def decide(self: Scripted, i: wf.StepInput) -> wf.StepDecision:
        if i.state.get("phase") != "read":
            return wf.ToVerify(i.state)
        i.emit("chat", {"n": 1})
        h = holder["h"]
        h.expire_lease(i.task_id)
        assert h.store.claim(i.task_id, "another-worker", 30) is not None  # it moves on
        return wf.Observe({**i.state, "phase": "act"})

    h, task = run(store, tenant, Scripted(decide=decide))
    holder["h"] = h
    h.run_until_idle()
    names = events(store, task.id)
    assert "chat" in names and "late_result_dropped" in names
    assert "observed" not in names, "the zombie's transition did not land"


def test_an_audit_record_while_an_effect_is_in_flight_is_written_at_once(
    store: Any, tenant: str
) -> None:
    seen: list[int] = []

    def execute(self: Scripted, i: wf.StepInput, a: Action) -> wf.EffectOutcome:
        i.emit("execute_tool ledger.pay", {"sent": True})
        with store.engine.connect() as conn:
            rows = conn.execute(
                select(task_events.c.seq).where(
                    (task_events.c.task_id == i.task_id)
                    & (task_events.c.type == "execute_tool ledger.pay")
                )
            ).all()
        seen.append(len(rows))
        return wf.EffectApplied({"ref": "r1"})

    h, task = run(store, tenant, Scripted(execute=execute))
    assert h.settle(task.id).status is S.COMPLETED
    assert seen == [1], "durable before the step's own commit"


def test_a_hook_that_raises_before_recording_leaves_nothing_behind(store: Any, tenant: str) -> None:
    h, task = run(store, tenant, Scripted(decide=raises(Boom("no calls made"))))
    h.run_until_idle()
    assert "chat" not in events(store, task.id)
