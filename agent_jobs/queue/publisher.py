"""Publishing step messages to tenant queues, and noticing when the broker lost them."""

from __future__ import annotations

import logging
import time

import redis
from celery import Celery

from agent_jobs.core.names import broker_sentinel_key, shared_queue, tenant_queue
from agent_jobs.queue.directory import TenantDirectory
from agent_jobs.queue.gate import GatedDispatcher
from agent_jobs.store import Dispatch

log = logging.getLogger(__name__)

STEP_TASK = "agent_jobs.step"


class CeleryPublisher:
    """Sends `agent_jobs.step(task_id)` to the tenant's queue.

    Celery publishes a direct queue through the anonymous exchange (routing key = queue name),
    so delivery needs no binding in the broker: a FLUSHALL that wipes kombu's bindings does not
    make later messages vanish.
    """

    def __init__(
        self, app: Celery, directory: TenantDirectory, prefix: str, *, shared: bool = False
    ) -> None:
        self.app = app
        self.directory = directory
        self.prefix = prefix
        self.shared = shared
        # Set by the runtime when a tenant cap, fair share or the model cap is configured.
        self.gated: GatedDispatcher | None = None

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
                self.app.control.add_consumer(queue, reply=False)
            self.app.send_task(STEP_TASK, args=[dispatch.task_id], queue=queue)
        except Exception:
            # The dispatch is recorded in the task row; the dispatch sweeper will repeat it.
            log.exception(
                "publishing a step for %s failed; the sweeper will retry", dispatch.task_id
            )


class RedisBrokerProbe:
    """A sentinel key in the broker's Redis. If it is gone, so are the queued messages."""

    def __init__(self, url: str, prefix: str) -> None:
        self._redis = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        self._key = broker_sentinel_key(prefix)

    def lost_since_last_check(self) -> bool:
        created = self._redis.set(self._key, str(time.time()), nx=True)
        return bool(created)
