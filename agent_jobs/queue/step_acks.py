"""Step messages acknowledged in the worker's memory, not in Redis.

kombu's Redis transport emulates acknowledgements: every delivered message is written to an
"unacked" hash and index in Redis (a pipeline at delivery) and removed again at the ack (a second
pipeline), so that a message whose worker vanished is put back after `visibility_timeout`. For
a step message that bookkeeping buys nothing: the task row already records the dispatch, and the
sweepers repeat it — a lease that expires (leased steps) or a dispatch older than
`AGENT_JOBS_DISPATCH_GRACE_S` with no lease (quick steps) — long before the 600 s visibility
timeout would. It costs two Redis round trips per step, about a fifth of a worker's CPU.

So with `AGENT_JOBS_STEP_ACKS=memory` (the default) a step message (`agent_jobs.step`) is tracked
in the worker's memory only: the prefetch limit counts it as before (one message per process:
fairness is unchanged), a warm shutdown and a rejection with requeue put it back from memory,
and a worker killed outright loses it — which the sweepers repeat, as they would today (the
visibility timeout is ten times longer than the grace). Every other message (submissions,
sweeps, a plain Celery task of the benchmarks) keeps kombu's bookkeeping. `broker` turns this off.

`StepQoS` is the QoS of agent_jobs' own channel class (`queue/transport.py`), which Celery uses
through its `broker_transport` setting; kombu's own Redis channel is left as kombu ships it.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

from agent_jobs.core.names import STEP_TASK

log = logging.getLogger(__name__)


def _memory_acks() -> bool:
    from agent_jobs.config import settings  # noqa: PLC0415 - read when a consumer starts

    return settings().step_acks == "memory"


_RedisQoS: Any = kombu_redis.QoS
_MemoryQoS: Any = virtual.QoS  # the in-memory half every kombu QoS has


class StepQoS(_RedisQoS):  # type: ignore[misc]
    """kombu's Redis QoS, with step messages' acks kept in memory (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Read when the channel's QoS is made (the worker's consumer starting).
        self._memory = _memory_acks()
        self._in_memory: set[Any] = set()

    def _is_step(self, message: Any) -> bool:
        if not self._memory:
            return False
        headers = getattr(message, "headers", None) or {}
        return bool(headers.get("task") == STEP_TASK)

    def append(self, message: Any, delivery_tag: Any) -> None:
        if self._is_step(message):
            # The in-memory record only: prefetch accounting and restore at shutdown.
            self._in_memory.add(delivery_tag)
            _MemoryQoS.append(self, message, delivery_tag)
            return
        super().append(message, delivery_tag)

    def _gone(self) -> bool:
        """The channel was closed with its connection (the broker went away). A late-acked task
        that finishes after the worker reconnected acks through the channel it came from; kombu
        would rebuild that channel's pool from a transport whose client is gone and raise
        AttributeError, which Celery's ack handler (it expects connection errors) does not catch:
        "Unrecoverable error", and the worker stopped."""
        channel = self.channel
        return bool(getattr(channel, "closed", False)) or getattr(channel, "connection", 1) is None

    def ack(self, delivery_tag: Any) -> None:
        if delivery_tag in self._in_memory:
            self._in_memory.discard(delivery_tag)
            _MemoryQoS.ack(self, delivery_tag)
            return
        if self._gone():
            # Put back at the close, or still in the unacked hash (restored after the
            # visibility timeout): delivered again, as Celery's late acks allow.
            log.info("not acking %s: its channel closed with the broker connection", delivery_tag)
            return
        super().ack(delivery_tag)

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        if delivery_tag in self._in_memory:
            self._in_memory.discard(delivery_tag)
            if requeue:
                self._put_back(self._delivered[delivery_tag], leftmost=True)
            _MemoryQoS.ack(self, delivery_tag)
            return
        if self._gone():
            log.info("not rejecting %s: its channel closed with the broker", delivery_tag)
            return
        super().reject(delivery_tag, requeue=requeue)

    def restore_unacked(self, client: Any = None) -> None:
        """Put back what this channel delivered and nobody acked: at a warm shutdown, and when
        the consumer closes a connection the broker dropped. It never raises. kombu runs it
        inside the channel's close, and by then the broker may be gone (a `ConnectionError`)
        or the connection already collected: the transport's `client` is None and making the
        pool again raised `AttributeError: 'NoneType' object has no attribute 'hostname'`,
        which escaped Celery's reconnect handler (it expects only connection errors) and shut
        the worker down. What cannot be put back is not lost: a step's dispatch is recorded
        in its task row (the sweepers repeat it), and any other message is still in kombu's
        unacked hash in Redis, restored after the visibility timeout."""
        try:
            self._flush()
        except Exception:
            log.warning("could not flush acks while restoring unacked messages", exc_info=True)
        failed = 0
        for tag in list(self._in_memory):
            message = self._delivered.pop(tag, None)
            self._in_memory.discard(tag)
            if message is not None:
                try:
                    self._put_back(message, leftmost=False)
                except Exception:
                    failed += 1
        if failed:
            log.warning(
                "could not put back %d step message(s) (the broker is away); their dispatches "
                "are recorded and the sweepers repeat them",
                failed,
            )
        try:
            super().restore_unacked(client)
        except Exception as exc:
            left = len(self._delivered)
            self._delivered.clear()
            log.warning(
                "could not restore %d unacked message(s) at connection close (%s: %s); they "
                "stay in the broker's unacked hash until the visibility timeout",
                left,
                type(exc).__name__,
                exc,
            )

    def _put_back(self, message: Any, *, leftmost: bool) -> None:
        # Where kombu's own restore puts a message: `leftmost` behind what is waiting.
        info = message.delivery_info
        with self.channel.conn_or_acquire() as client:
            pipe = client.pipeline()
            self.channel._do_restore_message(
                message._raw, info["exchange"], info["routing_key"], pipe, leftmost
            )
            pipe.execute()
