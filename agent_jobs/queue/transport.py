"""agent_jobs' kombu transport: kombu's Redis transport with two changes, as subclasses.

Celery selects it through its documented `broker_transport` setting (`celery_config`), which
kombu honours over the URL's scheme: the broker URL stays `redis://...` and the wire format is
kombu's own, so Flower and plain Celery clients on the same Redis interoperate unchanged. Nothing
of kombu's own classes is modified: a `kombu.transport.redis.Channel` made elsewhere in the
process (a plain `Connection("redis://...")`) behaves exactly as kombu ships it.

The changes, on `StepChannel`:

- `QoS = StepQoS`: a step message's ack is kept in the worker's memory (`step_acks`).
- `conn_or_acquire` keeps one `redis.Redis` client per channel. kombu builds a client object for
  every publish and for both late-ack pipelines of every delivery; with redis-py 8 that
  constructor fills a table of ~170 response callbacks each time (three per step, about a tenth
  of a worker's CPU). A client holds no connection of its own (it borrows from the channel's
  pool per command and is safe to share), so one per channel does the same work; a channel whose
  pool was replaced after a connection error gets a new one.

The kombu internals used here are listed, with their shapes, in `tests/unit/test_kombu_seam.py`:
an upgrade that changes them fails that test. celery and kombu are pinned to their major version
in pyproject.toml.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery.app.amqp import AMQP as CeleryAMQP
from kombu.connection import Connection as KombuConnection
from kombu.transport import redis as kombu_redis

from agent_jobs.queue.step_acks import StepQoS

# The class path Celery's `broker_transport` names (kombu imports it on first use).
TRANSPORT = "agent_jobs.queue.transport:Transport"

# The URL schemes this transport serves. `rediss://` is left to kombu: kombu turns TLS on from
# the scheme's name, which an explicit transport would bypass. `sentinel://` has its own channel.
SCHEMES = frozenset({"redis"})

_RedisChannel: Any = kombu_redis.Channel
_RedisTransport: Any = kombu_redis.Transport


class StepChannel(_RedisChannel):  # type: ignore[misc]
    """kombu's Redis channel with step acks in memory and one Redis client (see the module)."""

    QoS = StepQoS

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        pool = self.pool
        cached = self.__dict__.get("_agent_jobs_client")
        if cached is None or cached.connection_pool is not pool:
            cached = self._create_client()
            self.__dict__["_agent_jobs_client"] = cached
        yield cached

    def put_step(self, queue: str, message: dict[str, Any]) -> None:
        """Push a message built by `step_message` onto `queue`, as `Producer.publish` would:
        kombu's own `_put` (the priority key, `x-expires`), without the producer's layers."""
        self._put(queue, message)


class Transport(_RedisTransport):  # type: ignore[misc]
    """kombu's Redis transport, whose channels are `StepChannel`s."""

    Channel = StepChannel


_KombuConnection: Any = KombuConnection
_CeleryAMQP: Any = CeleryAMQP


class Connection(_KombuConnection):  # type: ignore[misc]
    """kombu's Connection, which shows this transport as `redis` in the URLs it prints
    (`as_uri`): the worker's banner, and Flower, which picks its broker client (queue lengths)
    by the scheme of that URL. `resolve_aliases` is kombu's own display mapping (`pyamqp` shows
    as `amqp`); a clone keeps the transport itself."""

    resolve_aliases = {**_KombuConnection.resolve_aliases, TRANSPORT: "redis"}


class AMQP(_CeleryAMQP):  # type: ignore[misc]
    """Celery's broker-side helper (Celery's documented `amqp` argument), with the Connection
    above."""

    Connection = Connection
    BrokerConnection = Connection


def transport_for(broker_url: str) -> str | None:
    """The `broker_transport` setting for `broker_url`: this transport for a `redis://` URL,
    else None (kombu picks by the scheme). A failover list (`;`) is left to kombu: its switch to
    the next URL re-derives the transport from that URL's scheme."""
    # The scheme exactly as kombu reads it (`urlparse`'s lenience about case and stray
    # whitespace is not kombu's alias lookup).
    if ";" in broker_url or not broker_url.startswith(tuple(f"{s}://" for s in SCHEMES)):
        return None
    return TRANSPORT


__all__ = [
    "AMQP",
    "SCHEMES",
    "TRANSPORT",
    "Connection",
    "StepChannel",
    "Transport",
    "transport_for",
]
