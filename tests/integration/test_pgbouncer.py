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

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from sqlalchemy.engine import make_url

from agent_jobs.bench.proxy import free_port
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
def bouncer(pg_database: str) -> Iterator[tuple[str, int]]:
    """PgBouncer in transaction mode in front of the session's test database: the URL through
    it, and its port (the admin console's too)."""
    binary = shutil.which("pgbouncer")
    _need(binary is not None, "pgbouncer (Debian's package)")
    assert binary is not None
    direct = make_url(pg_database)
    name = direct.database
    port = free_port()
    # Readable by the user PgBouncer drops to when started as root (it refuses to run as root).
    where = Path(tempfile.mkdtemp(prefix="aj-pgbouncer-"))
    where.chmod(0o777)
    (where / "users.txt").write_text(f'"{direct.username}" ""\n')
    ini = where / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"{name} = host={direct.host or '127.0.0.1'} port={direct.port or 5432} dbname={name}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {where / 'users.txt'}\n"
        f"admin_users = {direct.username}\n"
        "pool_mode = transaction\n"
        f"default_pool_size = {SERVER_CONNECTIONS}\nmax_client_conn = 200\n"
        "ignore_startup_parameters = options,extra_float_digits\n"
        f"logfile = {where / 'pgbouncer.log'}\npidfile = {where / 'pgbouncer.pid'}\n"
    )
    for path in where.iterdir():
        path.chmod(0o666)
    cmd = [binary, str(ini)]
    if os.geteuid() == 0:
        cmd = [binary, "-u", direct.username or "postgres", str(ini)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = direct.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                psycopg2.connect(url.replace("+psycopg2", ""), connect_timeout=1).close()
                break
            except psycopg2.OperationalError as exc:
                if proc.poll() is not None or time.monotonic() > deadline:
                    log = where / "pgbouncer.log"
                    why = log.read_text() if log.exists() else "pgbouncer exited"
                    raise RuntimeError(why) from exc
                time.sleep(0.1)
        yield url, port
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def store(bouncer: tuple[str, int]) -> Iterator[object]:
    """The contract's store, reaching Postgres only through PgBouncer, with prepared statements
    off as the README configures them behind a transaction-mode pooler."""
    from agent_jobs.store import Store

    url, _ = bouncer
    with live_env(AGENT_JOBS_DATABASE_URL=url, AGENT_JOBS_PG_PREPARE="0"):
        s = Store.from_url(url)
        _truncate(s)
        yield s
        s.dispose()


def _server_connections(port: int, user: str) -> int:
    admin = psycopg2.connect(host="127.0.0.1", port=port, dbname="pgbouncer", user=user)
    admin.autocommit = True
    try:
        cur = admin.cursor()
        cur.execute("SHOW SERVERS")
        return len(cur.fetchall())
    finally:
        admin.close()


def test_a_load_of_concurrent_steps_runs_through_pgbouncer_within_its_pool(
    store: Any, bouncer: tuple[str, int], pg_database: str
) -> None:
    _, port = bouncer
    user = make_url(pg_database).username or "postgres"
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
        peak = max(peak, _server_connections(port, user))
        time.sleep(0.05)
    assert errors == []
    assert len(ids) == CLIENT_THREADS * 5
    assert store.count_in_status(ids, Status.COMPLETED) == len(ids)
    assert 0 < peak <= SERVER_CONNECTIONS
