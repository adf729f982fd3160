"""Redis behind Sentinel (issue 32.2): `agent-jobs bench failover` starts two redis-servers and
Debian's `redis-sentinel` of its own (127.0.0.1, free ports), runs workers and beat through the
Sentinel with agent_jobs' Sentinel transport (step acks in memory, the ready ring), SIGKILLs the
primary under load and waits for the Sentinel to elect the replica. Nothing is lost, no effect
is applied twice, no worker exits, and every runnable task moves again within the bound the
issue sets (15 s after the election: a bound, not a speed; the figure is the bench's)."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import _need
from tests.support.bench import run_bench

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

BOUND_S = 15.0


def test_a_primary_killed_under_load_fails_over_losing_nothing(
    pg_database: str, redis_url: str
) -> None:
    _need(shutil.which("redis-sentinel") is not None, "redis-sentinel (Debian's package)")
    result = run_bench(
        "failover", "--tasks", "6",
        database_url=pg_database, broker_url=redis_url, prefix="failover",
    )  # fmt: skip
    assert result["timings"]["dispatch_grace_s"] == 60  # the defaults, not the tests' timings
    assert result["lost"] == 0
    assert result["duplicate_effects"] == 0
    assert result["worker_exits"] == 0
    assert result["submitted"] == result["completed"] + result["other_terminal"]
    assert result["runnable"] > 0
    assert result["moving_n"] + result["finished_during_outage"] == result["runnable"]
    assert result["moving_max_s"] is None or result["moving_max_s"] <= BOUND_S
