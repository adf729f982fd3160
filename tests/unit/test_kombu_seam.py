"""The kombu and Celery internals agent_jobs' transport (queue/transport.py) and step acks
(queue/step_acks.py) override or call, with the shapes they rely on. celery and kombu are pinned
to their major version; an upgrade within it that renames, removes or reshapes one of these
fails here, loudly, instead of in a worker."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
from celery import Celery
from celery.app.amqp import AMQP as CeleryAMQP
from hypothesis import given
from hypothesis import strategies as st
from kombu.connection import Connection as KombuConnection
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

import agent_jobs.queue.publisher  # noqa: F401 - imported as every process imports it
from agent_jobs.config import Settings
from agent_jobs.queue import transport
from agent_jobs.queue.celery_config import celery_settings
from agent_jobs.queue.step_acks import StepQoS


def _params(fn: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


P = inspect.Parameter
SELF = ("self", P.POSITIONAL_OR_KEYWORD, P.empty)


def _arg(name: str, default: Any = P.empty) -> tuple[str, Any, Any]:
    return (name, P.POSITIONAL_OR_KEYWORD, default)


# (owner, attribute, the parameters we call or override it with)
METHODS: list[tuple[type, str, list[tuple[str, Any, Any]]]] = [
    # StepQoS overrides these and calls them on super()
    (kombu_redis.QoS, "append", [SELF, _arg("message"), _arg("delivery_tag")]),
    (kombu_redis.QoS, "ack", [SELF, _arg("delivery_tag")]),
    (kombu_redis.QoS, "reject", [SELF, _arg("delivery_tag"), _arg("requeue", False)]),
    (kombu_redis.QoS, "restore_unacked", [SELF, _arg("client", None)]),
    (kombu_redis.QoS, "_flush", [SELF]),
    # ... and the in-memory half directly (a step message's ack)
    (virtual.QoS, "append", [SELF, _arg("message"), _arg("delivery_tag")]),
    (virtual.QoS, "ack", [SELF, _arg("delivery_tag")]),
    (virtual.QoS, "__init__", [SELF, _arg("channel"), _arg("prefetch_count", 0)]),
    # StepQoS._put_back and StepChannel
    (
        kombu_redis.Channel,
        "_do_restore_message",
        [
            SELF,
            _arg("payload"),
            _arg("exchange"),
            _arg("routing_key"),
            _arg("pipe"),
            _arg("leftmost", False),
        ],
    ),
    (
        kombu_redis.Channel,
        "_put",
        [SELF, _arg("queue"), _arg("message"), ("kwargs", P.VAR_KEYWORD, P.empty)],
    ),
    (kombu_redis.Channel, "conn_or_acquire", [SELF, _arg("client", None)]),
    # StepChannel's fetch through the ready ring (queue/ready_ring.py)
    (kombu_redis.Channel, "_brpop_start", [SELF, _arg("timeout", None)]),
    (kombu_redis.Channel, "_brpop_read", [SELF, ("options", P.VAR_KEYWORD, P.empty)]),
    (kombu_redis.Channel, "_update_queue_cycle", [SELF]),
    (kombu_redis.Channel, "_flush_brpop_reauth", [SELF]),
    (
        virtual.Channel,
        "_lookup",
        [SELF, _arg("exchange"), _arg("routing_key"), _arg("default", None)],
    ),
    (virtual.Transport, "_deliver", [SELF, _arg("message"), _arg("queue")]),
    (kombu_redis.Channel, "_create_client", [SELF, _arg("asynchronous", False)]),
    # transport.Connection: the display mapping as_uri resolves through
    (KombuConnection, "_info", [SELF, _arg("resolve", True)]),
]


@pytest.mark.parametrize(
    ("owner", "name", "expected"),
    METHODS,
    ids=[f"{o.__module__}.{o.__qualname__}.{n}" for o, n, _ in METHODS],
)
def test_every_internal_we_rely_on_keeps_its_shape(
    owner: type, name: str, expected: list[tuple[str, Any, Any]]
) -> None:
    assert callable(getattr(owner, name, None)), f"{owner.__qualname__}.{name} is gone"
    assert _params(getattr(owner, name)) == expected


def test_the_classes_and_attributes_we_subclass_or_read_are_there() -> None:
    # Our classes derive from kombu's own and replace what kombu documents as class attributes.
    assert kombu_redis.Transport.Channel is kombu_redis.Channel
    assert kombu_redis.Channel.QoS is kombu_redis.QoS
    assert issubclass(kombu_redis.QoS, virtual.QoS)
    assert isinstance(inspect.getattr_static(kombu_redis.Channel, "pool"), property)
    assert isinstance(KombuConnection.resolve_aliases, dict)
    # Celery's documented hooks: the `amqp` class argument and its Connection attribute.
    assert CeleryAMQP.Connection is KombuConnection
    assert "amqp" in inspect.signature(Celery).parameters
    # kombu honours an explicit transport over the URL's scheme (Connection.__init__).
    assert "transport" in inspect.signature(KombuConnection).parameters


def test_the_channel_state_the_ready_ring_reads_and_sets_is_there() -> None:
    """What StepChannel's fetch reads and sets on kombu's channel, as kombu's own fetch does:
    the consumed queues, the pending-fetch markers the poller checks, the options it obeys."""
    source = inspect.getsource(kombu_redis.Channel._brpop_start)
    for name in ("self._in_poll", "self._brpop_sent_at", "self.client.connection.send_command"):
        assert name in source, name
    assert "self._in_poll = None" in inspect.getsource(kombu_redis.Channel._brpop_read)
    assert "self._active_queues" in inspect.getsource(virtual.Channel.basic_consume)
    for name in ("priority_steps", "global_keyprefix"):
        assert name in kombu_redis.Channel.from_transport_options, name
    assert isinstance(kombu_redis.Transport.brpop_timeout, int | float)  # copied to the channel
    assert "self._expires" in inspect.getsource(kombu_redis.Channel._put)


def test_our_classes_are_kombus_with_only_the_seam_replaced() -> None:
    assert transport.Transport.Channel is transport.StepChannel
    assert transport.StepChannel.QoS is StepQoS
    assert issubclass(transport.StepChannel, kombu_redis.Channel)
    assert issubclass(StepQoS, kombu_redis.QoS)
    assert transport.AMQP.Connection is transport.Connection
    # Nothing of kombu's own was touched by importing them (the publisher, imported above,
    # imports them all).
    assert kombu_redis.Channel.QoS is kombu_redis.QoS
    assert kombu_redis.Transport.Channel is kombu_redis.Channel
    assert "conn_or_acquire" in vars(kombu_redis.Channel)
    assert (
        vars(kombu_redis.Channel)["conn_or_acquire"]
        is not vars(transport.StepChannel)["conn_or_acquire"]
    )
    assert transport.TRANSPORT not in KombuConnection.resolve_aliases


def test_an_explicit_transport_keeps_the_redis_urls_parts() -> None:
    conn = KombuConnection("redis://:pw@broker.example:6390/4", transport=transport.TRANSPORT)
    assert conn.transport_cls == transport.TRANSPORT
    assert conn.transport is not None and type(conn.transport) is transport.Transport
    assert (conn.hostname, conn.port, conn.password, conn.virtual_host) == (
        "broker.example",
        6390,
        "pw",
        "4",
    )


def test_the_app_shows_a_redis_url_and_uses_our_transport() -> None:
    """Celery's `broker_transport` and `amqp` hooks, as the app wires them: the worker's banner
    and Flower (which picks its broker client by the URL's scheme) see `redis://`."""
    app = Celery("seam", amqp="agent_jobs.queue.transport:AMQP", set_as_current=False)
    app.conf.broker_url = "redis://:secret@broker.example:6390/4"
    app.conf.broker_transport = transport.transport_for(app.conf.broker_url)
    conn = app.connection_for_write()
    assert type(conn.transport) is transport.Transport
    assert conn.as_uri() == "redis://:**@broker.example:6390/4"
    assert conn.as_uri(include_password=True) == "redis://:secret@broker.example:6390/4"
    assert type(conn.clone().transport) is transport.Transport


def test_celery_settings_select_our_transport_for_redis_only() -> None:
    redis_cfg = Settings(broker_url="redis://127.0.0.1:6379/0")
    assert celery_settings(redis_cfg)["broker_transport"] == transport.TRANSPORT
    for url in (
        "memory://",
        "amqp://guest@localhost//",
        "rediss://h:6380/0",
        "redis://a;redis://b",
    ):
        assert celery_settings(Settings(broker_url=url))["broker_transport"] is None
    for url in ("sentinel://h:1", "sentinel://h:1;sentinel://h2:2/3"):
        got = celery_settings(Settings(broker_url=url, sentinel_master="svc"))
        assert got["broker_transport"] == transport.SENTINEL_TRANSPORT
        assert got["broker_transport_options"]["master_name"] == "svc"
    assert "master_name" not in celery_settings(redis_cfg)["broker_transport_options"]


def test_the_sentinel_transport_is_kombus_with_our_channel() -> None:
    assert issubclass(kombu_redis.SentinelTransport, kombu_redis.Transport)
    assert kombu_redis.SentinelTransport.Channel is kombu_redis.SentinelChannel
    assert transport.SentinelTransport.Channel is transport.SentinelStepChannel
    mro = transport.SentinelStepChannel.__mro__
    # Ours first, then kombu's Sentinel channel, then kombu's Redis channel.
    assert mro.index(transport.StepChannel) < mro.index(kombu_redis.SentinelChannel)
    assert mro.index(kombu_redis.SentinelChannel) < mro.index(kombu_redis.Channel)
    assert "master_name" in kombu_redis.SentinelChannel.from_transport_options


@given(st.text(max_size=200))
def test_transport_for_any_text_is_ours_only_for_a_single_redis_url(url: str) -> None:
    got = transport.transport_for(url)
    assert got in (None, transport.TRANSPORT, transport.SENTINEL_TRANSPORT)
    if got == transport.TRANSPORT:
        assert ";" not in url
        assert url.startswith("redis://")
    if got == transport.SENTINEL_TRANSPORT:
        assert all(part.startswith("sentinel://") for part in url.split(";"))
