"""The ready ring: which tenant queues hold a message, in the order they are served.

kombu's Redis transport serves many queues with one BRPOP over all of them, so each fetch costs
a worker (and Redis) time in proportion to the tenants it consumes: at 500 active tenants a
worker spent half its time on the fetch. The ring makes the fetch independent of the number of
tenants. Beside the tenant lists (unchanged: kombu's wire format, `LLEN` for Flower and the
metrics, `LPUSH` to publish, the oldest message at the right) Redis holds:

- the ring, a list of the tenant queues that hold a message, each once (its members set says
  which are in it); a worker takes from its right end and a queue that still holds messages goes
  back to its left end: round robin over tenants with work, one step per turn, as kombu's queue
  cycle served them, however deep one tenant's backlog is;
- a doorbell list, one token per published message (trimmed to a few), which an idle worker
  waits on with `BRPOP` together with its other queues (sweeps, submissions).

Publishing (`PUSH`) and taking (`TAKE`) are Lua scripts, each one atomic step, so "in the ring"
and "holds a message" cannot disagree because of a crash between two commands: a take that
pops the last message of a queue takes it out of the ring in the same step. What could still
strand a message (a message pushed by a client that does not know the ring, such as the code
of an older release) is repaired by `ENROLL`, which the workers run for the tenants they know
when they start and at every database re-read of their tenant sync (`queue/consumers.py`).

Fairness beyond turn-taking is not the ring's business: caps, held tenants and cost-weighted
shares are decided before a message is published (`queue/gate.py`), admission at the API.

The scripts name the tenant queues they touch by value (the ring's entries), not in KEYS: fine
on one Redis and under Sentinel, not on Redis Cluster (which kombu's transport does not
support either).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from agent_jobs.core.names import (
    ready_doorbell_key,
    ready_members_key,
    ready_queue,
    ready_ring_key,
    tenant_of_queue,
)

# The doorbell's one token. A message someone published to the doorbell list by mistake is not
# this value, and is delivered as the message it is.
DOORBELL_TOKEN = b"\x00ring"
# Tokens kept at most. One is enough to wake every waiting worker, since a worker waits only
# after a take found the ring empty and every later push adds a token; a few cover clients
# that wait on the doorbell for other reasons.
DOORBELL_KEEP = 4

# KEYS: queue list, ring, members, doorbell   ARGV: payload, queue name, doorbell keep
PUSH = """
redis.call('LPUSH', KEYS[1], ARGV[1])
if redis.call('SADD', KEYS[3], ARGV[2]) == 1 then
  redis.call('LPUSH', KEYS[2], ARGV[2])
end
redis.call('LPUSH', KEYS[4], ARGV[4])
redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[3]) - 1)
return 1
"""

# KEYS: ring, members, then other queues to look at (plain lists)
# ARGV: '1' to look at the other queues before the ring, '0' after it
# Returns {queue, payload} or nil. A ring entry whose queue turned out empty (purged, or
# emptied by a client that does not know the ring) leaves the ring; a few are skipped per call.
TAKE = """
local function others()
  for i = 3, #KEYS do
    local m = redis.call('RPOP', KEYS[i])
    if m then
      return {KEYS[i], m}
    end
  end
  return nil
end
local function ring()
  for _ = 1, 8 do
    local q = redis.call('RPOP', KEYS[1])
    if not q then
      return nil
    end
    local m = redis.call('RPOP', q)
    if redis.call('LLEN', q) > 0 then
      redis.call('LPUSH', KEYS[1], q)
    else
      redis.call('SREM', KEYS[2], q)
    end
    if m then
      return {q, m}
    end
  end
  return nil
end
if ARGV[1] == '1' then
  return others() or ring()
end
return ring() or others()
"""

# KEYS: queue list, ring, members, doorbell   ARGV: queue name, doorbell keep, token
ENROLL = """
if redis.call('LLEN', KEYS[1]) == 0 then
  return 0
end
if redis.call('SADD', KEYS[3], ARGV[1]) == 1 then
  redis.call('LPUSH', KEYS[2], ARGV[1])
end
redis.call('LPUSH', KEYS[4], ARGV[3])
redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[2]) - 1)
return 1
"""


def _sha(script: str) -> str:
    return hashlib.sha1(script.encode()).hexdigest()  # Redis names a script by its SHA-1


_SHAS = {script: _sha(script) for script in (PUSH, TAKE, ENROLL)}
TAKE_SHA = _SHAS[TAKE]


@dataclass(frozen=True)
class ReadyRing:
    """The ring's keys for one queue prefix, and its operations on a given Redis client."""

    prefix: str

    @property
    def queue(self) -> str:
        """The queue a worker consumes to be served from the ring (it has no list of its own)."""
        return ready_queue(self.prefix)

    @property
    def ring(self) -> str:
        return ready_ring_key(self.prefix)

    @property
    def members(self) -> str:
        return ready_members_key(self.prefix)

    @property
    def doorbell(self) -> str:
        return ready_doorbell_key(self.prefix)

    def serves(self, queue: str) -> bool:
        """Whether `queue` is served through the ring: a tenant's queue."""
        return tenant_of_queue(self.prefix, queue) is not None

    def push(self, client: Any, queue: str, payload: str | bytes) -> None:
        """Publish one message to a tenant's queue and make sure the queue is in the ring."""
        keys = [queue, self.ring, self.members, self.doorbell]
        _run(client, PUSH, keys, [payload, queue, DOORBELL_KEEP, DOORBELL_TOKEN])

    def take_command(self, others: Sequence[str], others_first: bool) -> list[Any]:
        """The command a worker sends for its next message (the TAKE script by its digest)."""
        keys = [self.ring, self.members, *others]
        return ["EVALSHA", TAKE_SHA, len(keys), *keys, "1" if others_first else "0"]

    def load(self, client: Any) -> None:
        """Load TAKE into Redis's script cache (a restarted Redis answers NOSCRIPT)."""
        client.script_load(TAKE)

    def enroll_in(self, pipe: Any, queue: str) -> None:
        """Queue, on a pipeline, the repair of one queue: in the ring if it holds a message."""
        keys = [queue, self.ring, self.members, self.doorbell]
        pipe.eval(ENROLL, len(keys), *keys, queue, DOORBELL_KEEP, DOORBELL_TOKEN)

    def enroll(self, client: Any, queues: Sequence[str]) -> int:
        """Put every one of `queues` that holds a message in the ring (if it is not); how many
        hold one."""
        if not queues:
            return 0
        pipe = client.pipeline(transaction=False)
        for queue in queues:
            self.enroll_in(pipe, queue)
        return sum(int(x) for x in pipe.execute())


def _run(client: Any, script: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
    try:
        return client.evalsha(_SHAS[script], len(keys), *keys, *args)
    except redis.exceptions.NoScriptError:
        return client.eval(script, len(keys), *keys, *args)


def ring_for(cfg: Any) -> ReadyRing | None:
    """The ring, when this configuration serves tenant queues through it: agent_jobs' own
    transport (`queue/transport.py`) and per-tenant routing. The embedded broker and any other
    transport consume the tenant queues themselves."""
    from agent_jobs.queue.transport import transport_for  # noqa: PLC0415 - transport imports us

    if cfg.routing != "tenant" or cfg.embedded or transport_for(cfg.broker_url) is None:
        return None
    return ReadyRing(cfg.queue_prefix)
