"""Postgres behind PgBouncer in transaction mode (issue 32.3), configured as the README says:
`AGENT_JOBS_PG_PREPARE=0` (a transaction-mode pooler keeps no session, so no prepared
statement) and `ignore_startup_parameters = options` (the statement and lock timeouts travel as
the connection's `options`). Debian's `pgbouncer`, started here on a free port of 127.0.0.1 in
front of the tests' Postgres, with fewer server connections than client threads.

The store's contract tests run here again, unchanged, on a store that reaches Postgres only
through PgBouncer (this module's `store` fixture), and a small load (several workers' worth of
threads stepping tasks at once) completes with PgBouncer's server connections within its pool.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from agent_jobs.bench.bouncer import PrivateBouncer
from agent_jobs.core.contracts import TaskRequest
from agent_jobs.core.states import Status
from agent_jobs.testing import Harness
from agent_jobs.workflows import default_registry
from tests.conftest import _need, _truncate
from tests.contract.test_store_approvals import *  # noqa: F403 - the contract, re-run here
from tests.contract.test_store_cas import *  # noqa: F403
from tests.contract.test_store_create import *  # noqa: F403
from tests.contract.test_store_effects import *  # noqa: F403
from tests.contract.test_store_leases import *  # noqa: F403
from tests.contract.test_store_parked import *  # noqa: F403
from tests.support.live import live_env

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

SERVER_CONNECTIONS = 4  # PgBouncer's pool: what Postgres sees, however many clients
CLIENT_THREADS = 8


@pytest.fixture(scope="module")
def bouncer(pg_database: str) -> Iterator[tuple[str, PrivateBouncer]]:
    """PgBouncer in transaction mode in front of the session's test database (the benches'
    own, `bench/bouncer.py`): the URL through it, and the bouncer (its admin console)."""
    _need(shutil.which("pgbouncer") is not None, "pgbouncer (Debian's package)")
    # Its directory under /tmp (mkdtemp): readable by the user PgBouncer drops to as root.
    b = PrivateBouncer(pg_database, pool_size=SERVER_CONNECTIONS)
    try:
        with b:
            yield b.url_for(pg_database), b
    finally:
        shutil.rmtree(b.dir, ignore_errors=True)


@pytest.fixture
def store(bouncer: tuple[str, PrivateBouncer]) -> Iterator[object]:
    """The contract's store, reaching Postgres only through PgBouncer, with prepared statements
    off as the README configures them behind a transaction-mode pooler."""
    from agent_jobs.store import Store

    url, _ = bouncer
    with live_env(AGENT_JOBS_DATABASE_URL=url, AGENT_JOBS_PG_PREPARE="0"):
        s = Store.from_url(url)
        _truncate(s)
        yield s
        s.dispose()


def test_a_load_of_concurrent_steps_runs_through_pgbouncer_within_its_pool(
    store: Any, bouncer: tuple[str, PrivateBouncer], pg_database: str
) -> None:
    _, pooler = bouncer
    name = make_url(pg_database).database or ""
    ids: list[str] = []
    lock = threading.Lock()
    peak = 0
    errors: list[BaseException] = []

    def one_worker(n: int) -> None:
        try:
            h = Harness(store, default_registry())
            mine = [
                h.submit(
                    f"pgb{n % 3}", f"k{n}-{i}", TaskRequest(workflow="noop@1", input={"steps": 6})
                ).id
                for i in range(5)
            ]
            h.run_until_idle()
            with lock:
                ids.extend(mine)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one_worker, args=(n,)) for n in range(CLIENT_THREADS)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        peak = max(peak, pooler.pools(name).servers)
        time.sleep(0.05)
    assert errors == []
    assert len(ids) == CLIENT_THREADS * 5
    assert store.count_in_status(ids, Status.COMPLETED) == len(ids)
    assert 0 < peak <= SERVER_CONNECTIONS
