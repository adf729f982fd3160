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

- the ready ring (`queue/ready_ring.py`): a channel that consumes the ring's queue serves every
  tenant queue it consumes through the ring instead of naming each in its BRPOP. Its fetch is
  one Lua call (`TAKE`: the next tenant with a message, round robin) while messages wait, else
  one BRPOP over its other queues (sweeps, submissions) and the ring's doorbell, so its cost
  does not grow with the tenants it consumes. The tenant queues stay consumed (Flower lists
  them and their lengths) and stay kombu lists; a message published to a tenant queue through
  this channel (`_put`) or put back (`_do_restore_message`) enters the ring in the same step.

The kombu internals used here are listed, with their shapes, in `tests/unit/test_kombu_seam.py`:
an upgrade that changes them fails that test. celery and kombu are pinned to their major version
in pyproject.toml.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from queue import Empty
from time import monotonic
from typing import Any

import redis
from celery.app.amqp import AMQP as CeleryAMQP
from kombu.connection import Connection as KombuConnection
from kombu.transport import redis as kombu_redis
from kombu.utils import encoding as kombu_encoding
from kombu.utils import json as kombu_json

from agent_jobs.queue.ready_ring import DOORBELL_TOKEN, ReadyRing
from agent_jobs.queue.step_acks import StepQoS

log = logging.getLogger(__name__)

# kombu's own decoding and (de)serialisation of what its Redis channel stores, as its `_put` and
# `_brpop_read` use them (untyped in kombu).
_bytes_to_str: Any = kombu_encoding.bytes_to_str
_loads: Any = kombu_json.loads
_dumps: Any = kombu_json.dumps

# The class paths Celery's `broker_transport` names (kombu imports them on first use).
TRANSPORT = "agent_jobs.queue.transport:Transport"
SENTINEL_TRANSPORT = "agent_jobs.queue.transport:SentinelTransport"

# The URL schemes these transports serve. `rediss://` is left to kombu: kombu turns TLS on from
# the scheme's name, which an explicit transport would bypass.
SCHEMES = frozenset({"redis", "sentinel"})

_RedisChannel: Any = kombu_redis.Channel
_RedisTransport: Any = kombu_redis.Transport
_SentinelChannel: Any = kombu_redis.SentinelChannel
_SentinelTransport: Any = kombu_redis.SentinelTransport


def _ring_of_settings() -> ReadyRing | None:
    from agent_jobs.config import settings  # noqa: PLC0415 - read when a channel is made
    from agent_jobs.queue.ready_ring import ring_for  # noqa: PLC0415

    return ring_for(settings())


class StepChannel(_RedisChannel):  # type: ignore[misc]
    """kombu's Redis channel with step acks in memory, one Redis client and the ready ring
    (see the module)."""

    QoS = StepQoS

    # The ready ring (None: this channel is kombu's as to fetching), and what a fetch uses it
    # for: None until worked out again after the consumed queues changed, else whether the
    # ring's queue is consumed and the other (plain) queues named in BRPOP.
    _ring: ReadyRing | None = None
    _ring_plan: tuple[bool, tuple[str, ...]] | None = None
    _ring_take = True  # the next fetch takes from the ring (else: waits on the doorbell)
    _ring_sent: str | None = None  # what the pending fetch is: "take", "wait", or kombu's
    _ring_others_first = False  # alternates: sweeps and submissions are not starved

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # One priority step only (agent_jobs' setting): the ring serves a queue's one list.
        if list(self.priority_steps) == [0] and not self.global_keyprefix:
            self._ring = _ring_of_settings()

    def _update_queue_cycle(self) -> None:
        super()._update_queue_cycle()
        self._ring_plan = None

    def _plan(self) -> tuple[bool, tuple[str, ...]]:
        plan = self._ring_plan
        if plan is None:
            ring = self._ring
            queues = list(self._active_queues)
            if ring is None or ring.queue not in queues:
                plan = (False, ())
            else:
                plain = tuple(q for q in queues if q != ring.queue and not ring.serves(q))
                plan = (True, plain)
            self._ring_plan = plan
        return plan

    def _brpop_start(self, timeout: Any = None) -> None:
        ring = self._ring
        using, plain = self._plan()
        if ring is None or not using:
            self._ring_sent = None
            super()._brpop_start(timeout)
            return
        if self._ring_take:
            self._ring_others_first = not self._ring_others_first
            command = ring.take_command(plain, self._ring_others_first)
            self._ring_sent = "take"
        else:
            wait = self.brpop_timeout if timeout is None else timeout
            command = ["BRPOP", *plain, ring.doorbell, wait or 0]
            self._ring_sent = "wait"
        conn = self.client.connection
        self._in_poll = conn
        self._brpop_sent_at = monotonic()
        conn.send_command(*command)

    def _brpop_read(self, **options: Any) -> bool:
        sent, ring = self._ring_sent, self._ring
        if sent is None or ring is None:
            return bool(super()._brpop_read(**options))
        self._ring_sent = None
        try:
            try:
                reply = self.client.parse_response(
                    self.client.connection, "EVALSHA" if sent == "take" else "BRPOP", **options
                )
            except self.connection_errors:
                self.client.connection.disconnect()
                raise
            except redis.exceptions.NoScriptError:
                # Redis restarted (or its script cache was flushed): load TAKE, fetch again.
                with self.conn_or_acquire() as client:
                    ring.load(client)
                raise Empty() from None
            # A take that found nothing waits next; anything else takes next.
            self._ring_take = bool(reply) or sent == "wait"
            if not reply:
                raise Empty()
            queue, item = _bytes_to_str(reply[0]), reply[1]
            if queue == ring.doorbell and item == DOORBELL_TOKEN:
                raise Empty()
            # The ring's messages arrive on the ring's queue (always consumed): a tenant queue
            # this worker has not added yet is still served.
            dest = ring.queue if ring.serves(queue) else queue
            self.connection._deliver(_loads(_bytes_to_str(item)), dest)
            return True
        finally:
            self._in_poll = None
            self._flush_brpop_reauth()

    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:
        ring = self._ring
        if ring is None or not ring.serves(queue) or (self._expires and queue in self._expires):
            super()._put(queue, message, **kwargs)
            return
        # A publish batch (kombu's producer-scoped pipelining) is not used for tenant queues:
        # each message enters its list and the ring in one script.
        kwargs.pop("_publish_batch", None)
        with self.conn_or_acquire() as client:
            ring.push(client, queue, _dumps(message))

    def _do_restore_message(
        self, payload: Any, exchange: Any, routing_key: Any, pipe: Any, leftmost: bool = False
    ) -> None:
        super()._do_restore_message(payload, exchange, routing_key, pipe, leftmost)
        ring = self._ring
        if ring is None:
            return
        try:
            for queue in self._lookup(exchange, routing_key):
                if ring.serves(queue):
                    ring.enroll_in(pipe, queue)
        except self.connection_errors:
            raise  # as kombu's own restore: the transaction must not go through half done
        except Exception:
            log.warning("could not enter %r in the ready ring", routing_key, exc_info=True)

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


class SentinelStepChannel(StepChannel, _SentinelChannel):  # type: ignore[misc]
    """kombu's Sentinel channel (it asks the Sentinels for the primary at each connection) with
    everything `StepChannel` adds: step acks in memory, one client, the ready ring."""


class SentinelTransport(_SentinelTransport):  # type: ignore[misc]
    """kombu's Sentinel transport, whose channels are `SentinelStepChannel`s."""

    Channel = SentinelStepChannel


_KombuConnection: Any = KombuConnection
_CeleryAMQP: Any = CeleryAMQP


class Connection(_KombuConnection):  # type: ignore[misc]
    """kombu's Connection, which shows this transport as `redis` in the URLs it prints
    (`as_uri`): the worker's banner, and Flower, which picks its broker client (queue lengths)
    by the scheme of that URL. `resolve_aliases` is kombu's own display mapping (`pyamqp` shows
    as `amqp`); a clone keeps the transport itself."""

    resolve_aliases = {
        **_KombuConnection.resolve_aliases,
        TRANSPORT: "redis",
        SENTINEL_TRANSPORT: "sentinel",
    }


class AMQP(_CeleryAMQP):  # type: ignore[misc]
    """Celery's broker-side helper (Celery's documented `amqp` argument), with the Connection
    above."""

    Connection = Connection
    BrokerConnection = Connection


def transport_for(broker_url: str) -> str | None:
    """The `broker_transport` setting for `broker_url`: this transport for a `redis://` URL, its
    Sentinel form for `sentinel://` URLs (one, or a `;` list of the Sentinels: kombu's channel
    asks each in turn for the primary), else None (kombu picks by the scheme). A failover list
    of `redis://` URLs is left to kombu: its switch to the next URL re-derives the transport
    from that URL's scheme. Sentinel is the way to fail over with this transport."""
    # The scheme exactly as kombu reads it (`urlparse`'s lenience about case and stray
    # whitespace is not kombu's alias lookup).
    parts = broker_url.split(";")
    if all(p.startswith("sentinel://") for p in parts):
        return SENTINEL_TRANSPORT
    if len(parts) > 1 or not broker_url.startswith("redis://"):
        return None
    return TRANSPORT


__all__ = [
    "AMQP",
    "SCHEMES",
    "SENTINEL_TRANSPORT",
    "TRANSPORT",
    "Connection",
    "SentinelStepChannel",
    "SentinelTransport",
    "StepChannel",
    "Transport",
    "transport_for",
]
