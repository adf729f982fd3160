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
from agent_jobs.queue.step_acks import STEP_TASK
from agent_jobs.queue.transport import Transport


@pytest.fixture
def queue() -> Queue:
    name = f"ajtest.acks.{uuid.uuid4().hex[:10]}"
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    """A plain client on the test Redis, to look at what kombu left there."""
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


@pytest.fixture
def conn(redis_url: str, queue: Queue, client: redis.Redis) -> Iterator[Connection]:
    with Connection(redis_url, transport=Transport) as c:
        yield c
    client.delete(queue.name)


def _publish(conn: Connection, queue: Queue, task: str) -> None:
    with conn.channel() as ch:
        Producer(ch).publish(
            {"n": 1}, exchange=queue.exchange, routing_key=queue.routing_key,
            declare=[queue], headers={"task": task},
        )  # fmt: skip


def _delivered(conn: Connection, queue: Queue, task: str) -> tuple[Any, Any]:
    """Publish one message of `task` and receive it (prefetch 1, not acked): the consuming
    channel and the message."""
    _publish(conn, queue, task)
    channel = conn.channel()
    got: list[Any] = []
    consumer = Consumer(channel, [queue], callbacks=[lambda body, msg: got.append(msg)])
    consumer.qos(prefetch_count=1)
    consumer.consume()
    for _ in range(50):
        if got:
            break
        with contextlib.suppress(TimeoutError):
            conn.drain_events(timeout=0.1)
    assert got, "received nothing"
    return channel, got[0]


def _unacked(client: redis.Redis, tag: str) -> bool:
    return bool(client.hexists("unacked", tag))


def _assert_kombus_bookkeeping(client: redis.Redis, message: Any) -> None:
    """In kombu's unacked hash while unacknowledged, gone after the ack."""
    tag = message.delivery_tag
    assert _unacked(client, tag)
    message.ack()
    assert not _unacked(client, tag)


def test_a_step_message_leaves_no_unacked_record_in_redis(
    conn: Connection, queue: Queue, client: redis.Redis
) -> None:
    channel, message = _delivered(conn, queue, STEP_TASK)
    assert not _unacked(client, message.delivery_tag)
    # The prefetch limit still counts it: no second message while this one is not acked.
    assert not channel.qos.can_consume()
    message.ack()
    assert channel.qos.can_consume()
    assert client.llen(queue.name) == 0


def test_any_other_message_keeps_kombus_bookkeeping(
    conn: Connection, queue: Queue, client: redis.Redis
) -> None:
    _, message = _delivered(conn, queue, "agent_jobs.bench.chain_hop")
    _assert_kombus_bookkeeping(client, message)


def test_broker_mode_keeps_kombus_bookkeeping_for_steps(
    conn: Connection, queue: Queue, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(step_acks, "_memory_acks", lambda: False)  # AGENT_JOBS_STEP_ACKS=broker
    _, message = _delivered(conn, queue, STEP_TASK)
    _assert_kombus_bookkeeping(client, message)


def test_a_warm_shutdown_puts_an_unacked_step_back(
    conn: Connection, queue: Queue, client: redis.Redis
) -> None:
    channel, _ = _delivered(conn, queue, STEP_TASK)
    assert client.llen(queue.name) == 0
    channel.qos.restore_unacked_once()  # what kombu does when the channel closes
    assert client.llen(queue.name) == 1
    body = client.lindex(queue.name, 0)
    assert body is not None and b'"redelivered": true' in body


def test_a_requeued_step_goes_back_to_its_queue_as_kombu_requeues(
    conn: Connection, queue: Queue, client: redis.Redis
) -> None:
    channel, message = _delivered(conn, queue, STEP_TASK)
    _publish(conn, queue, "other.task")
    message.reject(requeue=True)
    # Where kombu's own requeue puts a message: behind what is waiting (kombu publishes with
    # LPUSH and reads from the right).
    assert client.llen(queue.name) == 2
    last = client.lindex(queue.name, 0)
    assert last is not None and STEP_TASK.encode() in last
    assert channel.qos.can_consume()
