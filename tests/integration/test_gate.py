"""Issue 5 on real Redis and the store (SQLite and Postgres): tenant caps hold, a dead holder's
slot comes back, parked tasks free their slot, the model cap defers without failing, and fair
share charges by cost."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.names import gate_provisional_key, gate_vt_key, tenant_inflight_key
from agent_jobs.core.states import Status
from agent_jobs.gateway import ModelCapSaturated, RedisModelSlots
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.queue.gate import GATE_HOLD, MODEL_CAP, GatePolicy, RedisGate
from agent_jobs.testing import Harness
from agent_jobs.workflows import default_registry
from agent_jobs.workflows.example import ExampleWorkflow
from agent_jobs.workflows.example_backend import ExampleBackend
from agent_jobs.workflows.noop import NoActions

pytestmark = pytest.mark.redis


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    p = f"gt{uuid.uuid4().hex[:8]}"
    yield p
    client = redis.Redis.from_url(redis_url)
    for key in client.scan_iter(f"{p}:*"):
        client.delete(key)


def _gate(redis_url: str, prefix: str, **policy: Any) -> RedisGate:
    return RedisGate(redis_url, prefix, GatePolicy(**policy))


def _noop(h: Harness, tenant: str, n: int, steps: int = 2) -> list[str]:
    return [
        h.submit(tenant, f"k{i}", TaskRequest(workflow="noop@1", input={"steps": steps})).id
        for i in range(n)
    ]


def test_a_tenant_at_its_cap_has_no_more_messages_out_and_the_rest_wait_held(
    store: Any, redis_url: str, prefix: str, tenant: str
) -> None:
    gate = _gate(redis_url, prefix, default_cap=2)
    h = Harness(store, default_registry(), gate=gate)
    ids = _noop(h, tenant, 8)
    # Two messages out, six held in the database: no worker would be occupied by them.
    assert len(h.publisher.queue) == 2
    assert sum(1 for t in ids if store.get(t).held_since is not None) == 6
    peak = 0
    while h.publisher.queue:
        peak = max(peak, gate.inflight(tenant))
        assert len({d.task_id for d in h.publisher.queue}) <= 2
        h.run_one()
    assert peak <= 2
    assert {store.get(t).status for t in ids} == {Status.COMPLETED}
    assert gate.inflight(tenant) == 0


def test_other_tenants_are_not_held_by_a_capped_one(
    store: Any, redis_url: str, prefix: str, tenant: str
) -> None:
    gate = _gate(redis_url, prefix, default_cap=1)
    h = Harness(store, default_registry(), gate=gate)
    _noop(h, tenant, 5)
    other = _noop(h, tenant + "x", 1)
    assert other[0] in {d.task_id for d in h.publisher.queue}


def test_a_dead_holders_gate_slot_comes_back(redis_url: str, prefix: str) -> None:
    gate = _gate(redis_url, prefix, default_cap=1, slot_ttl_s=300)
    assert gate.admit("acme", "task-of-a-dead-worker")
    assert not gate.admit("acme", "task-b")
    # The holder died: nobody releases. Its slot's expiry passes (moved in Redis, not slept).
    redis.Redis.from_url(redis_url).zadd(
        tenant_inflight_key(prefix, "acme"), {"task-of-a-dead-worker": 1}
    )
    assert gate.admit("acme", "task-b")


def test_a_dead_holders_model_slot_comes_back(redis_url: str, prefix: str) -> None:
    slots = RedisModelSlots(redis_url, prefix, limit=2, ttl_s=300)
    assert slots.acquire("w1:call") and slots.acquire("w2:call")
    assert not slots.acquire("w3:call") and slots.in_use() == 2
    client = redis.Redis.from_url(redis_url)
    client.zadd(f"{prefix}:model:slots", {"w1:call": 1})  # w1 died mid-call
    assert slots.acquire("w3:call")


def test_parked_tasks_free_their_slot(
    store: Any, redis_url: str, prefix: str, tenant: str, tmp_path: Any
) -> None:
    registry = WorkflowRegistry()
    registry.register(ExampleWorkflow(ExampleBackend(tmp_path / "ledger.db")))
    h = Harness(store, registry, gate=_gate(redis_url, prefix, default_cap=1))
    big = TaskRequest(
        workflow="example@1", input={"account": "a", "amount_minor": 500000, "reads": 0}
    )
    small = TaskRequest(
        workflow="example@1", input={"account": "b", "amount_minor": 100, "reads": 0}
    )
    parked = h.submit(tenant, "big", big).id
    other = h.submit(tenant, "small", small).id  # held: the tenant's one slot is taken
    assert store.get(other).held_since is not None
    h.run_until_idle()
    assert store.get(parked).status is Status.APPROVAL_WAIT  # waiting for a person, slot freed
    assert store.get(other).status is Status.COMPLETED


class _NeedsTheModel(NoActions):
    """A workflow whose decision needs a model-call slot."""

    name = "needs_model"
    version = 1

    def __init__(self, slots: RedisModelSlots) -> None:
        self.slots = slots

    def pinned(self) -> dict[str, Any]:
        return {}

    def start(self, inp: wf.StepInput) -> dict[str, Any]:
        return {}

    def decide(self, inp: wf.StepInput) -> wf.StepDecision:
        holder = f"{inp.task_id}:{uuid.uuid4().hex}"
        if not self.slots.acquire(holder):
            raise ModelCapSaturated("all model slots are in use")
        self.slots.release(holder)
        return wf.ToVerify(dict(inp.state))


def test_a_saturated_model_cap_defers_without_a_worker_or_a_failure(
    store: Any, redis_url: str, prefix: str, tenant: str
) -> None:
    slots = RedisModelSlots(redis_url, prefix, limit=1, ttl_s=300)
    registry = WorkflowRegistry()
    registry.register(_NeedsTheModel(slots))
    h = Harness(store, registry, model_slots=slots)
    assert slots.acquire("someone-else")  # the cap is saturated
    task = h.submit(tenant, "k", TaskRequest(workflow="needs_model@1")).id
    h.run_until_idle()
    held = store.get(task)
    assert held.status is Status.RUNNING and held.held_for == MODEL_CAP
    assert held.lease_owner is None and held.attempts == 0  # no worker held, not a failure
    assert store.held_ages(MODEL_CAP)[tenant][0] == 1  # the wait is visible
    slots.release("someone-else")
    assert h.sweepers.held() == 1
    h.run_until_idle()
    assert store.get(task).status is Status.COMPLETED


def test_fair_share_holds_back_the_tenant_that_spent_more(redis_url: str, prefix: str) -> None:
    gate = _gate(redis_url, prefix, fair_share=True, quantum_s=0.1)
    assert gate.admit("costly", "c1") and gate.admit("cheap", "p1")
    gate.release("costly", "c1", 1.0)  # ten times the cost of...
    gate.release("cheap", "p1", 0.1)
    assert gate.admit("cheap", "p2")  # ...the cheap tenant, which may go on
    assert not gate.admit("costly", "c2")  # while the costly one waits its turn
    for i in range(9):
        gate.release("cheap", f"p{i + 2}", 0.1)
        gate.admit("cheap", f"p{i + 3}")
    assert gate.admit("costly", "c2")  # equal cost consumed: its turn again


def test_weights_scale_the_share(redis_url: str, prefix: str) -> None:
    gate = _gate(redis_url, prefix, fair_share=True, quantum_s=0.1, weights={"gold": 4.0})
    assert gate.admit("gold", "g1") and gate.admit("basic", "b1")
    gate.release("gold", "g1", 0.4)  # 0.4 s at weight 4 counts as 0.1
    gate.release("basic", "b1", 0.1)
    assert gate.virtual_times()["gold"] == pytest.approx(0.1)
    assert gate.admit("gold", "g2")
    # Admitted steps are charged at once with the tenant's average cost, corrected at release.
    assert gate.virtual_times()["gold"] == pytest.approx(0.2)
    gate.release("gold", "g2", 0.0)
    assert gate.virtual_times()["gold"] == pytest.approx(0.1)


def test_held_tasks_are_pumped_by_the_sweeper_after_a_lost_release(
    store: Any, redis_url: str, prefix: str, tenant: str
) -> None:
    gate = _gate(redis_url, prefix, default_cap=1)
    h = Harness(store, default_registry(), gate=gate)
    first, second = _noop(h, tenant, 2)
    assert store.get(second).held_for == GATE_HOLD
    # The worker running `first` dies before releasing: its slot outlives it until it expires.
    h.publisher.queue.clear()
    redis.Redis.from_url(redis_url).zadd(tenant_inflight_key(prefix, tenant), {first: 1})
    assert h.sweepers.held() == 1
    assert [d.task_id for d in h.publisher.queue] == [second]


def test_a_slot_that_expired_is_settled_and_its_tenant_leaves_the_fair_share_queue(
    redis_url: str, prefix: str
) -> None:
    """Issue 29 item 5: a holder that died leaves an expired slot. Its provisional charge stands
    (the estimate is all anyone will learn of that step), its provisional record goes, and its
    tenant, with nothing in flight and nothing held, stops being backlogged: before, it stayed
    the lowest virtual time for ever and every other tenant was held one quantum past it."""
    client = redis.Redis.from_url(redis_url)
    gate = _gate(redis_url, prefix, fair_share=True, quantum_s=0.25)
    assert gate.admit("dead", "d0")
    gate.release("dead", "d0", 0.4)  # its steps cost 0.4 s: the next admission is charged that
    assert gate.admit("dead", "d1")
    charged = gate.virtual_times()["dead"]
    assert charged == pytest.approx(0.8)
    # d1's worker died: nobody releases it. Its slot's expiry passes (moved in Redis, not slept).
    client.zadd(tenant_inflight_key(prefix, "dead"), {"d1": 1})
    for i in range(4):  # another tenant works on, well past one quantum beyond "dead"
        assert gate.admit("live", f"l{i}"), f"step {i} of the live tenant was held"
        gate.release("live", f"l{i}", 0.5)
    assert gate.virtual_times()["live"] == pytest.approx(2.0)
    assert client.hget(gate_provisional_key(prefix), "dead|d1") is None
    assert gate.virtual_times()["dead"] == pytest.approx(charged)  # charged once, not refunded
    assert client.zscore(gate_vt_key(prefix), "dead") is None


def test_a_release_after_the_slot_expired_neither_charges_twice_nor_keeps_it_backlogged(
    redis_url: str, prefix: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    gate = _gate(redis_url, prefix, fair_share=True, quantum_s=0.25)
    assert gate.admit("slow", "s0")
    gate.release("slow", "s0", 0.4)
    assert gate.admit("slow", "s1")  # charged 0.4 on admission
    client.zadd(tenant_inflight_key(prefix, "slow"), {"s1": 1})  # ran past its slot's ttl
    assert gate.admit("slow", "s2")  # the tenant's next admission finds s1's slot expired
    gate.release("slow", "s1", 0.4)  # ... then s1 finishes: the charge made at admission stands
    gate.release("slow", "s2", 0.4)
    assert gate.virtual_times()["slow"] == pytest.approx(1.2)
    assert client.hget(gate_provisional_key(prefix), "slow|s1") is None
    assert client.zscore(gate_vt_key(prefix), "slow") is None
