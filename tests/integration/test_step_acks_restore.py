"""The restore of unacked messages when a consumer closes a connection the broker dropped, and a
later ack through that closed channel, never raise (queue/step_acks.py). By then the connection
may already have been collected: the transport's `client` is None, and making the channel's pool
again raised `AttributeError: 'NoneType' object has no attribute 'hostname'` (or 'client', for
the ack), which escaped Celery's reconnect handler and its event loop, and shut the worker down
(once with exit status 0)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kombu import Connection, Consumer, Exchange, Producer, Queue

from agent_jobs.queue.step_acks import STEP_TASK
from agent_jobs.queue.transport import Transport

pytestmark = [pytest.mark.redis]


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    name = f"ajtest.restore.{uuid.uuid4().hex[:10]}"
    yield Queue(name, Exchange(name, type="direct"), routing_key=name)
    client = redis.Redis.from_url(redis_url)
    client.delete(name)
    client.close()


def _receive(conn: Connection, queue: Queue, tasks: list[str]) -> tuple[Any, list[Any]]:
    """Publish one message per task name and receive them all, unacked, on one channel."""
    with conn.channel() as ch:
        for task in tasks:
            Producer(ch).publish(
                {"n": 1}, exchange=queue.exchange, routing_key=queue.routing_key,
                declare=[queue], headers={"task": task},
            )  # fmt: skip
    channel = conn.channel()
    got: list[Any] = []
    consumer = Consumer(channel, [queue], callbacks=[lambda body, msg: got.append(msg)])
    consumer.qos(prefetch_count=len(tasks))
    consumer.consume()
    for _ in range(100):
        if len(got) == len(tasks):
            break
        with contextlib.suppress(TimeoutError):
            conn.drain_events(timeout=0.1)
    assert len(got) == len(tasks), "received too few"
    return channel, got


@pytest.mark.parametrize("tasks", [[STEP_TASK], ["plain.task"], [STEP_TASK, "plain.task"]])
def test_closing_a_collected_channel_with_unacked_messages_does_not_raise(
    redis_url: str, queue: Queue, tasks: list[str]
) -> None:
    conn = Connection(redis_url, transport=Transport)
    try:
        channel, got = _receive(conn, queue, tasks)
        assert len(channel.qos._delivered) == len(tasks)
        # What Celery's reconnect handler leaves: the connection collected (the transport's
        # client gone), the channel's pools disconnected, its messages still unacked.
        channel._disconnect_pools()
        channel.__dict__.pop("_agent_jobs_client", None)
        channel.connection.client = None
        channel.close()  # raised AttributeError ('NoneType' ... 'hostname') before
        assert not channel.qos._delivered
        assert channel.qos._delivered.restored
        # A late-acked task finishing after the worker reconnected acks through this closed
        # channel: that raised AttributeError ('NoneType' ... 'client') into Celery's event loop.
        for message in got:
            message.ack()
    finally:
        with contextlib.suppress(Exception):
            conn.release()
