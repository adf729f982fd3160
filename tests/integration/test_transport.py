"""agent_jobs' transport (queue/transport.py) on real Redis, beside kombu's own in one process:
ours keeps a step's ack in memory and one Redis client per channel; a plain
`Connection("redis://...")` is kombu as shipped (its unacked bookkeeping, a client per command),
and the two read each other's messages (the wire format is kombu's)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kombu import Connection, Consumer, Exchange, Producer, Queue
from kombu.transport import redis as kombu_redis

import agent_jobs.queue.publisher  # noqa: F401 - imported as every process imports it
from agent_jobs.queue import step_message
from agent_jobs.queue.step_acks import STEP_TASK, StepQoS
from agent_jobs.queue.transport import StepChannel, Transport

pytestmark = [pytest.mark.redis]


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    name = f"ajtest.transport.{uuid.uuid4().hex[:10]}"
    yield Queue(name, Exchange(name, type="direct"), routing_key=name)
    client = redis.Redis.from_url(redis_url)
    client.delete(name)
    client.close()


@pytest.fixture
def ours(redis_url: str) -> Iterator[Connection]:
    with Connection(redis_url, transport=Transport) as c:
        yield c


@pytest.fixture
def plain(redis_url: str) -> Iterator[Connection]:
    with Connection(redis_url) as c:
        yield c


def _publish(conn: Connection, queue: Queue, task: str) -> None:
    with conn.channel() as ch:
        Producer(ch).publish(
            {"n": 1}, exchange=queue.exchange, routing_key=queue.routing_key,
            declare=[queue], headers={"task": task},
        )  # fmt: skip


def _receive(conn: Connection, queue: Queue) -> tuple[Any, Any]:
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


def test_a_plain_kombu_channel_in_this_process_is_kombus_own(
    plain: Connection, queue: Queue, redis_url: str
) -> None:
    """Before the transport, importing the publisher replaced kombu's Redis channel's QoS and
    `conn_or_acquire` for the whole process: this channel got both."""
    _publish(plain, queue, STEP_TASK)
    channel, message = _receive(plain, queue)
    assert type(channel) is kombu_redis.Channel
    assert type(channel.qos) is kombu_redis.QoS
    # kombu's unacked bookkeeping, even for a step message.
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.hexists(channel.unacked_key, message.delivery_tag)
        message.ack()
        assert not client.hexists(channel.unacked_key, message.delivery_tag)
    finally:
        client.close()
    # kombu builds a client per command.
    with channel.conn_or_acquire() as a, channel.conn_or_acquire() as b:
        assert a is not b
    channel.close()


def test_our_channel_keeps_one_client_and_a_steps_ack_in_memory(
    ours: Connection, queue: Queue, redis_url: str
) -> None:
    _publish(ours, queue, STEP_TASK)
    channel, message = _receive(ours, queue)
    assert type(channel) is StepChannel
    assert type(channel.qos) is StepQoS
    client = redis.Redis.from_url(redis_url)
    try:
        assert not client.hexists(channel.unacked_key, message.delivery_tag)
    finally:
        client.close()
    message.ack()
    with channel.conn_or_acquire() as a, channel.conn_or_acquire() as b:
        assert a is b
    assert not channel.closed
    channel.close()
    assert channel.closed  # what StepQoS reads to tell a channel closed with its connection


def test_the_two_transports_read_each_others_messages(
    ours: Connection, plain: Connection, queue: Queue
) -> None:
    _publish(plain, queue, STEP_TASK)
    channel, message = _receive(ours, queue)
    assert message.headers["task"] == STEP_TASK and message.payload == {"n": 1}
    message.ack()
    channel.close()
    # `put_step`, the publisher's direct path, pushes what a plain consumer reads.
    with ours.channel() as ch:
        assert isinstance(ch, StepChannel)
        Producer(ch).publish({"n": 2}, routing_key=queue.name, declare=[queue])
        ch.put_step(
            queue.name,
            step_message.message("task-3", None, queue.name, origin="t", enqueued_at=0.0),
        )
    got = []
    for _ in range(2):
        channel, message = _receive(plain, queue)
        got.append((message.headers.get("task"), message.payload))
        message.ack()
        channel.close()
    assert (None, {"n": 2}) in got
    assert any(task == STEP_TASK and payload[0] == ["task-3"] for task, payload in got)
