"""An API answer that waits on the database is bounded by the `AGENT_JOBS_DB_*_TIMEOUT_S`
settings and comes back a 503 `{"error": {"code", "message"}}`, never a hang: every pooled
connection held, a row lock held by someone else, a server that accepts TCP and never answers.

No timing is asserted beyond a generous ceiling (ten times the setting plus slack for a busy
machine): the point is that the answer comes back at all, as a 503, instead of waiting."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Connection

from agent_jobs.config import Settings
from agent_jobs.store import Store
from agent_jobs.store.engine import make_engine
from tests.integration.api_env import api_settings, auth, harness_api, serve, token

pytestmark = pytest.mark.postgres

CEILING_S = 60.0  # the client's own limit: past it the test fails instead of hanging


def _bounded_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "db_connect_timeout_s": 2,
        "db_pool_timeout_s": 1.0,
        "db_lock_timeout_s": 1.0,
        "db_statement_timeout_s": 3.0,
    }
    values.update(overrides)
    return api_settings(**values)


def _submit(client: Any, tok: str) -> str:
    r = client.post(
        "/v1/tasks",
        json={"workflow": "noop@1", "input": {}},
        headers=auth(tok, **{"Idempotency-Key": f"k{time.time_ns()}"}),
    )
    assert r.status_code == 202, r.text
    return str(r.json()["task_id"])


def _assert_unavailable(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "unavailable"
    assert "retry" in error["message"]


@contextlib.contextmanager
def _api(store: Store, tmp_path: Path, cfg: Settings) -> Iterator[tuple[str, str]]:
    api = harness_api(store, tmp_path / "ledger.db", cfg)
    with serve(api.app) as base:
        yield base, token(cfg, "acme")


def test_every_pooled_connection_held_answers_503_within_the_pool_timeout(
    pg_database: str, tmp_path: Path
) -> None:
    cfg = _bounded_settings()
    store = Store(make_engine(pg_database, pool_size=1, cfg=cfg))
    held: list[Connection] = []
    try:
        with _api(store, tmp_path, cfg) as (base, tok), httpx.Client(timeout=CEILING_S) as http:
            task_id = _submit(http_client(http, base), tok)
            # Hold the pool's every connection (its size plus overflow) until a checkout waits
            # out the pool timeout.
            for _ in range(64):
                try:
                    held.append(store.engine.connect())
                except Exception:
                    break
            else:
                pytest.fail("the pool never ran out")
            started = time.monotonic()
            r = http.get(f"{base}/v1/tasks/{task_id}", headers=auth(tok))
            elapsed = time.monotonic() - started
            _assert_unavailable(r)
            assert elapsed < 10 * cfg.db_pool_timeout_s + 10
            for conn in held:
                conn.close()
            held.clear()
            # Given back, the same request answers.
            assert http.get(f"{base}/v1/tasks/{task_id}", headers=auth(tok)).status_code == 200
    finally:
        for conn in held:
            conn.close()
        store.dispose()


@pytest.mark.parametrize(
    ("lock_s", "statement_s"),
    [(1.0, 3.0), (0.0, 2.0)],
    ids=["lock-timeout", "statement-timeout"],
)
def test_a_row_locked_by_another_session_answers_503_within_the_lock_or_statement_timeout(
    pg_database: str, tmp_path: Path, lock_s: float, statement_s: float
) -> None:
    """The lock timeout, or with none the statement timeout, ends the wait (on the server)."""
    cfg = _bounded_settings(db_lock_timeout_s=lock_s, db_statement_timeout_s=statement_s)
    store = Store(make_engine(pg_database, cfg=cfg))
    other = make_engine(pg_database, cfg=cfg)
    try:
        with _api(store, tmp_path, cfg) as (base, tok), httpx.Client(timeout=CEILING_S) as http:
            task_id = _submit(http_client(http, base), tok)
            with other.begin() as conn:
                conn.exec_driver_sql(
                    "SELECT 1 FROM tasks WHERE id = %(id)s FOR UPDATE", {"id": task_id}
                )
                started = time.monotonic()
                r = http.post(f"{base}/v1/tasks/{task_id}/cancel", headers=auth(tok))
                elapsed = time.monotonic() - started
            _assert_unavailable(r)
            assert elapsed < 10 * (lock_s or statement_s) + 10
            # The lock gone, the cancel goes through.
            r = http.post(f"{base}/v1/tasks/{task_id}/cancel", headers=auth(tok))
            assert r.status_code in (200, 202), r.text
    finally:
        other.dispose()
        store.dispose()


class BlackHole:
    """A TCP server that accepts every connection and never sends a byte: a database host that
    hangs (or a middlebox that swallows the traffic)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted.append(conn)

    def close(self) -> None:
        self._stop.set()
        self.thread.join(timeout=5)
        for conn in self.accepted:
            conn.close()
        self.sock.close()


def test_a_server_that_never_answers_gives_503_within_the_connect_timeout(
    pg_database: str, tmp_path: Path
) -> None:
    cfg = _bounded_settings()
    hole = BlackHole()
    url = pg_database.replace("127.0.0.1:5432", f"127.0.0.1:{hole.port}")
    assert url != pg_database, "the test database is expected on 127.0.0.1:5432"
    store = Store(make_engine(url, cfg=cfg))
    try:
        with _api(store, tmp_path, cfg) as (base, tok), httpx.Client(timeout=CEILING_S) as http:
            started = time.monotonic()
            r = http.get(f"{base}/v1/tasks/tsk_nothing_here", headers=auth(tok))
            elapsed = time.monotonic() - started
            _assert_unavailable(r)
            assert elapsed < 10 * cfg.db_connect_timeout_s + 10
            assert hole.accepted, "the request never reached the silent server"
            # Readiness says the same, bounded too.
            r = http.get(f"{base}/readyz")
            assert r.status_code == 503 and r.json()["checks"]["database"] == "unavailable"
    finally:
        store.dispose()
        hole.close()


def http_client(http: httpx.Client, base: str) -> Any:
    """`http` with `base` prefixed to relative paths (the submit helper's calling convention)."""

    class _Based:
        def post(self, path: str, **kw: Any) -> httpx.Response:
            return http.post(base + path, **kw)

    return _Based()


class FreezingRelay:
    """A TCP relay to the test Postgres that can freeze: every connection stays open and
    nothing more is relayed either way (a middlebox that swallows the traffic, a connection
    that hung across an outage). The driver has no timeout of its own for that."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.frozen = threading.Event()
        self.closed = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.sock.accept()
            except OSError:
                continue
            server = socket.create_connection(self.upstream)
            self.conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(0.2)
        while not self.closed.is_set():
            if self.frozen.is_set():
                time.sleep(0.05)  # hold what arrives; relay nothing
                continue
            try:
                data = src.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            with contextlib.suppress(OSError):
                dst.sendall(data)

    def close(self) -> None:
        self.closed.set()
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.close()
        self.sock.close()


def test_a_connection_that_stops_answering_mid_request_gives_503_by_the_deadline(
    pg_database: str, tmp_path: Path
) -> None:
    cfg = _bounded_settings(api_request_timeout_s=3.0)
    relay = FreezingRelay(("127.0.0.1", 5432))
    url = pg_database.replace("127.0.0.1:5432", f"127.0.0.1:{relay.port}")
    assert url != pg_database, "the test database is expected on 127.0.0.1:5432"
    store = Store(make_engine(url, pool_size=1, cfg=cfg))
    try:
        with _api(store, tmp_path, cfg) as (base, tok), httpx.Client(timeout=CEILING_S) as http:
            task_id = _submit(http_client(http, base), tok)
            assert http.get(f"{base}/v1/tasks/{task_id}", headers=auth(tok)).status_code == 200
            relay.frozen.set()  # the pooled connection now swallows the next statement
            started = time.monotonic()
            r = http.get(f"{base}/v1/tasks/{task_id}", headers=auth(tok))
            elapsed = time.monotonic() - started
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "unavailable"
            assert elapsed < 10 * cfg.api_request_timeout_s + 10
    finally:
        relay.close()  # the abandoned request's connection fails now
        store.dispose()
