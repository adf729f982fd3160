"""Queue depth and oldest-message age per tenant, read from the broker's Redis at scrape time.

kombu's Redis transport keeps each queue as a list (with one priority step, as configured, the
list's key is the queue's name): publishers LPUSH, consumers BRPOP, so the oldest message is at
index -1. A message is kombu's JSON envelope; its `headers` are Celery's task headers, which carry
no send time, so every agent_jobs publisher stamps `core.names.ENQUEUED_AT_HEADER` (epoch
seconds) through Celery's `before_task_publish` signal (wired in `queue.runtime`). A message
without the stamp (one sent by a foreign Celery client that did not add it) counts in the depth,
and the age of such a queue is not reported rather than guessed.

The queues looked at: every tenant in the tenant directory (the tenants workers consume), the
submit queue and the control queue. Message bodies are never decoded; only the headers.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from agent_jobs.core.names import (
    ENQUEUED_AT_HEADER,
    control_queue,
    submit_queue,
    tenant_queue,
)

log = logging.getLogger(__name__)


def oldest_enqueued_at(raw: bytes | str | None) -> float | None:
    """The enqueue stamp of one raw kombu message, or None when it has none."""
    if raw is None:
        return None
    try:
        message = json.loads(raw)
        value = message["headers"][ENQUEUED_AT_HEADER]
    except (ValueError, KeyError, TypeError):
        return None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class QueueCollector(Collector):
    """A custom collector: `agent_jobs_queue_depth` and `agent_jobs_queue_oldest_age_seconds`.

    `redis_client` is a redis-py client on the broker's database; `tenants()` lists the tenants
    whose queues to report (normally `TenantDirectory.active`).
    """

    def __init__(
        self,
        redis_client: Any,
        prefix: str,
        tenants: Callable[[], Iterable[str]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis = redis_client
        self.prefix = prefix
        self.tenants = tenants
        self.clock = clock

    def queues(self) -> list[tuple[str, str]]:
        """(queue, tenant) pairs to report; the tenant is "" for the shared queues."""
        out = [(submit_queue(self.prefix), ""), (control_queue(self.prefix), "")]
        out.extend((tenant_queue(self.prefix, t), t) for t in sorted(set(self.tenants())))
        return out

    def collect(self) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily(
            "agent_jobs_queue_depth",
            "Messages waiting in a queue (read from the broker at scrape time).",
            labels=["queue", "tenant"],
        )
        age = GaugeMetricFamily(
            "agent_jobs_queue_oldest_age_seconds",
            "Age of the oldest waiting message of a queue "
            "(publisher clock; stamped messages only).",
            labels=["queue", "tenant"],
        )
        try:
            queues = self.queues()
            pipe = self.redis.pipeline(transaction=False)
            for queue, _ in queues:
                pipe.llen(queue)
                pipe.lindex(queue, -1)
            replies = pipe.execute()
        except Exception:
            # A scrape must not fail because the broker is down; the series simply go stale.
            log.warning("queue metrics: the broker could not be read", exc_info=True)
            return
        now = self.clock()
        for i, (queue, tenant) in enumerate(queues):
            n, oldest = int(replies[2 * i]), replies[2 * i + 1]
            depth.add_metric([queue, tenant], n)
            if n == 0:
                age.add_metric([queue, tenant], 0.0)
                continue
            stamp = oldest_enqueued_at(oldest)
            if stamp is not None:
                age.add_metric([queue, tenant], max(0.0, now - stamp))
        yield depth
        yield age


class GateCollector(Collector):
    """What the dispatch gate holds back, per tenant and reason; tenants active; and how full
    the global model-call cap is. Held tasks are queue age too: they wait, just not in Redis."""

    def __init__(
        self,
        held: Callable[[], dict[str, dict[str, tuple[int, float]]]],
        active_tenants: Callable[[], int],
        model_slots: Callable[[], tuple[int, int]] | None = None,
    ) -> None:
        self.held = held
        self.active_tenants = active_tenants
        self.model_slots = model_slots

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            by_reason = self.held()
            active = self.active_tenants()
            slots = self.model_slots() if self.model_slots is not None else None
        except Exception:
            log.warning("gate metrics: could not be read", exc_info=True)
            return
        held = GaugeMetricFamily(
            "agent_jobs_held_tasks",
            "Runnable tasks held at the dispatch gate (tenant cap, fair share, model cap).",
            labels=["tenant", "reason"],
        )
        age = GaugeMetricFamily(
            "agent_jobs_held_oldest_age_seconds",
            "How long the oldest held task of a tenant has waited.",
            labels=["tenant", "reason"],
        )
        for reason, tenants in sorted(by_reason.items()):
            for tenant, (n, oldest) in sorted(tenants.items()):
                held.add_metric([tenant, reason], n)
                age.add_metric([tenant, reason], max(0.0, oldest))
        yield held
        yield age
        yield GaugeMetricFamily(
            "agent_jobs_tenants_active", "Tenants whose queues workers consume.", value=active
        )
        if slots is not None:
            in_use, limit = slots
            yield GaugeMetricFamily(
                "agent_jobs_model_slots_in_use",
                "Model calls in flight (all workers).",
                value=in_use,
            )
            yield GaugeMetricFamily(
                "agent_jobs_model_cap_saturation",
                "Model calls in flight over the global cap (1 = saturated).",
                value=in_use / limit if limit else 0.0,
            )
