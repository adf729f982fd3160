"""Webhooks through real Celery workers (`celery -A agent_jobs worker`), real Redis, real
Postgres and a real receiver on 127.0.0.1 verifying with `standardwebhooks`.

Two losses a delivery must survive, in one run: its message gone between the commit and the
delivery (a broker that lost it, a publish that never happened), and its worker SIGKILLed while
the POST is in flight. Every event arrives, in order per task, and the only duplicates carry
the same `webhook-id`. Beat's part (the `webhooks` sweeper) is done by the test; timers move in SQL.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import update
from standardwebhooks import Webhook

from agent_jobs.bench.procs import WorkerProcess
from agent_jobs.core.names import tenant_queue
from agent_jobs.notify.service import WebhookService
from agent_jobs.store.guard import Guard
from agent_jobs.store.schema import webhook_deliveries
from agent_jobs.store.types import db_now_plus
from agent_jobs.store.webhooks import WebhookStore
from tests.contract.support import S, running, to
from tests.support.live import live_runtime, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.redis, pytest.mark.slow]


class Receiver:
    """Answers 204, or (`hang`) holds each request until released: a delivery in flight."""

    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.answered: list[str] = []
        self.hang = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with rec.lock:
                    rec.got.append((headers, body))
                if rec.hang.is_set():
                    rec.release.wait(30)
                    return  # the sender is gone by now: no answer
                self.send_response(204)
                self.end_headers()
                with rec.lock:
                    rec.answered.append(headers["webhook-id"])

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def setup(
    pg_database: str, redis_url: str, tmp_path: Path
) -> Iterator[tuple[Any, dict[str, str], Receiver, list[WorkerProcess]]]:
    env = {
        "AGENT_JOBS_DATABASE_URL": pg_database,
        "AGENT_JOBS_WEBHOOK_ALLOW_NETWORKS": "127.0.0.1/32",
        "AGENT_JOBS_WEBHOOK_ALLOW_HTTP": "1",
        "AGENT_JOBS_WEBHOOK_TIMEOUT_S": "20",
    }
    rec = Receiver()
    workers: list[WorkerProcess] = []
    with live_runtime(**env) as (rt, wenv):
        try:
            yield rt, wenv, rec, workers
        finally:
            for w in workers:
                w.stop()
            rec.close()


def _start(workers: list[WorkerProcess], env: dict[str, str], name: str, tmp: Path) -> Any:
    w = WorkerProcess(env, name=name, log=tmp / f"{name}.log", concurrency=1)
    workers.append(w)
    w.wait_ready()
    return w


def _events(rt: Any, tenant: str, n: int) -> list[str]:
    """`n` tasks of `tenant`; each asks for an approval, then escalates (the approval sweeper's
    path, its own transaction): two events per task, in that order."""
    from agent_jobs.store.transition import apply
    from tests.contract.support import action, park_for_approval

    ids = []
    for i in range(n):
        lease = running(rt.store, tenant)
        parked = rt.store.transition(
            Guard.lease(lease), park_for_approval(action(key=f"k{i}"), f"apr_{tenant}_{i}")
        )
        with rt.store.tx() as conn:
            apply(rt.store.backend, conn, Guard.seen(parked.task), to(S.ESCALATED, "expired"))
        ids.append(lease.task_id)
    return ids


def _all_due(rt: Any) -> None:
    d = webhook_deliveries
    with rt.store.tx() as conn:
        conn.execute(
            update(d)
            .where(d.c.status == "pending")
            .values(next_attempt_at=db_now_plus(-1.0), updated_at=db_now_plus(-3600.0))
        )


def _check(rec: Receiver, secret: str, ids: list[str], ws: WebhookStore, tenant: str) -> None:
    wh = Webhook(secret)
    payloads = {h["webhook-id"]: wh.verify(b, h) for h, b in rec.got}
    rows = ws.deliveries(tenant, limit=500)
    assert {r.status for r in rows} == {"delivered"}
    assert len(rows) == 2 * len(ids)
    # Every event arrived, once answered; anything seen twice had the same id.
    assert sorted(set(rec.answered)) == sorted(r.msg_id for r in rows)
    assert set(payloads) == {r.msg_id for r in rows}
    # In order per task: its approval.requested answered before its task.escalated.
    order = {m: i for i, m in enumerate(rec.answered)}
    for task_id in ids:
        mine = sorted((r for r in rows if r.task_id == task_id), key=lambda r: r.id)
        assert [r.event_type for r in mine] == ["approval.requested", "task.escalated"]
        assert order[mine[0].msg_id] < order[mine[1].msg_id]


def test_lost_messages_and_a_worker_killed_mid_post(
    setup: tuple[Any, dict[str, str], Receiver, list[WorkerProcess]], tmp_path: Path, tenant: str
) -> None:
    """Events committed while no worker runs, and every message of them lost; then a worker
    that takes one and is SIGKILLed with its POST in flight; then another worker and beat's
    sweeps (here, by hand): every event delivered once answered, in order per task, and the
    killed attempt's event sent again with the same webhook-id."""
    rt, env, rec, workers = setup
    ws = WebhookStore(rt.store.engine)
    secret = (
        WebhookService(ws, rt.settings)
        .register(tenant, rec.url, ["approval.requested", "task.escalated"])
        .secret
    )
    ids = _events(rt, tenant, 4)  # committed and published: no worker is running
    queue = tenant_queue(rt.settings.queue_prefix, tenant)
    client = redis.Redis.from_url(env["AGENT_JOBS_BROKER_URL"])
    assert client.llen(queue) >= 4
    client.delete(queue)  # ...and every message is lost
    rec.hang.set()
    w1 = _start(workers, env, "w1", tmp_path)
    _all_due(rt)
    rt.sweepers.run("webhooks")  # beat finds them due: published again
    wait_until("a POST in flight", lambda: len(rec.got) >= 1, 30)
    w1.sigkill()
    rec.hang.clear()
    rec.release.set()
    _start(workers, env, "w2", tmp_path)
    # The killed attempt's claim holds its row for its lease: the lease lapses (moved in SQL).
    _all_due(rt)

    def done() -> bool:
        rt.sweepers.run("webhooks")
        return bool(ws.delivery_counts(tenant)["delivered"] == 8)

    wait_until("every event delivered", done, 90, every_s=0.3)
    _check(rec, secret, ids, ws, tenant)
    first = rec.got[0][0]["webhook-id"]
    assert sum(h["webhook-id"] == first for h, _ in rec.got) >= 2  # sent again, same id
