"""A consumer bootstep: each worker consumes exactly the tenant queues that have work.

kombu's Redis transport issues one BRPOP over every consumed queue for each message, so the cost
of a fetch grows with the number of queues: consuming every tenant that ever existed would make
a thousand-tenant deployment crawl. So:

- on start, a worker consumes the tenants with dispatchable work in the database (a restarted
  worker picks up everything);
- every `queue_sync_interval_s` it re-reads the tenant directory (tenants recently dispatched
  to), and the database every `DB_RESYNC_EVERY` reads: the database is the truth, the directory
  the fast path; a new tenant's first dispatch also broadcasts `add_consumer` at once;
- a tenant idle for `tenant_idle_s` whose queue is empty is dropped; it is looked at again a
  couple of sync intervals later (and on every database re-read), and consumed again if a
  message slipped in meanwhile, so no step is stranded in a queue nobody consumes.

On Redis with agent_jobs' transport the worker also consumes the ready ring's queue
(`queue/ready_ring.py`), through which its channel serves every tenant queue: then the cost of a
fetch does not depend on how many tenants are consumed, and the tenant queues are consumed so
that Flower and `active_queues` show them. On every database re-read the known tenants' queues
that hold a message are entered in the ring if they are not in it (a message an older release
published, say).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis
from celery import bootsteps

from agent_jobs.core.names import shared_queue, tenant_of_queue, tenant_queue
from agent_jobs.queue.broker_redis import broker_redis, is_sentinel
from agent_jobs.queue.ready_ring import ring_for
from agent_jobs.queue.runtime import Runtime, get_runtime

log = logging.getLogger(__name__)

DB_RESYNC_EVERY = 10
RECHECKS = 3  # a dropped tenant's queue is looked at again this many sync intervals later


class TenantQueues(bootsteps.StartStopStep):  # type: ignore[misc]
    requires = {"celery.worker.consumer.tasks:Tasks"}

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self._tref: Any = None
        self._reads = 0
        self._rechecks: dict[str, float] = {}
        self._broker: redis.Redis | None = None

    def start(self, c: Any) -> None:
        runtime = get_runtime()
        self._sync(c, from_db=True)
        self._resend(runtime)
        self._redispatch(runtime)
        self._tref = c.timer.call_repeatedly(
            runtime.settings.queue_sync_interval_s, self._sync, (c,), priority=10
        )

    @staticmethod
    def _resend(runtime: Runtime) -> None:
        """What this process failed to send while the broker was away, sent again now."""
        try:
            runtime.publisher.resend_unsent()
        except Exception:
            log.warning(
                "resending steps the broker refused failed; the sweeper will", exc_info=True
            )

    @staticmethod
    def _redispatch(runtime: Runtime) -> None:
        """At every (re)connection to the broker, one pass of the dispatch sweeper. After a Redis
        restarted empty (its sentinel gone) that pass re-dispatches every waiting task at once,
        instead of at beat's next sweep: beat reconnects on a backoff of its own (2, 4, 6 ...
        up to 30 s) and then waits for the sweep's turn. Otherwise it is the sweeper's ordinary
        pass, idempotent and safe beside beat's."""
        try:
            moved = runtime.sweepers.dispatch()
        except Exception:
            log.warning("dispatch sweep on connecting failed; beat's go on", exc_info=True)
            return
        if moved:
            log.warning("re-dispatched %d task(s) on connecting to the broker", moved)

    def stop(self, c: Any) -> None:
        if self._tref is not None:
            self._tref.cancel()
            self._tref = None

    def _sync(self, c: Any, from_db: bool = False) -> None:
        try:
            runtime = get_runtime()
            consumer = c.task_consumer
            if consumer is None:
                return
            if runtime.settings.routing == "shared":
                self._consume(c, shared_queue(runtime.settings.queue_prefix))
                return
            self._reads += 1
            cfg = runtime.settings
            ring = ring_for(cfg)
            # Served through the ring, a tenant queue is consumed to be shown (Flower), and not
            # declared: the publisher sends to it by name, so kombu's two binding sets per queue
            # (kept in Redis for every tenant ever consumed) would serve nothing.
            declare = ring is None
            if ring is not None:
                self._consume(c, ring.queue, declare=False)
            wanted = set(runtime.directory.active(cfg.tenant_idle_s))
            db_tenants: set[str] | None = None
            if from_db or self._reads % DB_RESYNC_EVERY == 0:
                db_tenants = set(runtime.store.consumable_tenants())
                for tenant in db_tenants - wanted:
                    runtime.directory.touch(tenant)
                wanted |= db_tenants
                if ring is not None:
                    queues = [tenant_queue(cfg.queue_prefix, t) for t in sorted(wanted)]
                    ring.enroll(self._broker_client(runtime), queues)
            for tenant in sorted(wanted):
                self._consume(c, tenant_queue(cfg.queue_prefix, tenant), declare=declare)
            self._drop_idle(c, runtime, wanted)
            self._recheck(c, runtime)
            self._resend(runtime)
        except Exception:  # a blip in Redis or the database must not stop the consumer
            log.exception("tenant queue sync failed; will retry")

    @staticmethod
    def _consume(c: Any, queue: str, *, declare: bool = True) -> None:
        if not c.task_consumer.consuming_from(queue):
            # call_soon: the consumer's own loop applies it (timer threads must not).
            if declare:
                c.call_soon(c.add_task_queue, queue)
            else:
                c.call_soon(c.add_task_queue, queue, no_declare=True)

    def _consumed_tenants(self, c: Any, prefix: str) -> set[str]:
        names = (q.name for q in c.task_consumer.queues)
        return {t for t in (tenant_of_queue(prefix, n) for n in names) if t is not None}

    def _broker_client(self, runtime: Runtime) -> redis.Redis:
        if self._broker is None:
            cfg = runtime.settings
            self._broker = broker_redis(cfg.broker_url, cfg.sentinel_master)
        return self._broker

    def _queue_length(self, runtime: Runtime, queue: str) -> int | None:
        url = runtime.settings.broker_url
        if not url.startswith(("redis://", "rediss://")) and not is_sentinel(url):
            return None  # no way to look; never drop (the embedded broker has few tenants)
        return int(self._broker_client(runtime).llen(queue))

    def _drop_idle(self, c: Any, runtime: Runtime, wanted: set[str]) -> None:
        cfg = runtime.settings
        for tenant in self._consumed_tenants(c, cfg.queue_prefix) - wanted:
            queue = tenant_queue(cfg.queue_prefix, tenant)
            if self._queue_length(runtime, queue) != 0:
                continue
            runtime.directory.forget(tenant, older_than=time.time() - cfg.tenant_idle_s)
            c.call_soon(c.cancel_task_queue, queue)
            self._rechecks[tenant] = time.monotonic() + RECHECKS * cfg.queue_sync_interval_s
            log.info(
                "tenant %s idle for %.0f s: stopped consuming %s", tenant, cfg.tenant_idle_s, queue
            )

    def _recheck(self, c: Any, runtime: Runtime) -> None:
        """A publisher that still believed the tenant active may have sent a step just as we
        stopped: look once more, after its touch cache has certainly expired."""
        now = time.monotonic()
        for tenant, due in list(self._rechecks.items()):
            if due > now:
                continue
            del self._rechecks[tenant]
            queue = tenant_queue(runtime.settings.queue_prefix, tenant)
            if self._queue_length(runtime, queue):
                runtime.directory.touch(tenant)
                self._consume(c, queue, declare=ring_for(runtime.settings) is None)
