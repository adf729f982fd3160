"""The dispatch gate: per-tenant concurrency caps and cost-weighted fair share, in Redis.

Every step message a publisher sends first asks the gate for a slot of its tenant. A slot is a
member (the task id) of the tenant's in-flight sorted set, scored by its expiry, so the slot of a
holder that died comes back by itself. Without a slot the task is *held* in the database (no
message, no worker occupied, nothing spinning) and released by the pump, oldest first, when a
step of a blocking tenant ends or the sweeper runs.

Operator pauses (`ops`: a tenant, a workflow, or everything) hold the same way, for the reason
`paused`: a task whose next step is due while a pause applies gets no message and occupies no
worker; steps already running finish. Turning the pause off releases the held tasks, oldest hold
first: at once in every process that hears of the change, and at the latest at the next sweep.

Fair share is start-time fair queueing, a form of deficit round robin by cost: each tenant's
virtual time is the step time it consumed divided by its weight; a tenant may dispatch while its
virtual time is within one quantum of the lowest among tenants with work (backlogged). A tenant
that was idle re-enters at the lowest virtual time, so idleness earns no credit. Step time is
the measure of cost because it is what a worker gives: model calls and tool calls included.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_jobs.core.holds import HoldReason
from agent_jobs.core.names import (
    gate_estimate_key,
    gate_held_key,
    gate_provisional_key,
    gate_vt_key,
    gate_vt_table_key,
    tenant_inflight_key,
)
from agent_jobs.gateway.slots import ModelSlots
from agent_jobs.ops.switches import Switch, Switches, SwitchSet
from agent_jobs.orchestrator.ports import Observer
from agent_jobs.redis_clients import client
from agent_jobs.store import Dispatch, Store

log = logging.getLogger(__name__)

TENANT_CAP = "tenant_cap"
FAIR_SHARE = "fair_share"
MODEL_CAP = HoldReason.MODEL_CAP.value  # held_for: a step deferred by the model-call cap

# Shared by both scripts. A slot that expired (its holder died, or ran past the slot's ttl) is
# settled: the provisional charge made when it was admitted stands as its cost (the estimate is
# all anyone will learn of that step; a release that comes later finds no slot and charges
# nothing), its provisional record goes, and a tenant left with nothing in flight and nothing
# held stops being backlogged. Without this a dead holder's tenant stayed the lowest virtual
# time for ever, and every other tenant was held one quantum past it.
# KEYS: inflight(T), backlogged vt zset, vt hash, held hash, estimate hash, provisional hash
_SETTLE = """
local function settle(inflight, tenant, now)
  local gone = redis.call('ZRANGEBYSCORE', inflight, '-inf', now)
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', inflight, '-inf', now)
    for i = 1, #gone do
      redis.call('HDEL', KEYS[6], tenant .. '|' .. gone[i])
    end
  end
  local held = tonumber(redis.call('HGET', KEYS[4], tenant) or '0')
  if redis.call('ZCARD', inflight) == 0 and held <= 0 then
    redis.call('ZREM', KEYS[2], tenant)
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: as _SETTLE
# ARGV: tenant, task id, slot ttl ms, cap, fair (0/1), quantum, weight, inflight key of tenant ""
# An admitted step is charged at once with the tenant's average step cost (corrected when it
# ends): otherwise a tenant could have several expensive steps admitted before any is charged.
# Before the lowest virtual time is read, the lowest backlogged tenants other than this one have
# their expired slots settled, up to eight per admission (each is settled once).
_ADMIT = (
    _SETTLE
    + """
settle(KEYS[1], ARGV[1], now)
if ARGV[5] == '1' then
  for _ = 1, 8 do
    local low = redis.call('ZRANGE', KEYS[2], 0, 0)
    if not low[1] or low[1] == ARGV[1] then
      break
    end
    settle(ARGV[8] .. low[1], low[1], now)
    if redis.call('ZSCORE', KEYS[2], low[1]) then
      break
    end
  end
end
local expiry = now + tonumber(ARGV[3])
if redis.call('ZSCORE', KEYS[1], ARGV[2]) then
  redis.call('ZADD', KEYS[1], expiry, ARGV[2])
  return 1
end
local cap = tonumber(ARGV[4])
if cap > 0 and redis.call('ZCARD', KEYS[1]) >= cap then
  return 0
end
if ARGV[5] == '1' then
  local vt = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '0')
  if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
    local low = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    if low[2] and vt < tonumber(low[2]) then
      vt = tonumber(low[2])
      redis.call('HSET', KEYS[3], ARGV[1], vt)
    end
    redis.call('ZADD', KEYS[2], vt, ARGV[1])
  end
  local low = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if vt > tonumber(low[2]) + tonumber(ARGV[6]) then
    return 0
  end
  local estimate = tonumber(redis.call('HGET', KEYS[5], ARGV[1]) or '0') / tonumber(ARGV[7])
  if estimate > 0 then
    vt = tonumber(redis.call('HINCRBYFLOAT', KEYS[3], ARGV[1], estimate))
    redis.call('ZADD', KEYS[2], vt, ARGV[1])
    redis.call('HSET', KEYS[6], ARGV[1] .. '|' .. ARGV[2], estimate)
  end
end
redis.call('ZADD', KEYS[1], expiry, ARGV[2])
return 1
"""
)

# KEYS: as _SETTLE
# ARGV: tenant, task id, cost (seconds), weight, fair (0/1)
# Returns the tenants with held work, lowest virtual time first (the pump's order).
_RELEASE = (
    _SETTLE
    + """
settle(KEYS[1], ARGV[1], now)
local removed = redis.call('ZREM', KEYS[1], ARGV[2])
if ARGV[5] == '1' and removed == 1 then
  local member = ARGV[1] .. '|' .. ARGV[2]
  local provisional = tonumber(redis.call('HGET', KEYS[6], member) or '0')
  redis.call('HDEL', KEYS[6], member)
  local cost = tonumber(ARGV[3])
  local old = tonumber(redis.call('HGET', KEYS[5], ARGV[1]) or '-1')
  if old < 0 then old = cost end
  redis.call('HSET', KEYS[5], ARGV[1], 0.7 * old + 0.3 * cost)
  local charge = cost / tonumber(ARGV[4]) - provisional
  local vt = tonumber(redis.call('HINCRBYFLOAT', KEYS[3], ARGV[1], charge))
  local held = tonumber(redis.call('HGET', KEYS[4], ARGV[1]) or '0')
  if redis.call('ZCARD', KEYS[1]) == 0 and held <= 0 then
    redis.call('ZREM', KEYS[2], ARGV[1])
  else
    redis.call('ZADD', KEYS[2], vt, ARGV[1])
  end
end
local held = redis.call('HGETALL', KEYS[4])
if #held == 0 then
  return {}
end
local waiting = {}
for i = 1, #held, 2 do
  if tonumber(held[i + 1]) > 0 then
    local score = redis.call('ZSCORE', KEYS[2], held[i]) or '0'
    table.insert(waiting, {tonumber(score), held[i]})
  end
end
table.sort(waiting, function(a, b) return a[1] < b[1] end)
local out = {}
for i = 1, #waiting do
  out[i] = waiting[i][2]
end
return out
"""
)


@dataclass(frozen=True)
class GatePolicy:
    """Caps and weights, from the settings. A cap of 0 means no cap."""

    default_cap: int = 0
    caps: Mapping[str, int] = field(default_factory=dict)
    fair_share: bool = False
    weights: Mapping[str, float] = field(default_factory=dict)
    quantum_s: float = 0.25
    slot_ttl_s: float = 300.0

    @property
    def enabled(self) -> bool:
        return self.fair_share or self.default_cap > 0 or any(c > 0 for c in self.caps.values())

    def cap(self, tenant_id: str) -> int:
        return self.caps.get(tenant_id, self.default_cap)

    def weight(self, tenant_id: str) -> float:
        return max(1e-6, self.weights.get(tenant_id, 1.0))


class RedisGate:
    def __init__(
        self, url: str, prefix: str, policy: GatePolicy, *, sentinel_master: str | None = None
    ) -> None:
        # Its scripts are `Script`s: after a failover the new primary's empty script cache
        # answers NOSCRIPT, and redis-py loads the script again.
        self._redis = client(url, master=sentinel_master)
        self.prefix = prefix
        self.policy = policy
        self._admit = self._redis.register_script(_ADMIT)
        self._release = self._redis.register_script(_RELEASE)

    def _keys(self, tenant_id: str) -> list[str]:
        p = self.prefix
        return [
            tenant_inflight_key(p, tenant_id),
            gate_vt_key(p),
            gate_vt_table_key(p),
            gate_held_key(p),
            gate_estimate_key(p),
            gate_provisional_key(p),
        ]

    def admit(self, tenant_id: str, task_id: str) -> bool:
        """A slot for this task's next step, or False: hold it."""
        pol = self.policy
        fair = 1 if pol.fair_share else 0
        ttl_ms = int(pol.slot_ttl_s * 1000)
        cap, weight = pol.cap(tenant_id), pol.weight(tenant_id)
        args: list[str | int | float] = [
            tenant_id, task_id, ttl_ms, cap, fair, pol.quantum_s, weight,
            tenant_inflight_key(self.prefix, ""),
        ]  # fmt: skip
        return bool(self._admit(keys=self._keys(tenant_id), args=args))

    def release(self, tenant_id: str, task_id: str, cost_s: float) -> list[str]:
        """Give the slot back, charging the step's cost; returns tenants with held work."""
        pol = self.policy
        args: list[str | int | float] = [
            tenant_id,
            task_id,
            max(0.0, cost_s),
            pol.weight(tenant_id),
            1 if pol.fair_share else 0,
        ]
        out: list[bytes] = self._release(keys=self._keys(tenant_id), args=args)
        return [t.decode() for t in out]

    def held(self, tenant_id: str, delta: int) -> None:
        self._redis.hincrby(gate_held_key(self.prefix), tenant_id, delta)

    def set_held(self, counts: Mapping[str, int]) -> None:
        """Make the held counts match the database (the sweeper's reconciliation)."""
        key = gate_held_key(self.prefix)
        pipe = self._redis.pipeline()
        pipe.delete(key)
        for tenant, n in counts.items():
            if n > 0:
                pipe.hset(key, tenant, n)
        pipe.execute()

    def set_held_one(self, tenant_id: str, n: int) -> None:
        self._redis.hset(gate_held_key(self.prefix), tenant_id, n)

    def drop(self, tenant_id: str, member: str) -> None:
        """Give back a slot without charging it (an unused pump reservation)."""
        self._redis.zrem(tenant_inflight_key(self.prefix, tenant_id), member)
        key = f"{tenant_id}|{member}"
        provisional = self._redis.hget(gate_provisional_key(self.prefix), key)
        if provisional is not None:  # refund the provisional charge of the admission
            self._redis.hdel(gate_provisional_key(self.prefix), key)
            self._redis.hincrbyfloat(gate_vt_table_key(self.prefix), tenant_id, -float(provisional))

    def swap(self, tenant_id: str, placeholder: str, task_id: str) -> None:
        """Turn a pump's reservation into the released task's slot."""
        key = tenant_inflight_key(self.prefix, tenant_id)
        prov = gate_provisional_key(self.prefix)
        score = self._redis.zscore(key, placeholder)
        charged = self._redis.hget(prov, f"{tenant_id}|{placeholder}")
        pipe = self._redis.pipeline()
        pipe.zrem(key, placeholder)
        pipe.zadd(key, {task_id: score if score is not None else 0})
        if charged is not None:  # the provisional charge follows the slot
            pipe.hdel(prov, f"{tenant_id}|{placeholder}")
            pipe.hset(prov, f"{tenant_id}|{task_id}", charged)
        pipe.execute()

    def inflight(self, tenant_id: str) -> int:
        return int(self._redis.zcard(tenant_inflight_key(self.prefix, tenant_id)))

    def virtual_times(self) -> dict[str, float]:
        rows: Any = self._redis.hgetall(gate_vt_table_key(self.prefix))
        return {k.decode(): float(v) for k, v in rows.items()}


GATE_HOLD = HoldReason.GATE.value  # held_for: a tenant at its cap, or ahead of its fair share
PAUSE_HOLD = HoldReason.PAUSED.value  # held_for: an operator paused a tenant, a workflow, or all


def paused_by(store: Store, switches: SwitchSet, dispatch: Dispatch) -> Switch | None:
    """The pause that applies to this task's next step, if any. Reads the task's workflow only
    when some pause names a workflow and could apply to its tenant."""
    if not switches.pauses_tenant(dispatch.tenant_id):
        return None
    found = switches.paused(dispatch.tenant_id)
    if found is not None or not switches.pauses_workflows():
        return found
    workflow = store.workflow_of(dispatch.task_id)
    return None if workflow is None else switches.paused(dispatch.tenant_id, workflow)


def release_paused(
    store: Store, switches: SwitchSet, publish: Callable[[Dispatch], None], batch: int = 100
) -> int:
    """Release tasks held by pauses that no longer apply, oldest hold first, through `publish`
    (the gate: a tenant at its cap is held again, for that reason). Safe in many processes at
    once: each held task is taken by one of them."""
    released = 0
    while True:
        free = [g for g in store.held_groups(PAUSE_HOLD) if switches.paused(*g) is None]
        if not free:
            return released
        taken = store.take_held_groups(PAUSE_HOLD, free, batch)
        if not taken:
            return released
        for dispatch in taken:
            publish(dispatch)
        released += len(taken)


class GatedDispatcher:
    """Sends step messages through the gate: admitted ones go out, the rest are held in the
    database; `finished` (the end of every step) releases the slot and pumps held work.

    The pump reserves a slot *before* taking a held task out of the database, so a tenant that
    is still at its cap costs one Redis call per pump, not two database writes.
    """

    def __init__(
        self,
        send: Callable[[Dispatch], None],
        store: Store,
        gate: RedisGate | None,
        model_slots: ModelSlots | None,
        observer: Observer,
        *,
        switches: Switches | None = None,
    ) -> None:
        self.send = send
        self.store = store
        self.gate = gate
        self.model_slots = model_slots
        self.observer = observer
        self.switches = switches
        on_change = getattr(switches, "on_change", None)
        if on_change is not None:
            # A pause turned off: let its tasks go now, not at the next sweep.
            on_change(lambda _old, new: self.release_paused(new))

    def publish(self, dispatch: Dispatch) -> None:
        if self.switches is not None:
            pause = paused_by(self.store, self.switches.current(), dispatch)
            if pause is not None:
                if self.store.hold(dispatch.task_id, PAUSE_HOLD):
                    self.observer.held(PAUSE_HOLD)
                return
        if self.gate is None or self.gate.admit(dispatch.tenant_id, dispatch.task_id):
            self.send(dispatch)
            return
        if self.store.hold(dispatch.task_id, GATE_HOLD):
            self.gate.held(dispatch.tenant_id, 1)
            self.observer.held(GATE_HOLD)

    def finished(self, task_id: str, tenant_id: str, seconds: float) -> None:
        if self.gate is not None:
            for waiting in self.gate.release(tenant_id, task_id, seconds):
                self.pump_tenant(waiting)
        if self.model_slots is not None:
            self.pump_model()

    def pump_tenant(self, tenant_id: str, limit: int = 100) -> int:
        assert self.gate is not None
        sent = 0
        while sent < limit:
            placeholder = f"pump:{uuid.uuid4().hex}"
            if not self.gate.admit(tenant_id, placeholder):
                break
            taken = self.store.take_held(GATE_HOLD, tenant_id=tenant_id, limit=1)
            if not taken:
                self.gate.drop(tenant_id, placeholder)
                self.gate.set_held_one(tenant_id, 0)
                break
            self.gate.swap(tenant_id, placeholder, taken[0].task_id)
            self.gate.held(tenant_id, -1)
            self.send(taken[0])
            sent += 1
        return sent

    def pump_model(self) -> int:
        """Steps deferred by a saturated model cap go back out (through the tenant gate)."""
        assert self.model_slots is not None
        free = self.model_slots.limit - self.model_slots.in_use()
        if free <= 0:
            return 0
        released = self.store.take_held(MODEL_CAP, limit=free)
        for dispatch in released:
            self.publish(dispatch)
        return len(released)

    def release_paused(self, switches: SwitchSet | None = None) -> int:
        """Held tasks whose pause was turned off go out again (through the gate)."""
        if switches is None:
            if self.switches is None:
                return 0
            switches = self.switches.current()
        return release_paused(self.store, switches, self.publish)

    def sweep(self) -> int:
        """The sweeper's pass: make the held counts match the database, then pump everything
        (slots of dead holders have expired by now, and fair-share positions moved on), and
        release what a pause that was turned off still holds (a missed notification)."""
        moved = self.release_paused()
        if self.gate is not None:
            counts = {t: n for t, (n, _) in self.store.held_ages(GATE_HOLD).items()}
            self.gate.set_held(counts)
            for tenant in counts:
                moved += self.pump_tenant(tenant)
        if self.model_slots is not None:
            moved += self.pump_model()
        return moved
