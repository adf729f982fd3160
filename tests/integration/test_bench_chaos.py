"""`agent-jobs bench chaos` runs end to end at a tiny size on a redis-server of its own (issue 22:
nothing destroys data it did not create). A smoke test: a worker SIGKILLed, the bench's broker
flushed, nothing lost, no effect twice, and the Redis named by AGENT_JOBS_BROKER_URL and
AGENT_JOBS_REDIS_URL (the test's own database) untouched; never a speed."""

from __future__ import annotations

import uuid

import pytest
import redis

from tests.support.bench import run_bench

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]


def test_bench_chaos_loses_nothing_and_flushes_only_its_own_redis(
    pg_database: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = redis.Redis.from_url(redis_url)
    sentinel = f"chaos-sentinel-{uuid.uuid4().hex}"
    prefix = f"chaos{uuid.uuid4().hex[:6]}"
    shared.set(sentinel, "not the bench's")
    # The directory's Redis named too: the bench must send that to its own server as well.
    monkeypatch.setenv("AGENT_JOBS_REDIS_URL", redis_url)
    monkeypatch.setenv("AGENT_JOBS_QUEUE_PREFIX", prefix)
    try:
        result = run_bench(
            "chaos", "--tasks", "12", "--workers", "2", "--kill-every", "1", "--flushes", "1",
            "--timeout", "45",
            database_url=pg_database, broker_url=redis_url, timeout_s=120,
        )  # fmt: skip
        assert shared.get(sentinel) == b"not the bench's"  # the broker's database not flushed
        # Nothing of the run's written there either: no queue, directory or gate key.
        assert list(shared.scan_iter(match=f"*{prefix}*", count=1000)) == []
    finally:
        shared.delete(sentinel)
    assert result["tasks"] == 12
    assert result["workers_killed"] >= 1
    assert result["broker_flushes"] == 1
    assert result["lost"] == 0
    assert result["duplicate_effects"] == 0
    assert sum(result["statuses"].values()) == 12
    assert result["transfers"] == result["effects_committed"]  # each applied once, each recorded
