"""Which tenants have work: workers consume exactly those tenants' queues.

kombu's Redis transport issues one BRPOP over every consumed queue for each message, so a worker
must not consume every tenant that ever existed. A tenant enters the directory when a step is
dispatched to it; workers re-read the directory every `queue_sync_interval_s` (and are told at
once by a broadcast when a tenant is new).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

from agent_jobs.core.names import active_tenants_key
from agent_jobs.redis_clients import client


class TenantDirectory(Protocol):
    def touch(self, tenant_id: str) -> bool:
        """Record activity; True when the tenant was not in the directory before."""
        ...

    def active(self, idle_s: float | None = None) -> dict[str, float]:
        """tenant -> last activity (epoch seconds), optionally only those active within idle_s."""
        ...

    def forget(self, tenant_id: str, older_than: float) -> bool:
        """Remove a tenant whose last activity is older than `older_than` (epoch seconds)."""
        ...


class _TouchCache:
    """Skips a Redis round trip when this process touched the tenant less than `every_s` ago."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self._seen: dict[str, float] = {}
        self._lock = threading.Lock()

    def fresh(self, tenant_id: str) -> bool:
        now = time.monotonic()
        with self._lock:
            last = self._seen.get(tenant_id)
            if last is not None and now - last < self.every_s:
                return True
            self._seen[tenant_id] = now
            return False

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()


class RedisTenantDirectory:
    def __init__(
        self,
        url: str,
        prefix: str,
        touch_every_s: float = 1.0,
        *,
        sentinel_master: str | None = None,
    ) -> None:
        self._redis = client(url, master=sentinel_master)
        self._key = active_tenants_key(prefix)
        self._cache = _TouchCache(touch_every_s)

    def touch(self, tenant_id: str) -> bool:
        if self._cache.fresh(tenant_id):
            return False
        added = self._redis.zadd(self._key, {tenant_id: time.time()})
        return bool(added)

    def active(self, idle_s: float | None = None) -> dict[str, float]:
        low: float | str = "-inf" if idle_s is None else time.time() - idle_s
        rows: list[tuple[bytes, float]] = self._redis.zrangebyscore(  # type: ignore[assignment]
            self._key, low, "+inf", withscores=True
        )
        return {member.decode(): float(score) for member, score in rows}

    def forget(self, tenant_id: str, older_than: float) -> bool:
        # Remove only if still idle: a touch between our read and this call keeps it.
        script = (
            "local s = redis.call('ZSCORE', KEYS[1], ARGV[1]) "
            "if s and tonumber(s) < tonumber(ARGV[2]) then "
            "return redis.call('ZREM', KEYS[1], ARGV[1]) end return 0"
        )
        removed = self._redis.eval(script, 1, self._key, tenant_id, older_than)
        self._cache.clear()
        return bool(removed)


class InMemoryTenantDirectory:
    """The embedded mode's directory: the worker lives in the same process."""

    def __init__(self) -> None:
        self._tenants: dict[str, float] = {}
        self._lock = threading.Lock()

    def touch(self, tenant_id: str) -> bool:
        with self._lock:
            new = tenant_id not in self._tenants
            self._tenants[tenant_id] = time.time()
            return new

    def active(self, idle_s: float | None = None) -> dict[str, float]:
        with self._lock:
            if idle_s is None:
                return dict(self._tenants)
            low = time.time() - idle_s
            return {t: at for t, at in self._tenants.items() if at >= low}

    def forget(self, tenant_id: str, older_than: float) -> bool:
        with self._lock:
            at = self._tenants.get(tenant_id)
            if at is not None and at < older_than:
                del self._tenants[tenant_id]
                return True
            return False
