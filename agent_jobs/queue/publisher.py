"""Publishing step messages to tenant queues, and noticing when the broker lost them."""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import redis
from celery import Celery, signals
from kombu.exceptions import OperationalError as KombuOperationalError
from kombu.utils.uuid import uuid

from agent_jobs.core.names import (
    ENQUEUED_AT_RECEIVER,
    STEP_TASK,
    broker_sentinel_key,
    shared_queue,
    tenant_queue,
)
from agent_jobs.queue import step_message
from agent_jobs.queue.broker_redis import broker_redis
from agent_jobs.queue.carried_rows import CLAIM_HINT, CarriedRows
from agent_jobs.queue.directory import TenantDirectory
from agent_jobs.queue.gate import GatedDispatcher
from agent_jobs.queue.transport import StepChannel
from agent_jobs.store import Dispatch

log = logging.getLogger(__name__)


# What a broker that does not answer raises (redis-py directly, kombu around it, the socket).
_UNREACHABLE = (redis.ConnectionError, redis.TimeoutError, KombuOperationalError, OSError)
# Sends kept for `resend_unsent` at most, per process (the sweeper repeats any beyond).
UNSENT_KEPT = 10_000


class CeleryPublisher:
    """Sends `agent_jobs.step(task_id)` to the tenant's queue.

    Celery publishes a direct queue through the anonymous exchange (routing key = queue name),
    so delivery needs no binding in the broker: a flush that wipes kombu's bindings does not
    make later messages vanish — and so the publish declares nothing either.

    Every step publishes the next one, so this is on the hot path: one producer (and its broker
    connection) per process and thread, kept. On Redis the message is built directly
    (`step_message`) and handed to the producer's channel (`StepChannel.put_step`), when
    nothing would tell the difference: the app's protocol, serializer and options are the
    defaults that message assumes, and no one but our enqueue stamp listens to the publish
    signals. Otherwise Celery's own protocol code (`app.amqp`) builds and sends it, still
    without `send_task`'s router, result object and producer-pool checkout.
    """

    def __init__(
        self,
        app: Celery,
        directory: TenantDirectory,
        prefix: str,
        *,
        shared: bool = False,
        rows: CarriedRows | None = None,
        ring: bool = False,
    ) -> None:
        self.app = app
        self.directory = directory
        self.prefix = prefix
        self.shared = shared
        # Workers are served tenant queues through the ready ring (queue/ready_ring.py): a new
        # tenant's queue is added to them undeclared (see queue/consumers.py).
        self._add_options: dict[str, Any] = {"no_declare": True} if ring else {}
        # Signs the row a dispatch carries into its message (see carried_rows.py).
        self.rows = rows
        # Set by the runtime when a tenant cap, fair share or the model cap is configured.
        self.gated: GatedDispatcher | None = None
        self._local = threading.local()
        self._direct_conf: bool | None = None
        # Dispatches whose send failed because the broker did not answer (a failover, a restart),
        # by task id: sent again by `resend_unsent` as soon as the broker answers, instead of
        # waiting out the dispatch sweeper's grace. A duplicate is harmless (the step finds the
        # task claimed or moved on); the sweeper still repeats what this process forgets.
        self._unsent: dict[str, Dispatch] = {}
        self._unsent_lock = threading.Lock()

    def publish(self, dispatch: Dispatch) -> None:
        if self.gated is not None:
            self.gated.publish(dispatch)
        else:
            self.send(dispatch)

    def finished(self, task_id: str, tenant_id: str, seconds: float) -> None:
        if self.gated is not None:
            try:
                self.gated.finished(task_id, tenant_id, seconds)
            except Exception:
                # The slot expires by itself and the sweeper pumps held work: never fail a step.
                log.exception("releasing the gate slot of %s failed", task_id)

    def send(self, dispatch: Dispatch) -> None:
        """Publish now, past the gate."""
        if self.shared:
            queue = shared_queue(self.prefix)
        else:
            queue = tenant_queue(self.prefix, dispatch.tenant_id)
        try:
            if not self.shared and self.directory.touch(dispatch.tenant_id):
                # New tenant: tell running workers now rather than at their next directory read.
                self.app.control.add_consumer(queue, reply=False, options=self._add_options)
            carried: dict[str, Any] | None = None
            if dispatch.row is not None and self.rows is not None:
                carried = self.rows.encode(dispatch.row)
            elif dispatch.claim:
                carried = dict(CLAIM_HINT)
            self._send_step(dispatch.task_id, queue, carried)
            if self._unsent:
                self.resend_unsent()  # the broker answers again
        except Exception as exc:
            # A producer that failed may hold a dead connection: the next publish makes another.
            self._drop_producer()
            # The dispatch is recorded in the task row; the dispatch sweeper will repeat it.
            if isinstance(exc, _UNREACHABLE):
                self._remember_unsent(dispatch)
                # The broker away is an expected state, not a bug: one line that says why (a
                # redis traceback says nothing more, and a CLI `submit` printed forty lines).
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                log.warning(
                    "publishing a step for %s failed (%s); the sweeper will retry",
                    dispatch.task_id,
                    first,
                )
            else:
                log.exception(
                    "publishing a step for %s failed; the sweeper will retry", dispatch.task_id
                )

    def _remember_unsent(self, dispatch: Dispatch) -> None:
        with self._unsent_lock:
            if len(self._unsent) < UNSENT_KEPT:
                self._unsent[dispatch.task_id] = dispatch

    def resend_unsent(self) -> int:
        """Send again what failed for want of the broker (see `__init__`); how many went out.
        Called after a send succeeds and when a worker (re)connects to the broker."""
        with self._unsent_lock:
            waiting, self._unsent = self._unsent, {}
        for dispatch in waiting.values():
            self.send(dispatch)  # one that fails again is remembered again
        if waiting:
            log.warning("sent %d step(s) again that the broker had refused", len(waiting))
        return len(waiting)

    def _send_step(self, task_id: str, queue: str, carried: dict[str, Any] | None = None) -> None:
        channel = self._direct_channel()
        if channel is not None:
            built = step_message.message(
                task_id, carried, queue, origin=self._origin(), enqueued_at=time.time()
            )
            try:
                channel.put_step(queue, built)
                return
            except Exception as exc:
                # Celery's path below retries a broker error by its publish policy. Should the
                # push have landed anyway, the step runs once: a duplicate message finds the
                # task claimed or moved on.
                log.warning(
                    "publishing a step for %s directly failed (%s: %s); sending it via Celery",
                    task_id,
                    type(exc).__name__,
                    exc,
                )
                self._drop_producer()
        amqp = self.app.amqp
        message = amqp.create_task_message(
            uuid(),
            STEP_TASK,
            (task_id,) if carried is None else (task_id, carried),
            {},
            # Given, so Celery does not build them with saferepr for every message (and a
            # carried row, kilobytes, is not repeated in a header).
            argsrepr=repr((task_id,)),
            kwargsrepr="{}",
            ignore_result=True,
            origin=self._origin(),
        )
        # `declare=[]`: the anonymous exchange needs no declaration (see the class docstring);
        # `before_task_publish` still fires (the metrics' enqueue stamp).
        amqp.send_task_message(
            self._producer(), STEP_TASK, message, queue=queue, exchange="", declare=[]
        )

    def _direct_channel(self) -> Any:
        """The producer's channel, when a step message may be built directly and handed to it
        (see the class docstring), else None."""
        if self._direct_conf is None:
            conf = self.app.conf
            self._direct_conf = (
                conf.task_protocol == 2
                and conf.task_serializer == "json"
                and not conf.task_compression
                and not conf.task_send_sent_event
                and conf.task_default_delivery_mode in (2, "persistent")
            )
        if not self._direct_conf or not _only_our_publish_signals():
            return None
        # Our transport's channel only (`queue/transport.py`, Celery's `broker_transport` for a
        # `redis://` URL): kombu's own, under any other URL, publishes through Celery below.
        channel = self._producer().channel
        return channel if isinstance(channel, StepChannel) else None

    def _origin(self) -> str:
        origin: str | None = getattr(self._local, "origin", None)
        if origin is None:
            from celery.utils.nodenames import anon_nodename  # noqa: PLC0415

            origin = self._local.origin = anon_nodename()
        return origin

    def _producer(self) -> Any:
        local = self._local
        producer = getattr(local, "producer", None)
        if producer is None or getattr(local, "pid", None) != os.getpid():
            # After a fork the parent's connection is not ours to use.
            producer = self.app.amqp.Producer(self.app.connection_for_write(), auto_declare=False)
            local.producer, local.pid = producer, os.getpid()
        return producer

    def _drop_producer(self) -> None:
        producer = getattr(self._local, "producer", None)
        self._local.producer = None
        if producer is not None and getattr(self._local, "pid", None) == os.getpid():
            try:
                producer.connection.release()
            except Exception:
                log.debug("releasing a failed producer's connection", exc_info=True)


def _only_our_publish_signals() -> bool:
    """Whether nothing but our enqueue stamp (`obs.metrics.stamp_enqueued_at`, which
    `step_message` applies itself) listens to Celery's publish signals."""
    return (
        all(key[0] == ENQUEUED_AT_RECEIVER for key, _ in signals.before_task_publish.receivers)
        and not signals.after_task_publish.receivers
        and not signals.task_sent.receivers
    )


class RedisBrokerProbe:
    """A sentinel key in the broker's Redis. If it is gone, so are the queued messages."""

    def __init__(self, url: str, prefix: str, sentinel_master: str = "mymaster") -> None:
        self._redis = broker_redis(url, sentinel_master)
        self._key = broker_sentinel_key(prefix)

    def lost_since_last_check(self) -> bool:
        created = self._redis.set(self._key, str(time.time()), nx=True)
        return bool(created)
