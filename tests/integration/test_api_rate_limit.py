"""Admission control: a per-tenant token bucket in Redis (one atomic script), configurable per
tenant; an empty bucket answers 429 with Retry-After and creates nothing."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from agent_jobs.api.admission import Limits, MemoryAdmission, RedisAdmission, build_admission
from agent_jobs.core.names import rate_bucket_key
from tests.integration.api_env import api_settings, auth, harness_api, token

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture
def prefix() -> str:
    return f"rl{uuid.uuid4().hex[:8]}"


def test_empty_bucket_is_429_with_retry_after_and_no_task(
    pg_store: Any, tmp_path: Path, redis_url: str, prefix: str
) -> None:
    cfg = api_settings(
        broker_url=redis_url,
        queue_prefix=prefix,
        rate_per_s=100.0,  # the default stays generous ...
        rate_burst=100,
        rate_limits=(("slow", 0.01, 3),),  # ... and one tenant gets 3 now, then one per 100 s
    )
    api = harness_api(pg_store, tmp_path / "ledger.db", cfg)
    slow = token(cfg, "slow")
    codes = []
    for i in range(4):
        r = api.client.post(
            "/v1/tasks",
            json={"workflow": "noop@1", "input": {}},
            headers=auth(slow, **{"Idempotency-Key": f"k{i}"}),
        )
        codes.append(r.status_code)
    assert codes == [202, 202, 202, 429]
    assert r.json()["error"]["code"] == "rate_limited"
    retry_after = int(r.headers["Retry-After"])
    assert 1 <= retry_after <= 100
    keys = sorted(t.idempotency_key for t in pg_store.list_tasks("slow"))
    assert keys == ["k0", "k1", "k2"]  # the refused request created nothing

    # Another tenant has its own bucket.
    r = api.client.post(
        "/v1/tasks",
        json={"workflow": "noop@1", "input": {}},
        headers=auth(token(cfg, "fast"), **{"Idempotency-Key": "k0"}),
    )
    assert r.status_code == 202


def test_the_redis_bucket_is_atomic_under_concurrency(redis_url: str, prefix: str) -> None:
    cfg = api_settings(rate_per_s=0.001, rate_burst=5)
    client = redis.Redis.from_url(redis_url)
    admission = RedisAdmission(client, prefix, Limits(cfg))
    barrier = threading.Barrier(20)
    verdicts = []
    lock = threading.Lock()

    def admit() -> None:
        barrier.wait()
        v = admission.admit("burst")
        with lock:
            verdicts.append(v)

    threads = [threading.Thread(target=admit) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(v.allowed for v in verdicts) == 5
    assert all(v.retry_after_s >= 1 for v in verdicts if not v.allowed)
    assert client.exists(rate_bucket_key(prefix, "burst"))
    client.delete(rate_bucket_key(prefix, "burst"))


def test_refill_follows_the_rate(redis_url: str, prefix: str) -> None:
    client = redis.Redis.from_url(redis_url)
    admission = RedisAdmission(client, prefix, Limits(api_settings(rate_per_s=1.0, rate_burst=1)))
    assert admission.admit("t").allowed
    refused = admission.admit("t")
    assert not refused.allowed and refused.retry_after_s == 1
    # Rewind the bucket's clock by two seconds instead of sleeping: it refills to its burst.
    key = rate_bucket_key(prefix, "t")
    at = float(client.hget(key, "at") or 0)
    client.hset(key, "at", str(at - 2.0))
    assert admission.admit("t").allowed
    client.delete(key)


def test_unreachable_redis_lets_requests_through() -> None:
    admission = build_admission(
        api_settings(broker_url="redis://127.0.0.1:1/0", rate_per_s=1.0, rate_burst=1)
    )
    verdicts = [admission.admit("t") for _ in range(3)]
    assert all(v.allowed and v.error for v in verdicts)


def test_zero_rate_disables_and_zero_burst_refuses() -> None:
    off = MemoryAdmission(Limits(api_settings(rate_per_s=0.0)))
    assert all(off.admit("t").allowed for _ in range(100))
    closed = MemoryAdmission(Limits(api_settings(rate_per_s=1.0, rate_limits=(("t", 1.0, 0),))))
    assert not closed.admit("t").allowed


def test_memory_bucket_matches_the_redis_arithmetic() -> None:
    now = [100.0]
    bucket = MemoryAdmission(Limits(api_settings(rate_per_s=0.5, rate_burst=2)), lambda: now[0])
    assert [bucket.admit("t").allowed for _ in range(3)] == [True, True, False]
    assert bucket.admit("t").retry_after_s == 2  # one token at 0.5/s
    now[0] += 2.0
    assert bucket.admit("t").allowed
