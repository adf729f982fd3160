"""Step messages' acks kept in the worker's memory (queue/step_acks.py), on real Redis: no
unacked bookkeeping in Redis for a step, the same for any other message, the prefetch limit
unchanged, and a warm shutdown or a requeue puts a step message back from memory."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kombu import Connection, Consumer, Exchange, Producer, Queue

from agent_jobs.queue import step_acks
from agent_jobs.queue.step_acks import STEP_TASK, install_step_acks


@pytest.fixture
def queue() -> Queue:
    name = f"ajtest.acks.{uuid.uuid4().hex[:10]}"
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


@pytest.fixture
def conn(redis_url: str, queue: Queue) -> Iterator[Connection]:
    install_step_acks()
    with Connection(redis_url) as c:
        yield c
    client = redis.Redis.from_url(redis_url)
    client.delete(queue.name)
    client.close()


def _publish(conn: Connection, queue: Queue, task: str) -> None:
    with conn.channel() as ch:
        Producer(ch).publish(
            {"n": 1}, exchange=queue.exchange, routing_key=queue.routing_key,
            declare=[queue], headers={"task": task},
        )  # fmt: skip


def _receive(conn: Connection, queue: Queue, *, prefetch: int = 1) -> tuple[Any, list[Any]]:
    channel = conn.channel()
    got: list[Any] = []
    consumer = Consumer(channel, [queue], callbacks=[lambda body, msg: got.append(msg)])
    consumer.qos(prefetch_count=prefetch)
    consumer.consume()
    return channel, got


def _drain(conn: Connection, got: list[Any], want: int) -> None:
    for _ in range(50):
        if len(got) >= want:
            return
        with contextlib.suppress(TimeoutError):
            conn.drain_events(timeout=0.1)
    assert len(got) >= want, f"received {len(got)} of {want}"


def _unacked(redis_url: str, tag: str) -> bool:
    client = redis.Redis.from_url(redis_url)
    try:
        return bool(client.hexists("unacked", tag))
    finally:
        client.close()


def _length(redis_url: str, queue: Queue) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        return int(client.llen(queue.name))
    finally:
        client.close()


def test_a_step_message_leaves_no_unacked_record_in_redis(
    conn: Connection, queue: Queue, redis_url: str
) -> None:
    _publish(conn, queue, STEP_TASK)
    channel, got = _receive(conn, queue)
    _drain(conn, got, 1)
    assert not _unacked(redis_url, got[0].delivery_tag)
    # The prefetch limit still counts it: no second message while this one is not acked.
    assert not channel.qos.can_consume()
    got[0].ack()
    assert channel.qos.can_consume()
    assert _length(redis_url, queue) == 0


def test_any_other_message_keeps_kombus_bookkeeping(
    conn: Connection, queue: Queue, redis_url: str
) -> None:
    _publish(conn, queue, "agent_jobs.bench.chain_hop")
    _channel, got = _receive(conn, queue)
    _drain(conn, got, 1)
    tag = got[0].delivery_tag
    assert _unacked(redis_url, tag)
    got[0].ack()
    assert not _unacked(redis_url, tag)


def test_broker_mode_keeps_kombus_bookkeeping_for_steps(
    conn: Connection, queue: Queue, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(step_acks, "_memory_acks", lambda: False)  # AGENT_JOBS_STEP_ACKS=broker
    _publish(conn, queue, STEP_TASK)
    _channel, got = _receive(conn, queue)
    _drain(conn, got, 1)
    tag = got[0].delivery_tag
    assert _unacked(redis_url, tag)
    got[0].ack()
    assert not _unacked(redis_url, tag)


def test_a_warm_shutdown_puts_an_unacked_step_back(
    conn: Connection, queue: Queue, redis_url: str
) -> None:
    _publish(conn, queue, STEP_TASK)
    channel, got = _receive(conn, queue)
    _drain(conn, got, 1)
    assert _length(redis_url, queue) == 0
    channel.qos.restore_unacked_once()  # what kombu does when the channel closes
    assert _length(redis_url, queue) == 1
    body = redis.Redis.from_url(redis_url).lindex(queue.name, 0)
    assert body is not None and b'"redelivered": true' in body


def test_a_requeued_step_goes_back_to_its_queue_as_kombu_requeues(
    conn: Connection, queue: Queue, redis_url: str
) -> None:
    _publish(conn, queue, STEP_TASK)
    channel, got = _receive(conn, queue)
    _drain(conn, got, 1)
    _publish(conn, queue, "other.task")
    got[0].reject(requeue=True)
    client = redis.Redis.from_url(redis_url)
    try:
        # Where kombu's own requeue puts a message: behind what is waiting (kombu publishes with
        # LPUSH and reads from the right).
        assert client.llen(queue.name) == 2
        last = client.lindex(queue.name, 0)
    finally:
        client.close()
    assert last is not None and STEP_TASK.encode() in last
    assert channel.qos.can_consume()
