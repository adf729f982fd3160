"""The step message built directly (`queue/step_message.py`) is the one Celery and kombu build,
on the real Redis broker: field by field, body decoded; and the publisher leaves the direct
path whenever it could differ (a foreign publish-signal receiver) or fails."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import signals
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SESSION_PREFIX

pytestmark = [pytest.mark.redis]

_PER_MESSAGE = ("id", "root_id", "aj-enqueued-at")


@pytest.fixture
def publisher(redis_url: str) -> Any:
    from agent_jobs.core.names import ENQUEUED_AT_RECEIVER
    from agent_jobs.obs.metrics import stamp_enqueued_at
    from agent_jobs.queue.app import app
    from agent_jobs.queue.publisher import CeleryPublisher

    # As the runtime wires it (queue/runtime.py): the one receiver the direct path stands in for.
    signals.before_task_publish.connect(
        stamp_enqueued_at, weak=False, dispatch_uid=ENQUEUED_AT_RECEIVER
    )
    return CeleryPublisher(app, directory=None, prefix=SESSION_PREFIX)  # type: ignore[arg-type]


@pytest.fixture
def broker(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def _queue() -> str:
    return f"{SESSION_PREFIX}.stepmsg.{uuid.uuid4().hex[:8]}"


def _pop(broker: redis.Redis, queue: str) -> dict[str, Any]:
    raw = broker.rpop(queue)
    assert raw is not None, f"nothing on {queue}"
    assert broker.llen(queue) == 0, "one publish, one message"
    message: dict[str, Any] = json.loads(raw)
    return message


def _via_celery(publisher: Any, task_id: str, queue: str, carried: Any) -> None:
    publisher._direct_conf = False
    try:
        publisher._send_step(task_id, queue, carried)
    finally:
        publisher._direct_conf = None


def _comparable(message: dict[str, Any]) -> dict[str, Any]:
    headers = {k: v for k, v in message["headers"].items() if k not in _PER_MESSAGE}
    props = {
        k: v
        for k, v in message["properties"].items()
        if k not in ("correlation_id", "delivery_tag")
    }
    body = json.loads(base64.b64decode(message["body"]))
    rest = {k: v for k, v in message.items() if k not in ("headers", "properties", "body")}
    return {"headers": headers, "properties": props, "body": body, **rest}


def _check_ids(message: dict[str, Any]) -> None:
    headers, props = message["headers"], message["properties"]
    assert headers["id"] == headers["root_id"] == props["correlation_id"]
    assert props["delivery_tag"] != headers["id"]
    assert abs(headers["aj-enqueued-at"] - time.time()) < 60


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    task_id=st.text(min_size=1, max_size=40),
    carried=st.none()
    | st.just({"claim": 1})
    | st.dictionaries(
        st.text(max_size=10),
        st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=30),
        max_size=6,
    ),
)
def test_the_direct_message_is_the_one_celery_builds(
    publisher: Any, broker: redis.Redis, task_id: str, carried: Any
) -> None:
    queue = _queue()
    assert publisher._direct_channel() is not None, "the direct path applies here"
    publisher._send_step(task_id, queue, carried)
    direct = _pop(broker, queue)
    _via_celery(publisher, task_id, queue, carried)
    celery = _pop(broker, queue)
    _check_ids(direct)
    _check_ids(celery)
    assert _comparable(direct) == _comparable(celery)
    expected_args = [task_id] if carried is None else [task_id, carried]
    assert _comparable(direct)["body"][0] == expected_args


def test_a_foreign_publish_receiver_gets_celerys_path(publisher: Any, broker: redis.Redis) -> None:
    heard: list[str] = []

    def listener(headers: dict[str, Any] | None = None, **_: Any) -> None:
        heard.append((headers or {}).get("task", ""))

    signals.before_task_publish.connect(listener, weak=False, dispatch_uid="test.foreign")
    try:
        assert publisher._direct_channel() is None
        queue = _queue()
        publisher._send_step("t-1", queue)
        assert _comparable(_pop(broker, queue))["body"][0] == ["t-1"]
    finally:
        signals.before_task_publish.disconnect(dispatch_uid="test.foreign")
    assert heard == ["agent_jobs.step"]
    assert publisher._direct_channel() is not None


def test_a_failed_direct_push_is_sent_through_celery_once(
    publisher: Any,
    broker: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    channel = publisher._direct_channel()
    assert channel is not None

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise redis.ConnectionError("refused")

    monkeypatch.setattr(channel, "_put", refuse)
    queue = _queue()
    publisher._send_step("t-2", queue, {"claim": 1})
    message = _pop(broker, queue)
    assert _comparable(message)["body"][0] == ["t-2", {"claim": 1}]
    assert "ConnectionError: refused" in caplog.text  # the operator sees why
