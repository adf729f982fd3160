"""Admission control: one token bucket per tenant, so one tenant's burst cannot fill the queues.

In Redis the bucket is one hash (`tokens`, `at`) updated by one Lua script, which Redis runs
atomically: concurrent API processes never both spend the last token. The script reads the Redis
server's clock (TIME), so API hosts with skewed clocks agree on the refill. The embedded mode
(no Redis) keeps the buckets in memory, with the same arithmetic under a lock.

An empty bucket answers "refused, retry after N seconds" (429 + Retry-After at the API). If Redis
cannot be reached the request is let through and counted (`agent_jobs_admission_errors_total`):
admission protects the service from a tenant's burst; it must not become the outage itself.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from agent_jobs.config import Settings
from agent_jobs.core.names import rate_bucket_key

log = logging.getLogger(__name__)

# KEYS[1] bucket; ARGV rate (tokens/s), burst (capacity), cost. Returns {allowed, tokens, wait_s}
# as strings: Lua numbers returned to Redis are truncated to integers.
TOKEN_BUCKET_LUA = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(b[1])
local at = tonumber(b[2])
if tokens == nil or at == nil then
  tokens = burst
  at = now
end
if now > at then
  tokens = math.min(burst, tokens + (now - at) * rate)
end
local allowed = 0
local wait = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
else
  wait = (cost - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst / rate) * 1000) + 1000)
return {allowed, tostring(tokens), tostring(wait)}
"""


@dataclass(frozen=True)
class Limit:
    """A bucket's refill rate (tokens per second; 0: no limit) and capacity."""

    rate_per_s: float
    burst: int

    @property
    def enabled(self) -> bool:
        return self.rate_per_s > 0


@dataclass(frozen=True)
class Verdict:
    """Admitted or not, and when to retry."""

    allowed: bool
    retry_after_s: int = 0  # whole seconds, at least 1 when refused (Retry-After)
    error: bool = False  # the bucket could not be read; the request was let through


class Admission(Protocol):
    """Takes one token from the tenant's bucket, or says how long until there is one."""

    def admit(self, tenant_id: str) -> Verdict: ...


class Limits:
    """The limit of each tenant: the default, or its override from AGENT_JOBS_RATE_LIMITS."""

    def __init__(self, settings: Settings) -> None:
        self.default = Limit(settings.rate_per_s, settings.rate_burst)
        self.overrides = {t: Limit(r, b) for t, r, b in settings.rate_limits}

    def of(self, tenant_id: str) -> Limit:
        return self.overrides.get(tenant_id, self.default)


def _without_a_bucket(limit: Limit) -> Verdict | None:
    """The verdict when no bucket is needed: limits off (admit) or a burst of zero (refuse)."""
    if not limit.enabled:
        return Verdict(True)
    if limit.burst < 1:
        return _refused(1.0 / limit.rate_per_s)
    return None


def _refused(wait_s: float) -> Verdict:
    return Verdict(False, max(1, math.ceil(wait_s)))


class RedisAdmission:
    """The buckets in Redis, shared by every API process and worker (see the module doc)."""

    def __init__(self, redis_client: Any, prefix: str, limits: Limits) -> None:
        self.redis = redis_client
        self.prefix = prefix
        self.limits = limits
        self._script = redis_client.register_script(TOKEN_BUCKET_LUA)

    def admit(self, tenant_id: str) -> Verdict:
        limit = self.limits.of(tenant_id)
        settled = _without_a_bucket(limit)
        if settled is not None:
            return settled
        try:
            allowed, _, wait = self._script(
                keys=[rate_bucket_key(self.prefix, tenant_id)],
                args=[limit.rate_per_s, limit.burst, 1],
            )
        except Exception:
            log.warning(
                "admission: Redis unreachable; letting %s through", tenant_id, exc_info=True
            )
            return Verdict(True, error=True)
        if int(allowed) == 1:
            return Verdict(True)
        return _refused(float(wait))


class MemoryAdmission:
    """The same bucket in this process (embedded mode, tests without Redis)."""

    def __init__(self, limits: Limits, clock: Any = time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def admit(self, tenant_id: str) -> Verdict:
        limit = self.limits.of(tenant_id)
        settled = _without_a_bucket(limit)
        if settled is not None:
            return settled
        with self._lock:
            now = self.clock()
            tokens, at = self._buckets.get(tenant_id, (float(limit.burst), now))
            tokens = min(float(limit.burst), tokens + max(0.0, now - at) * limit.rate_per_s)
            if tokens >= 1:
                self._buckets[tenant_id] = (tokens - 1, now)
                return Verdict(True)
            self._buckets[tenant_id] = (tokens, now)
            return _refused((1 - tokens) / limit.rate_per_s)


def build_admission(settings: Settings) -> Admission:
    """Redis buckets when there is a Redis (the broker's, or AGENT_JOBS_REDIS_URL)."""
    limits = Limits(settings)
    url = settings.directory_redis_url
    if url is None:
        return MemoryAdmission(limits)
    from agent_jobs.redis_clients import client  # noqa: PLC0415

    made = client(url, master=settings.sentinel_master, timeout_s=2)
    return RedisAdmission(made, settings.queue_prefix, limits)
