"""The `webhooks` sweeper: deliveries whose timer is due go (back) to their tenant's queue.

Due means: a retry's backoff has passed, a worker died mid-send (its claim's lease lapsed), or
the publish after the commit was lost (a crash between commit and publish, a broker restart).
It also writes the `approval.expiring` warnings. Idempotent, and safe twice at once: rows are
taken with SKIP LOCKED and stamped, a claim sorts out duplicates, warnings have derived ids.
"""

from __future__ import annotations

from collections import defaultdict

from agent_jobs.config import Settings
from agent_jobs.store.webhook_outbox import publish
from agent_jobs.store.webhooks import WebhookStore

# An approval still pending this close to its expiry is announced (once per endpoint).
APPROVAL_WARNING_S = 300.0
MAX_BATCHES = 20


def sweep_webhooks(ws: WebhookStore, cfg: Settings) -> int:
    """Publish what is due and write the expiry warnings; how many deliveries went out."""
    batches: list[list[tuple[str, int]]] = [ws.warn_expiring(APPROVAL_WARNING_S)]
    # A delivery just published (after its commit, or by the last sweep) gets two intervals to
    # be claimed before it is published again.
    quiet_s = 2 * cfg.sweep_interval_s
    for _ in range(MAX_BATCHES):
        due = ws.take_due(cfg.sweep_batch, quiet_s)
        batches.append(due)
        if len(due) < cfg.sweep_batch:
            break
    total = 0
    for batch in batches:
        by_tenant: dict[str, list[int]] = defaultdict(list)
        for tenant, delivery_id in batch:
            by_tenant[tenant].append(delivery_id)
        for tenant, ids in by_tenant.items():
            publish(tenant, ids)
        total += len(batch)
    return total
