"""Webhook deliveries on the tenant's queue: publishing `agent_jobs.deliver` and running it.

A delivery is a Celery message on the same queue as its tenant's steps, so kombu's round robin
over tenant queues serves one tenant's slow endpoint no faster than its turn: it never delays
another tenant's steps or deliveries. The row, not the message, is the truth: a lost message is
found by the `webhooks` sweeper (its timer is due), a duplicate finds the row claimed.
"""

from __future__ import annotations

import logging
import os
import threading

from agent_jobs.core.names import DELIVER_TASK, shared_queue, tenant_queue
from agent_jobs.notify.delivery import Attempt, deliver
from agent_jobs.queue.runtime import Runtime, get_runtime
from agent_jobs.store.webhooks import WebhookStore

log = logging.getLogger(__name__)
_stores: dict[int, WebhookStore] = {}
_lock = threading.Lock()


def webhook_store(runtime: Runtime) -> WebhookStore:
    """One per runtime (per process after a fork), over the runtime's engine."""
    key = id(runtime.store.engine)
    with _lock:
        ws = _stores.get(key)
        if ws is None:
            ws = _stores[key] = WebhookStore(runtime.store.engine)
        return ws


def publish_deliveries(tenant_id: str, delivery_ids: list[int]) -> None:
    """Send one `agent_jobs.deliver` per delivery to the tenant's queue (a worker consumes it
    from now on, as for a step). A process that has no runtime (a test's harness, a script
    over the store) builds none for this: the sweeper publishes what is due."""
    runtime = built_runtime()
    if runtime is None:
        return
    pub = runtime.publisher
    if pub.shared:
        queue = shared_queue(pub.prefix)
    else:
        queue = tenant_queue(pub.prefix, tenant_id)
        if pub.directory.touch(tenant_id):
            pub.app.control.add_consumer(queue, reply=False)
    for delivery_id in delivery_ids:
        pub.app.send_task(DELIVER_TASK, args=(delivery_id,), queue=queue, ignore_result=True)


def built_runtime() -> Runtime | None:
    """This process's runtime if it has one (built, or installed by `set_runtime`)."""
    from agent_jobs.queue import runtime as runtimes  # noqa: PLC0415

    current = runtimes._runtime
    return current if current is not None and current.pid == os.getpid() else None


def run_delivery(delivery_id: int) -> Attempt:
    """One attempt; on success the task's next delivery to the endpoint goes out at once."""
    runtime = get_runtime()
    ws = webhook_store(runtime)
    attempt = deliver(ws, runtime.settings, delivery_id)
    if attempt.next_id is not None and attempt.tenant_id is not None:
        publish_deliveries(attempt.tenant_id, [attempt.next_id])
    return attempt
