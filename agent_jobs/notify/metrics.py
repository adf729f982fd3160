"""Webhook metrics: attempts by outcome, each attempt's latency, and event-to-delivery time.

Declared here, not in `obs.metrics`, so a process that never delivers pays nothing at import;
the registry (and the worker's multiprocess mode) is prometheus-client's default one, as theirs.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

NS = "agent_jobs"
BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 3600.0)

ATTEMPTS = Counter(
    "webhook_attempts",
    "Webhook delivery attempts, by outcome: delivered, retry, dead, refused, buried.",
    ["outcome"],
    namespace=NS,
)
ATTEMPT_SECONDS = Histogram(
    "webhook_attempt_seconds",
    "Wall time of one webhook attempt (connect, send, answer).",
    namespace=NS,
    buckets=BUCKETS,
)
DELIVERY_SECONDS = Histogram(
    "webhook_delivery_seconds",
    "From the event's commit to its delivery's answer, retries included.",
    namespace=NS,
    buckets=BUCKETS,
)
# By tenant: a disable is rare (an endpoint failing for a day), so the label costs a series only
# for a tenant that had one, and the alert (deploy/prometheus/alerts.yml) names whose it was.
DISABLED = Counter(
    "webhook_endpoints_disabled",
    "Endpoints disabled after failing for a day (AGENT_JOBS_WEBHOOK_DISABLE_AFTER_S), by tenant.",
    ["tenant"],
    namespace=NS,
)
