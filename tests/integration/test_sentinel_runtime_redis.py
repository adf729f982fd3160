"""The runtime's own Redis under Sentinel (issue 32.2): the tenant directory, the dispatch gate
and the switches' notifications reach Redis through `sentinel://` (a primary, its replica and a
Sentinel of the test's own, `agent_jobs.bench.failover.SentinelSet`). The primary is SIGKILLed,
the Sentinel elects the replica, and each works again against the new primary within the bound
the issue sets (15 s after the election), with nothing lost that the replica had acknowledged.

What the runtime promises after a failover: Redis replicates asynchronously, so a write the
replica had not received at the kill is gone. Here every write before the kill is acknowledged
(WAIT), so all of it must be there; in a deployment, a tenant touched in the last instant is put
back by the workers' database re-read (every tenth directory sync), the gate's held counts by
the sweeper's reconciliation, and a switch lives in the database, its notification only saying
"re-read"."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from agent_jobs.bench.failover import MASTER, SentinelSet
from agent_jobs.core.names import ops_switches_channel
from agent_jobs.ops.live import StoreSwitches
from agent_jobs.ops.service import OpsService
from agent_jobs.queue.directory import RedisTenantDirectory
from agent_jobs.queue.gate import GatePolicy, RedisGate
from tests.conftest import _need
from tests.support.live import wait_until

pytestmark = [pytest.mark.redis, pytest.mark.slow]

BOUND_S = 15.0  # after the election (issue 32)
PREFIX = "ajsent"
T = TypeVar("T")


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelSet]:
    _need(
        shutil.which("redis-sentinel") is not None and shutil.which("redis-server") is not None,
        "redis-server and redis-sentinel (Debian's package)",
    )
    with SentinelSet(tmp_path) as s:
        yield s


def _answering(call: Callable[[], T]) -> Callable[[], T | None]:
    """`call`, with a Redis that does not answer (yet) read as None: poll until it does."""

    def attempt() -> T | None:
        try:
            return call()
        except redis.RedisError:
            return None

    return attempt


def _subscribers(port: int) -> int:
    got: Any = redis.Redis(port=port).pubsub_numsub(ops_switches_channel(PREFIX))
    return int(got[0][1])


def test_directory_gate_and_switches_follow_a_failover(
    sentinels: SentinelSet, sqlite_store: Any
) -> None:
    url = sentinels.url
    assert url.startswith("sentinel://")
    directory = RedisTenantDirectory(url, PREFIX, touch_every_s=0, sentinel_master=MASTER)
    gate = RedisGate(url, PREFIX, GatePolicy(default_cap=1), sentinel_master=MASTER)
    ops = OpsService(sqlite_store, [].append, redis_url=url, prefix=PREFIX, sentinel_master=MASTER)
    # The backstop re-read a minute away: only the notification explains a quick change.
    listener = StoreSwitches(
        sqlite_store, redis_url=url, sentinel_master=MASTER, prefix=PREFIX, refresh_s=60.0
    )
    listener.start()
    try:
        old = sentinels.primary_port()
        assert old is not None
        wait_until("the listener subscribed", lambda: _subscribers(old) >= 1, 10)

        assert directory.touch("acme") and directory.touch("globex")
        assert gate.admit("acme", "task-1")
        assert not gate.admit("acme", "task-2")  # the cap of 1 holds the second
        ops.set("effects_stopped", tenant_id="acme", actor="oncall", reason="drill")
        wait_until("heard", lambda: listener.current().effects_stopped("acme") is not None, 2)
        # Everything above is on the replica before the kill (WAIT: one replica acknowledged).
        assert redis.Redis(port=old).wait(1, 5000) >= 1

        killed = sentinels.kill_primary()
        new = sentinels.wait_elected(killed)
        elected = time.monotonic()
        # The new primary never loaded the gate's scripts: its first call answers NOSCRIPT.
        assert redis.Redis(port=new).script_exists(gate._admit.sha) == [False]

        # The directory: what was acknowledged is all there; it takes new tenants again.
        active = wait_until("the directory answers", _answering(directory.active), BOUND_S)
        assert set(active) == {"acme", "globex"}
        assert wait_until("a touch", _answering(lambda: directory.touch("initech")), BOUND_S)
        assert directory.forget("initech", older_than=time.time() + 1)  # its Lua script
        directory_s = time.monotonic() - elected

        # The gate: acme's slot survived (still capped); released, the held task gets it.
        refused = wait_until(
            "the gate answers",
            _answering(lambda: "refused" if not gate.admit("acme", "task-2") else "admitted"),
            BOUND_S,
        )
        assert refused == "refused"
        gate.release("acme", "task-1", cost_s=0.1)
        assert gate.admit("acme", "task-2")
        assert redis.Redis(port=new).script_exists(gate._admit.sha) == [True]  # reloaded
        gate_s = time.monotonic() - elected

        # The switches: the listener re-subscribed on the new primary and hears a change.
        wait_until("re-subscribed", lambda: _subscribers(new) >= 1, BOUND_S)
        reloads = listener.reloads
        ops.set("effects_stopped", tenant_id="globex", actor="oncall", reason="drill")
        wait_until("heard", lambda: listener.current().effects_stopped("globex") is not None, 2)
        assert listener.reloads > reloads
        assert listener.current().effects_stopped("acme") is not None
        switches_s = time.monotonic() - elected

        print(
            f"\nafter the election: directory {directory_s:.2f} s, gate {gate_s:.2f} s, "
            f"switches {switches_s:.2f} s"
        )
        assert max(directory_s, gate_s, switches_s) <= BOUND_S
    finally:
        listener.stop()
