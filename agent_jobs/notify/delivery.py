"""One delivery attempt: claim the row, sign, send, settle (delivered, retry later, or dead).

An endpoint failing past `webhook_disable_after_s` is disabled by the failure that finds it so;
its owner is told by an `endpoint.disabled` event on its other endpoints, published here.

At least once and in order per task: the claim takes a row only when no earlier delivery of its
task to its endpoint is pending, and a success makes the next one due at once. The body is the
stored one, byte for byte; `webhook-id` is the row's, the same on every attempt and replay;
`webhook-timestamp` is the attempt's (receivers refuse old timestamps).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from agent_jobs.config import Settings
from agent_jobs.notify import metrics, sender, signing
from agent_jobs.notify.retry import retry_in_s
from agent_jobs.notify.urls import UrlPolicy
from agent_jobs.store.webhook_outbox import publish
from agent_jobs.store.webhooks import WebhookStore

log = logging.getLogger(__name__)

Post = Callable[[str, dict[str, str], bytes, UrlPolicy, float], sender.Answer]


@dataclass(frozen=True)
class Attempt:
    """What one call did: `outcome` is skipped (not ours to send now), delivered, retry, dead or
    buried (its endpoint is disabled); `next_id`, the task's next delivery made due."""

    outcome: str
    next_id: int | None = None
    retry_in_s: float | None = None
    tenant_id: str | None = None


def policy_of(cfg: Settings) -> UrlPolicy:
    return UrlPolicy.of(
        cfg.webhook_allow_networks, allow_http=cfg.webhook_allow_http or cfg.embedded
    )


def lease_s(cfg: Settings) -> float:
    """How long a claimed attempt holds its row: past it, the sweeper sends it again."""
    return 3 * cfg.webhook_timeout_s + 30.0


def deliver(
    ws: WebhookStore,
    cfg: Settings,
    delivery_id: int,
    *,
    post: Post = sender.post,
    rand: Callable[[], float] = random.random,
) -> Attempt:
    claimed = ws.claim_delivery(delivery_id, lease_s(cfg))
    if claimed is None:
        return Attempt("skipped")
    d = claimed.delivery
    if claimed.disabled or not claimed.secrets:
        ws.bury(d, "endpoint disabled")
        metrics.ATTEMPTS.labels("buried").inc()
        return Attempt("buried")
    body = d.body.encode()
    headers = signing.headers(d.msg_id, int(time.time()), body, claimed.secrets)
    answer = post(claimed.url, headers, body, policy_of(cfg), cfg.webhook_timeout_s)
    metrics.ATTEMPT_SECONDS.observe(answer.seconds)
    if answer.ok:
        assert answer.status is not None
        nxt = ws.delivered(d, answer.status)
        metrics.ATTEMPTS.labels("delivered").inc()
        metrics.DELIVERY_SECONDS.observe(
            max(0.0, (datetime.now(UTC) - d.created_at).total_seconds())
        )
        return Attempt("delivered", nxt, tenant_id=d.tenant_id)
    retry = retry_in_s(d.attempts, rand())
    error = answer.error or "failed"
    failure = ws.failed(
        d,
        status_code=answer.status,
        error=error,
        retry_in_s=retry,
        disable_after_s=cfg.webhook_disable_after_s,
    )
    if failure.disabled:
        metrics.DISABLED.labels(d.tenant_id).inc()
        log.warning(
            "webhook endpoint %s of tenant %s disabled: failing for %.0f s (%s); "
            "endpoint.disabled sent to %d other endpoint(s)",
            d.endpoint_id,
            d.tenant_id,
            cfg.webhook_disable_after_s,
            error,
            len(failure.announced),
        )
        # Committed with the disable: its owner hears of it on the endpoints it still has.
        publish(failure.tenant_id, failure.announced)
    outcome = "retry" if retry is not None and not failure.disabled else "dead"
    metrics.ATTEMPTS.labels(outcome).inc()
    return Attempt(outcome, retry_in_s=retry)
