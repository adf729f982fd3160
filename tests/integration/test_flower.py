"""Flower shows each tenant's queue and its length: a real Flower process against the test Redis,
asked through its HTTP API (`/api/queues/length`), with a real worker (in a thread) consuming
the tenant queues.

Flower lists the queues the workers report as active, and inspects the workers when it starts:
plain `celery -A agent_jobs flower` sees the tenants being consumed at that moment (and new ones
after `/api/workers?refresh=1`); `agent-jobs flower` re-inspects on a timer, so a tenant that
becomes active later appears by itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests

from agent_jobs.core.names import tenant_queue
from agent_jobs.queue.app import app
from agent_jobs.store import Dispatch
from tests.integration.api_env import free_port, live_runtime, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
_release = threading.Event()
_started = threading.Event()


@app.task(name="tests.flower.block", ignore_result=True, acks_late=True)
def block() -> None:
    """Holds the worker's only slot, so messages stay queued where Flower can count them."""
    _started.set()
    _release.wait(60)


@pytest.fixture
def worker(pg_database: str, pg_store: Any, redis_url: str) -> Iterator[Any]:
    from agent_jobs.queue.embedded import EmbeddedWorker

    _release.clear()
    _started.clear()
    name = f"flower-test-{uuid.uuid4().hex[:6]}@localhost"
    with (
        live_runtime(pg_database) as runtime,
        EmbeddedWorker(concurrency=1, beat_enabled=False, hostname=name),
    ):
        try:
            yield runtime
        finally:
            _release.set()


# Flower runs behind basic auth, as `agent-jobs flower` requires; its API is never opened up with
# FLOWER_UNAUTHENTICATED_API.
AUTH = ("ops", "flower-test-password")


def start_flower(command: list[str], port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "FLOWER_UNAUTHENTICATED_API"}
    env["FLOWER_BASIC_AUTH"] = ":".join(AUTH)
    out = log.open("wb")
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"flower exited: {log.read_text()[-2000:]}")
        try:
            return requests.get(f"http://127.0.0.1:{port}/healthcheck", auth=AUTH, timeout=1).ok
        except requests.ConnectionError:
            return False

    wait_until("Flower to answer", up, timeout_s=60)
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def queue_lengths(port: int) -> dict[str, int]:
    r = requests.get(f"http://127.0.0.1:{port}/api/queues/length", auth=AUTH, timeout=10)
    r.raise_for_status()
    return {q["name"]: q["messages"] for q in r.json()["active_queues"]}


def activate(runtime: Any, tenant: str) -> str:
    """Make the worker consume `tenant`'s queue, as the first step of its first task does."""
    runtime.publisher.publish(Dispatch(f"tsk_{uuid.uuid4().hex}", tenant))  # a harmless no-op
    return tenant_queue(runtime.settings.queue_prefix, tenant)


def hold_messages(runtime: Any, queue: str, tenant: str, n: int) -> None:
    """Occupy the worker, then queue `n` step messages behind it."""
    app.send_task("tests.flower.block", queue=queue)
    assert _started.wait(30), "the worker did not take the blocking task"
    for _ in range(n):
        runtime.publisher.publish(Dispatch(f"tsk_{uuid.uuid4().hex}", tenant))
    client = redis.Redis.from_url(runtime.settings.broker_url)
    wait_until("the messages to be queued", lambda: client.llen(queue) == n)


def test_flower_lists_tenant_queues_and_their_lengths(
    worker: Any, tmp_path: Path, tenant: str
) -> None:
    first = activate(worker, tenant)
    wait_until("the worker to consume the tenant", lambda: _consuming(worker, first))
    port = free_port()
    proc = start_flower(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "agent_jobs",
            "flower",
            f"--port={port}",
            "--address=127.0.0.1",
        ],
        port,
        tmp_path / "flower.log",
    )
    try:
        lengths = wait_until("Flower to list the tenant", lambda: _with(port, first))
        assert lengths[first] == 0
        # A second tenant becomes active after Flower started; three of its messages wait.
        second_tenant = f"{tenant}b"
        second = activate(worker, second_tenant)
        wait_until("the worker to consume it", lambda: _consuming(worker, second))
        hold_messages(worker, second, second_tenant, 3)
        requests.get(
            f"http://127.0.0.1:{port}/api/workers?refresh=1", auth=AUTH, timeout=30
        ).raise_for_status()
        lengths = wait_until("Flower to count it", lambda: _with(port, second, 3))
        assert lengths[second] == 3 and lengths[first] == 0
    finally:
        stop(proc)


def test_agent_jobs_flower_picks_up_new_tenants_by_itself(
    worker: Any, tmp_path: Path, tenant: str
) -> None:
    port = free_port()
    proc = start_flower(
        [
            sys.executable,
            "-m",
            "agent_jobs.cli",
            "flower",
            "--refresh-s",
            "0.5",
            "--",
            f"--port={port}",
            "--address=127.0.0.1",
        ],
        port,
        tmp_path / "flower.log",
    )
    try:
        queue = activate(worker, tenant)  # after Flower started
        wait_until("the worker to consume it", lambda: _consuming(worker, queue))
        hold_messages(worker, queue, tenant, 2)
        lengths = wait_until("Flower to show it unasked", lambda: _with(port, queue, 2))
        assert lengths[queue] == 2
    finally:
        stop(proc)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--", "--port=0"], "FLOWER_BASIC_AUTH"),
        (["--unauthenticated", "--", "--port=0", "--address=0.0.0.0"], "127.0.0.1 only"),
    ],
)
def test_agent_jobs_flower_refuses_to_serve_without_authentication(
    args: list[str], needle: str
) -> None:
    """No credentials, or unauthenticated on a public address: one line, a non-zero exit, and
    nothing listening. (FLOWER_UNAUTHENTICATED_API in the environment does not count.)"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWER_")}
    env["FLOWER_UNAUTHENTICATED_API"] = "true"
    proc = subprocess.run(
        [sys.executable, "-m", "agent_jobs.cli", "flower", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("agent-jobs: error:"), proc.stderr
    assert needle in lines[0]


def test_agent_jobs_flower_unauthenticated_is_local_only(tmp_path: Path) -> None:
    """`--unauthenticated` (local use) serves on 127.0.0.1, whatever address Flower defaults to."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWER_")}
    log = tmp_path / "flower.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent_jobs.cli", "flower", "--unauthenticated", "--refresh-s",
         "0", "--", f"--port={port}"],
        cwd=REPO, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:

        def up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"flower exited: {log.read_text()[-2000:]}")
            try:
                return requests.get(f"http://127.0.0.1:{port}/healthcheck", timeout=1).ok
            except requests.ConnectionError:
                return False

        wait_until("Flower to answer", up, timeout_s=60)
        assert f"http://127.0.0.1:{port}/" in log.read_text()
    finally:
        stop(proc)


def _with(port: int, queue: str, n: int | None = None) -> dict[str, int] | None:
    lengths = queue_lengths(port)
    if queue in lengths and (n is None or lengths[queue] == n):
        return lengths
    return None


def _consuming(runtime: Any, queue: str) -> bool:
    replies = app.control.inspect(timeout=1).active_queues() or {}
    return any(queue in {q["name"] for q in qs} for qs in replies.values())
