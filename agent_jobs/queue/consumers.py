"""A consumer bootstep: the worker consumes every tenant queue that has work, without a restart.

On start it consumes the tenants with runnable work in the database (so a restarted worker picks
up everything), then re-reads the tenant directory every `queue_sync_interval_s`, and the
database every `DB_RESYNC_EVERY` reads: the database is the truth, the directory the fast path.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import bootsteps

from agent_jobs.core.names import shared_queue, tenant_queue
from agent_jobs.queue.runtime import get_runtime

log = logging.getLogger(__name__)

DB_RESYNC_EVERY = 10


class TenantQueues(bootsteps.StartStopStep):  # type: ignore[misc]
    requires = {"celery.worker.consumer.tasks:Tasks"}

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self._tref: Any = None
        self._reads = 0

    def start(self, c: Any) -> None:
        runtime = get_runtime()
        self._sync(c, from_db=True)
        self._tref = c.timer.call_repeatedly(
            runtime.settings.queue_sync_interval_s, self._sync, (c,), priority=10
        )

    def stop(self, c: Any) -> None:
        if self._tref is not None:
            self._tref.cancel()
            self._tref = None

    def _sync(self, c: Any, from_db: bool = False) -> None:
        try:
            runtime = get_runtime()
            if runtime.settings.routing == "shared":
                queue = shared_queue(runtime.settings.queue_prefix)
                if c.task_consumer is not None and not c.task_consumer.consuming_from(queue):
                    c.call_soon(c.add_task_queue, queue)
                return
            self._reads += 1
            tenants = set(runtime.directory.active())
            if from_db or self._reads % DB_RESYNC_EVERY == 0:
                for tenant in runtime.store.active_tenants():
                    if tenant not in tenants:
                        runtime.directory.touch(tenant)
                        tenants.add(tenant)
            consumer = c.task_consumer
            for tenant in sorted(tenants):
                queue = tenant_queue(runtime.settings.queue_prefix, tenant)
                if consumer is not None and not consumer.consuming_from(queue):
                    # call_soon: the consumer's own loop applies it (timer threads must not).
                    c.call_soon(c.add_task_queue, queue)
        except Exception:  # a blip in Redis or the database must not stop the consumer
            log.exception("tenant queue sync failed; will retry")
