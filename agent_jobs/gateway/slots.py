"""The global model-call cap: a distributed semaphore whose slots come back if their holder dies.

A slot is a member of a Redis sorted set scored by its expiry; acquiring prunes expired members
first, so a worker killed mid-call frees its slot after `ttl_s` without anyone's help.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

from agent_jobs.config import Settings
from agent_jobs.core.names import model_semaphore_key
from agent_jobs.redis_clients import client

# KEYS: slots zset. ARGV: holder, limit, ttl ms.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
return 1
"""
_IN_USE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZCARD', KEYS[1])
"""


class ModelSlots(Protocol):
    limit: int

    def acquire(self, holder: str) -> bool: ...

    def release(self, holder: str) -> None: ...

    def in_use(self) -> int: ...


class RedisModelSlots:
    def __init__(
        self,
        url: str,
        prefix: str,
        limit: int,
        ttl_s: float,
        *,
        sentinel_master: str | None = None,
    ) -> None:
        self._redis = client(url, master=sentinel_master)
        self._key = model_semaphore_key(prefix)
        self.limit = limit
        self._ttl_ms = int(ttl_s * 1000)
        self._acquire = self._redis.register_script(_ACQUIRE)
        self._in_use = self._redis.register_script(_IN_USE)

    def acquire(self, holder: str) -> bool:
        return bool(self._acquire(keys=[self._key], args=[holder, self.limit, self._ttl_ms]))

    def release(self, holder: str) -> None:
        self._redis.zrem(self._key, holder)

    def in_use(self) -> int:
        n: Any = self._in_use(keys=[self._key])
        return int(n)


class InMemoryModelSlots:
    """The same semaphore in one process (tests; the embedded mode)."""

    def __init__(self, limit: int, ttl_s: float = 120.0) -> None:
        self.limit = limit
        self._ttl = ttl_s
        self._held: dict[str, float] = {}
        self._lock = threading.Lock()

    def _prune(self) -> None:
        now = time.monotonic()
        for holder in [h for h, exp in self._held.items() if exp <= now]:
            del self._held[holder]

    def acquire(self, holder: str) -> bool:
        with self._lock:
            self._prune()
            if len(self._held) >= self.limit:
                return False
            self._held[holder] = time.monotonic() + self._ttl
            return True

    def release(self, holder: str) -> None:
        with self._lock:
            self._held.pop(holder, None)

    def in_use(self) -> int:
        with self._lock:
            self._prune()
            return len(self._held)


_embedded: InMemoryModelSlots | None = None
_embedded_lock = threading.Lock()


def model_slots_for(cfg: Settings) -> ModelSlots | None:
    """The global model-call cap of this configuration: in Redis, shared by every worker (or in
    this process, for the embedded mode); None when AGENT_JOBS_MODEL_CAP is 0."""
    global _embedded
    if cfg.model_cap <= 0:
        return None
    url = cfg.directory_redis_url
    if url is not None:
        return RedisModelSlots(
            url,
            cfg.queue_prefix,
            cfg.model_cap,
            cfg.slot_ttl_s,
            sentinel_master=cfg.sentinel_master,
        )
    with _embedded_lock:
        if _embedded is None or _embedded.limit != cfg.model_cap:
            _embedded = InMemoryModelSlots(cfg.model_cap, cfg.slot_ttl_s)
        return _embedded
