"""Several hosts (issue 32.4), on one machine: two worker "hosts", each reaching Redis and
Postgres only through TCP proxies of this test's own, and a beat on a third that reaches both
directly. Under load, host A is cut from Redis and healed, host B is cut from Postgres for
longer than a lease and healed, then host A is isolated from both and healed.

Where the machine allows network namespaces (root, iproute2: tried at the start), each worker
runs in a namespace of its own, reaching each service over a veth pair of its own to its proxy,
and a cut is that link taken down (packets dropped, nothing reset); elsewhere the workers run
beside the test and a cut is the proxy dropping its connections and refusing new ones. The test
says on the terminal which it used.

Checked from what the outside world holds: every task ends (lost 0); the ledger holds one
transfer per payout (effects twice 0); and no stale write was accepted: each task's transitions
form one chain (each leaves the status the previous one entered) and their number, creation
included, is the row's version, so no commit of a host whose lease had been taken over landed."""

from __future__ import annotations

import itertools
import socket
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
from tests.support.netns import Netns, netns_refused

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

LEASE_S = 3.0
TIMINGS = {
    "AGENT_JOBS_LEASE_TTL_S": str(LEASE_S),
    "AGENT_JOBS_DISPATCH_GRACE_S": "2",
    "AGENT_JOBS_SWEEP_INTERVAL_S": "0.5",
    "AGENT_JOBS_QUEUE_SYNC_INTERVAL_S": "0.5",
}


class Host:
    """One worker process whose Redis and Postgres are behind proxies of this test's own; in a
    network namespace of its own when `ns` is given."""

    def __init__(
        self, name: str, env: dict[str, str], redis_url: str, pg_url: str, logdir: Path, *,
        ns: Netns | None,
    ) -> None:  # fmt: skip
        self.ns = ns
        self.cuts: Counter[str] = Counter()
        r, p = make_url(redis_url), make_url(pg_url)
        # The proxies listen where the worker can reach them: the root side of its veth pair
        # for that service, else 127.0.0.1.
        at = {s: ns.link(s[0])[0] if ns else "127.0.0.1" for s in ("redis", "pg")}
        self.redis = CuttableProxy((r.host or "127.0.0.1", r.port or 6379), listen_host=at["redis"])
        self.pg = CuttableProxy((p.host or "127.0.0.1", p.port or 5432), listen_host=at["pg"])
        self.redis.__enter__()
        self.pg.__enter__()
        via_redis = r.set(host=at["redis"], port=self.redis.port).render_as_string(False)
        via_pg = p.set(host=at["pg"], port=self.pg.port).render_as_string(False)
        self.worker = WorkerProcess(
            {**env, "AGENT_JOBS_BROKER_URL": via_redis, "AGENT_JOBS_DATABASE_URL": via_pg},
            name=name, log=logdir / f"{name}.log", pool="solo", concurrency=1, loglevel="INFO",
            wrap=ns.exec_prefix if ns else None,
        )  # fmt: skip

    def cut(self, service: str) -> None:
        """`service` ("redis" or "pg") unreachable from this host (checked: a connection from
        where the worker runs does not open)."""
        if self.ns is not None:
            self.ns.down(service[0])
        else:
            self._proxy(service).cut()
        assert not self.reaches(service), f"{self.worker.name} still reaches {service}"
        self.cuts[service] += 1

    def restore(self, service: str) -> None:
        if self.ns is not None:
            self.ns.up(service[0])
        else:
            self._proxy(service).restore()
        assert wait_until(f"{service} reachable again", lambda: self.reaches(service), 10)

    def _proxy(self, service: str) -> CuttableProxy:
        return self.redis if service == "redis" else self.pg

    def reaches(self, service: str) -> bool:
        proxy = self._proxy(service)
        if self.ns is not None:
            return self.ns.reaches(proxy.host, proxy.port)
        try:
            socket.create_connection((proxy.host, proxy.port), timeout=1).close()
        except OSError:
            return False
        return True

    def close(self) -> None:
        try:
            stop_all([self.worker])
            self.redis.__exit__(None, None, None)
            self.pg.__exit__(None, None, None)
        finally:
            if self.ns is not None:
                self.ns.close()


@pytest.fixture
def hosts(
    pg_database: str,
    redis_url: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[tuple[Any, list[Host]]]:
    refused = netns_refused()
    said = "network namespaces (a veth pair per service; a cut takes the link down)"
    if refused:
        said = f"TCP proxies on 127.0.0.1 (network namespaces refused: {refused})"
    with capsys.disabled():  # on the terminal whatever the capture
        print(f"\n{request.node.name}: worker hosts behind {said}")
    request.node.user_properties.append(("partition", "proxies" if refused else "netns"))
    ledger = str(tmp_path / "ledger.db")
    with live_runtime(
        AGENT_JOBS_DATABASE_URL=pg_database, AGENT_JOBS_EXAMPLE_BACKEND=ledger, **TIMINGS
    ) as (rt, env):
        made: list[Host] = []
        beat = None
        try:
            for i, name in enumerate(("hostA", "hostB")):
                ns = None
                if not refused:
                    ns = Netns(name[-1], i)
                    try:
                        made.append(Host(name, env, redis_url, pg_database, tmp_path, ns=ns))
                    except BaseException:
                        ns.close()
                        raise
                else:
                    made.append(Host(name, env, redis_url, pg_database, tmp_path, ns=None))
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
    a.cut("redis")  # host A loses Redis: its fetch and its publishes fail
    time.sleep(4.0)
    a.restore("redis")
    healed = {"A from Redis": store.db_now()}
    b.cut("pg")  # host B loses Postgres for longer than a lease: another host takes its tasks
    time.sleep(LEASE_S + 2.0)
    b.restore("pg")
    healed["B from Postgres"] = store.db_now()
    a.cut("redis")  # host A isolated from both, then back
    a.cut("pg")
    time.sleep(3.0)
    a.restore("redis")
    a.restore("pg")
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
    assert a.cuts["redis"] and b.cuts["pg"]  # the partitions happened
