"""The ready ring (queue/ready_ring.py) through agent_jobs' kombu channel, on real Redis: a
worker that consumes the ring's queue is served every tenant queue in turn, with a fetch whose
size does not grow with the tenants it consumes; a message put back, or published by a client
that does not know the ring, is served too."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kombu import Connection, Consumer, Exchange, Producer, Queue

from agent_jobs.core.names import STEP_TASK, tenant_queue
from agent_jobs.queue.ready_ring import ReadyRing
from agent_jobs.queue.transport import Transport
from tests.support.live import live_env

pytestmark = pytest.mark.redis


@pytest.fixture
def ring(redis_url: str) -> Iterator[ReadyRing]:
    prefix = f"rr{uuid.uuid4().hex[:8]}"
    with live_env(AGENT_JOBS_BROKER_URL=redis_url, AGENT_JOBS_QUEUE_PREFIX=prefix):
        yield ReadyRing(prefix)
    client = redis.Redis.from_url(redis_url)
    for pattern in (f"{prefix}:*", f"{prefix}.*", f"_kombu.binding.{prefix}.*"):
        for key in client.scan_iter(pattern):
            client.delete(key)


@pytest.fixture
def conn(redis_url: str, ring: ReadyRing) -> Iterator[Connection]:
    with Connection(redis_url, transport=Transport, transport_options={"priority_steps": [0]}) as c:
        yield c


def _q(name: str) -> Queue:
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


def _publish(conn: Connection, queue: str, n: int, task: str = STEP_TASK) -> None:
    with conn.channel() as ch:
        for i in range(n):
            # The anonymous exchange, as the step publisher sends (routing key = queue name).
            Producer(ch).publish(
                {"q": queue, "i": i}, exchange="", routing_key=queue, headers={"task": task}
            )


def _receive(conn: Connection, queues: list[str], n: int, *, ack: bool = True) -> list[Any]:
    """Consume `queues` (prefetch 1) until `n` messages arrived or nothing more comes."""
    channel = conn.channel()
    got: list[Any] = []

    def on(body: Any, message: Any) -> None:
        got.append((body, message))
        if ack:
            message.ack()

    consumer = Consumer(channel, [_q(q) for q in queues], callbacks=[on])
    consumer.qos(prefetch_count=1)
    consumer.consume()
    idle = 0
    while len(got) < n and idle < 15:
        before = len(got)
        with contextlib.suppress(TimeoutError):
            conn.drain_events(timeout=0.2)
        idle = idle + 1 if len(got) == before else 0
    return got


def test_consuming_the_ring_serves_every_tenant_in_turn(
    conn: Connection, ring: ReadyRing, redis_url: str
) -> None:
    a, b, c = (tenant_queue(ring.prefix, t) for t in ("a", "b", "c"))
    _publish(conn, a, 3)
    _publish(conn, b, 1)
    _publish(conn, c, 2)
    # The worker consumes only the ring's queue: no tenant queue is named in its fetch.
    got = _receive(conn, [ring.queue], 6)
    order = [body["q"].rsplit(".", 1)[1] for body, _ in got]
    assert order == ["a", "b", "c", "a", "c", "a"]  # one step per tenant per turn
    client = redis.Redis.from_url(redis_url)
    assert client.llen(ring.ring) == 0 and client.scard(ring.members) == 0
    # The message keeps its tenant queue as its routing key (what a requeue goes back to).
    assert got[0][1].delivery_info["routing_key"] == a


def test_the_fetch_names_no_tenant_queue_however_many_are_consumed(
    conn: Connection, ring: ReadyRing, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenants = [tenant_queue(ring.prefix, f"t{i}") for i in range(300)]
    _publish(conn, tenants[-1], 1)
    fetches: list[tuple[Any, ...]] = []
    send = redis.connection.AbstractConnection.send_command

    def record(self: Any, *args: Any, **kwargs: Any) -> None:
        if args and args[0] in ("BRPOP", "EVALSHA"):
            fetches.append(args)
        send(self, *args, **kwargs)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_command", record)
    got = _receive(conn, [ring.queue, *tenants], 1)
    assert [body["q"] for body, _ in got] == [tenants[-1]]
    assert fetches and max(len(args) for args in fetches) < 10, [len(a) for a in fetches]
    assert not any(q in args for args in fetches for q in tenants)


def test_a_message_put_back_is_served_from_the_ring_again(
    conn: Connection, ring: ReadyRing, redis_url: str
) -> None:
    queue = tenant_queue(ring.prefix, "acme")
    _publish(conn, queue, 1)
    channel = conn.channel()
    got: list[Any] = []
    consumer = Consumer(channel, [_q(ring.queue)], callbacks=[lambda b, m: got.append(m)])
    consumer.qos(prefetch_count=1)
    consumer.consume()
    for _ in range(20):
        if got:
            break
        with contextlib.suppress(TimeoutError):
            conn.drain_events(timeout=0.2)
    assert got
    client = redis.Redis.from_url(redis_url)
    assert client.scard(ring.members) == 0  # its last message taken: out of the ring
    got[0].reject(requeue=True)  # a step put back (as a warm shutdown or a requeue does)
    assert client.llen(queue) == 1 and client.sismember(ring.members, queue)
    again = _receive(conn, [ring.queue], 1)
    assert [body["q"] for body, _ in again] == [queue]


def test_a_message_published_without_the_ring_is_served_once_enrolled(
    conn: Connection, ring: ReadyRing, redis_url: str
) -> None:
    queue = tenant_queue(ring.prefix, "old")
    # kombu's own transport (an older release's publisher): the list only, no ring.
    with Connection(redis_url) as plain:
        _publish(plain, queue, 1)
    assert _receive(conn, [ring.queue], 1) == []
    client = redis.Redis.from_url(redis_url)
    assert ring.enroll(client, [queue, tenant_queue(ring.prefix, "empty")]) == 1
    assert [body["q"] for body, _ in _receive(conn, [ring.queue], 1)] == [queue]


def test_a_ring_entry_whose_queue_was_emptied_leaves_the_ring(
    conn: Connection, ring: ReadyRing, redis_url: str
) -> None:
    gone, kept = tenant_queue(ring.prefix, "gone"), tenant_queue(ring.prefix, "kept")
    _publish(conn, gone, 2)
    _publish(conn, kept, 1)
    client = redis.Redis.from_url(redis_url)
    client.delete(gone)  # purged behind the ring's back
    assert [body["q"] for body, _ in _receive(conn, [ring.queue], 2)] == [kept]
    assert client.llen(ring.ring) == 0 and client.scard(ring.members) == 0


def test_other_queues_are_served_beside_a_busy_ring(conn: Connection, ring: ReadyRing) -> None:
    control = f"{ring.prefix}.control"
    busy = tenant_queue(ring.prefix, "busy")
    _publish(conn, busy, 6)
    _publish(conn, control, 2, task="agent_jobs.sweep.lease")
    got = _receive(conn, [control, ring.queue], 8)
    order = [body["q"] for body, _ in got]
    # Sweeps are not starved by a ring that always has work: both are served within 4 fetches.
    assert order[:4].count(control) == 2
