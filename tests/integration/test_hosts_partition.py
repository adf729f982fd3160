"""Several hosts (issue 32.4), on one machine: two worker "hosts", each reaching Redis and
Postgres only through TCP proxies of this test's own (127.0.0.1), and a beat on a third that
reaches both directly. Under load, host A is cut from Redis and healed, host B is cut from
Postgres for longer than a lease and healed, then host A is isolated from both and healed.

Checked from what the outside world holds: every task ends (lost 0); the ledger holds one
transfer per payout (effects twice 0); and no stale write was accepted: each task's transitions
form one chain (each leaves the status the previous one entered) and their number, creation
included, is the row's version, so no commit of a host whose lease had been taken over landed."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from agent_jobs.bench.procs import BeatProcess, WorkerProcess, stop_all
from agent_jobs.bench.proxy import CuttableProxy
from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import TERMINAL, Status
from agent_jobs.workflows.example_backend import ExampleBackend
from tests.support.live import live_runtime, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

LEASE_S = 3.0
TIMINGS = {
    "AGENT_JOBS_LEASE_TTL_S": str(LEASE_S),
    "AGENT_JOBS_DISPATCH_GRACE_S": "2",
    "AGENT_JOBS_SWEEP_INTERVAL_S": "0.5",
    "AGENT_JOBS_QUEUE_SYNC_INTERVAL_S": "0.5",
}


class Host:
    """One worker process whose Redis and Postgres are behind proxies this test cuts."""

    def __init__(self, name: str, env: dict[str, str], redis_url: str, pg_url: str, logdir: Path):
        r, p = make_url(redis_url), make_url(pg_url)
        self.redis = CuttableProxy((r.host or "127.0.0.1", r.port or 6379))
        self.pg = CuttableProxy((p.host or "127.0.0.1", p.port or 5432))
        self.redis.__enter__()
        self.pg.__enter__()
        via_redis = r.set(host="127.0.0.1", port=self.redis.port).render_as_string(False)
        via_pg = p.set(host="127.0.0.1", port=self.pg.port).render_as_string(False)
        self.worker = WorkerProcess(
            {**env, "AGENT_JOBS_BROKER_URL": via_redis, "AGENT_JOBS_DATABASE_URL": via_pg},
            name=name, log=logdir / f"{name}.log", pool="solo", concurrency=1, loglevel="INFO",
        )  # fmt: skip

    def close(self) -> None:
        stop_all([self.worker])
        self.redis.__exit__(None, None, None)
        self.pg.__exit__(None, None, None)


@pytest.fixture
def hosts(pg_database: str, redis_url: str, tmp_path: Path) -> Iterator[tuple[Any, list[Host]]]:
    ledger = str(tmp_path / "ledger.db")
    with live_runtime(
        AGENT_JOBS_DATABASE_URL=pg_database, AGENT_JOBS_EXAMPLE_BACKEND=ledger, **TIMINGS
    ) as (rt, env):
        made: list[Host] = []
        beat = None
        try:
            for name in ("hostA", "hostB"):
                made.append(Host(name, env, redis_url, pg_database, tmp_path))
            for h in made:
                h.worker.wait_ready()
            beat = BeatProcess({**env, "AGENT_JOBS_DATABASE_URL": pg_database}, tmp_path)
            yield rt, made
        finally:
            if beat is not None:
                beat.stop()
            for h in made:
                h.close()


def test_hosts_cut_from_redis_and_postgres_and_healed_lose_nothing_and_write_nothing_stale(
    hosts: tuple[Any, list[Host]], tmp_path: Path
) -> None:
    rt, (a, b) = hosts
    store = rt.store

    def submit(tenant: str, workflow: str, data: dict[str, Any]) -> str:
        request = TaskRequest(workflow=workflow, input=data)
        key = f"h{time.time_ns()}"
        return str(rt.orchestrator.submit(tenant, key, request, requester="svc").task.id)

    ids = [submit(f"host{i % 3}", "noop@1", {"steps": 60, "sleep_ms": 20}) for i in range(9)]
    ids += [
        submit("hostpay", "example@1", {"account": f"acc_{i}", "amount_minor": 900, "reads": 1})
        for i in range(4)
    ]
    time.sleep(1.0)
    a.redis.cut()  # host A loses Redis: its fetch and its publishes fail
    time.sleep(4.0)
    a.redis.restore()
    healed = {"A from Redis": store.db_now()}
    b.pg.cut()  # host B loses Postgres for longer than a lease: another host takes its tasks
    time.sleep(LEASE_S + 2.0)
    b.pg.restore()
    healed["B from Postgres"] = store.db_now()
    a.redis.cut()  # host A isolated from both, then back
    a.pg.cut()
    time.sleep(3.0)
    a.redis.restore()
    a.pg.restore()
    healed["A isolated"] = store.db_now()
    wait_until(
        "every task terminal",
        lambda: all(store.get(t).status in TERMINAL for t in ids),
        120,
        every_s=0.25,
    )
    statuses = Counter(store.get(t).status for t in ids)
    assert statuses[Status.COMPLETED] == len(ids), statuses  # lost 0, none failed
    transfers = Counter(
        t.idempotency_key for t in ExampleBackend(tmp_path / "ledger.db").transfers()
    )
    assert len(transfers) == 4 and set(transfers.values()) == {1}  # effects twice 0
    for task_id in ids:
        moves = [e for e in store.events(task_id) if e.to_status is not None]
        for before, after in itertools.pairwise(moves):
            assert after.from_status == before.to_status, (task_id, before, after)
        assert store.get(task_id).version == len(moves), task_id  # creation included
    assert a.worker.proc.poll() is None and b.worker.proc.poll() is None  # no worker exited
    # Each host moves again soon after its heal (the bound: 10 s after the heal), when
    # work was still waiting then: its first commit after it (events name the committing worker).
    events = [e for t in ids for e in store.events(t)]
    for what, at in healed.items():
        host = "hostA" if what.startswith("A") else "hostB"
        if all(e.at <= at for e in events):
            continue  # everything had finished
        mine = [e.at for e in events if str(e.data.get("by", "")).startswith(f"{host}#")]
        after = [x for x in mine if x > at]
        assert after, f"{host} never committed after its heal ({what})"
        assert (min(after) - at).total_seconds() <= 10.0, (what, min(after) - at)
    assert a.redis.cuts and b.pg.cuts  # the partitions happened
