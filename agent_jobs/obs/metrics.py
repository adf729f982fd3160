"""Prometheus metrics, and `PrometheusObserver`, the orchestrator's `Observer` that feeds them.

Labels name bounded things only: workflows, statuses, tools, routes, policy versions, outcomes,
tenants. Never a task id, trace id or idempotency key: each would be a new time series per task.
Tenants are bounded too: `tenant_label()` names the first `MAX_TENANT_LABELS` distinct tenants a
process sees and folds every later one into `other`, so a deployment with ten thousand tenants
does not make ten thousand series per tenant-labelled metric.

Processes: the API and an in-thread worker use the default registry. A prefork worker started by
`agent-jobs worker --metrics-port N` runs in prometheus-client's multiprocess mode: every child
writes its samples to files under PROMETHEUS_MULTIPROC_DIR and the parent serves their sum on
port N (see `exposition_registry`). Only counters and histograms are defined here, whose
multiprocess sums are exact; the per-tenant queue gauges are computed at scrape time by the API
(`obs.queues`), not kept by workers.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, MutableMapping
from decimal import Decimal
from typing import Any

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
)

from agent_jobs.core.names import ENQUEUED_AT_HEADER

log = logging.getLogger(__name__)

# `*_created` series double every counter and say nothing a dashboard uses.
disable_created_metrics()  # type: ignore[no-untyped-call]

NS = "agent_jobs"
STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

TASKS_CREATED = Counter(
    "tasks_created", "Tasks created, by workflow and intake.", ["workflow", "via"], namespace=NS
)
TRANSITIONS = Counter(
    "task_transitions",
    "Committed status transitions.",
    ["workflow", "from_status", "to_status"],
    namespace=NS,
)
STEP_SECONDS = Histogram(
    "step_duration_seconds",
    "Wall time of one step, by the status it started in and how it ended.",
    ["status", "result"],
    namespace=NS,
    buckets=STEP_BUCKETS,
)
LEASE_EXPIRIES = Counter(
    "lease_expiries", "Leases found lapsed by the lease sweeper.", namespace=NS
)
EXEC_UNKNOWN_ENTRIES = Counter(
    "exec_unknown_entries",
    "Steps that left an effect's outcome unknown (entries into EXEC_UNKNOWN).",
    namespace=NS,
)
RECONCILIATIONS = Counter(
    "reconciliations",
    "Reconcile reads of a system of record, by result.",
    ["result"],
    namespace=NS,
)
POLICY_DECISIONS = Counter(
    "policy_decisions",
    "Policy decisions on proposed actions.",
    ["policy", "decision"],
    namespace=NS,
)
UNAUTHORISED_ACTIONS = Counter(
    "unauthorised_actions_executed",
    "Side-effecting tool calls that ran without a policy decision. Must stay 0: alert on > 0.",
    namespace=NS,
)
MODEL_CALLS = Counter(
    "model_calls",
    "Model gateway requests, by route and outcome.",
    ["route", "outcome"],
    namespace=NS,
)
MODEL_TOKENS = Counter(
    "model_tokens",
    "Tokens billed by the model gateway, by route and kind (input, output, cached_input).",
    ["route", "kind"],
    namespace=NS,
)
MODEL_COST = Counter(
    "model_cost_inr",
    "Model cost in the price table's currency (INR), by route.",
    ["route"],
    namespace=NS,
)
TOOL_CALLS = Counter(
    "tool_calls",
    "Tool calls by tool and outcome (ok, rejected, unknown).",
    ["tool", "outcome"],
    namespace=NS,
)
CAP_WAITS = Counter(
    "cap_waits",
    "Steps held at the dispatch gate instead of queued, by reason (gate, model_cap).",
    ["reason"],
    namespace=NS,
)
DEAD_LETTERS = Counter(
    "dead_letters", "Tasks moved to the dead letters, by workflow.", ["workflow"], namespace=NS
)
STALE_COMMITS = Counter(
    "stale_commits", "Commits refused by the version/epoch check (another owner).", namespace=NS
)
SUBMISSIONS_REJECTED = Counter(
    "submissions_rejected",
    "Submissions that created nothing, by intake and reason code.",
    ["via", "reason"],
    namespace=NS,
)
RATE_LIMITED = Counter(
    "rate_limited", "Submissions refused by admission control, by tenant.", ["tenant"], namespace=NS
)
ADMISSION_ERRORS = Counter(
    "admission_errors",
    "Admission checks that could not reach Redis (the request was let through).",
    namespace=NS,
)
AUTH_FAILURES = Counter(
    "auth_failures",
    "Requests refused for their bearer token, by reason (expired, bad_signature, ...).",
    ["reason"],
    namespace=NS,
)
HTTP_REQUESTS = Counter(
    "http_requests",
    "API requests by method, route template and status code.",
    ["method", "route", "status"],
    namespace=NS,
)
HTTP_SECONDS = Histogram(
    "http_request_duration_seconds",
    "API request latency by method and route template.",
    ["method", "route"],
    namespace=NS,
)


MAX_TENANT_LABELS = 100
OTHER_TENANTS = "other"


class TenantLabels:
    """The label value for a tenant: its id for the first `limit` distinct tenants this process
    sees, `other` for the rest. First-seen rather than top-N by traffic, so a series never
    changes its meaning halfway (a tenant's counter does not move to `other` and back)."""

    def __init__(self, limit: int = MAX_TENANT_LABELS) -> None:
        self.limit = limit
        self._named: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, tenant_id: str) -> str:
        if tenant_id in self._named:
            return tenant_id
        with self._lock:
            if tenant_id in self._named or len(self._named) < self.limit:
                self._named.add(tenant_id)
                return tenant_id
        return OTHER_TENANTS


tenant_label = TenantLabels()


def _safe(fn: Callable[..., None]) -> Callable[..., None]:
    """Observer hooks must never raise into the orchestrator."""

    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except Exception:
            log.exception("metrics hook %s failed", fn.__name__)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


class PrometheusObserver:
    """Implements `orchestrator.ports.Observer`, plus hooks for the agent components and intake.

    The agent components report through `policy_decision`, `model_call` and `tool_call` (or a
    `MetricsAuditSink` around the tool executor's audit sink); the API and the Celery-native
    intake report `task_created`, `submission_rejected` and `rate_limited`.
    """

    # -- orchestrator.ports.Observer -----------------------------------------------------------

    @_safe
    def transition(self, workflow: str, frm: str, to: str) -> None:
        TRANSITIONS.labels(workflow, frm, to).inc()

    @_safe
    def step(self, status: str, seconds: float, result: str) -> None:
        STEP_SECONDS.labels(status, result).observe(max(0.0, seconds))

    @_safe
    def lease_expired(self, count: int) -> None:
        LEASE_EXPIRIES.inc(count)

    @_safe
    def reconciled(self, result: str) -> None:
        # The orchestrator reports entering EXEC_UNKNOWN through this hook too.
        if result == "entered_unknown":
            EXEC_UNKNOWN_ENTRIES.inc()
        else:
            RECONCILIATIONS.labels(result).inc()

    @_safe
    def dead_letter(self, workflow: str) -> None:
        DEAD_LETTERS.labels(workflow).inc()

    @_safe
    def stale_commit(self) -> None:
        STALE_COMMITS.inc()

    def task_ended(self, task_id: str) -> None:
        """No metric: per-task, for traces (`obs.otel.TracingObserver`)."""

    # -- intake -------------------------------------------------------------------------------

    @_safe
    def task_created(self, workflow: str, via: str) -> None:
        TASKS_CREATED.labels(workflow, via).inc()

    @_safe
    def submission_rejected(self, via: str, reason: str) -> None:
        SUBMISSIONS_REJECTED.labels(via, reason).inc()

    @_safe
    def rate_limited(self, tenant_id: str) -> None:
        RATE_LIMITED.labels(tenant_label(tenant_id)).inc()

    @_safe
    def auth_failed(self, reason: str) -> None:
        AUTH_FAILURES.labels(reason).inc()

    @_safe
    def admission_error(self) -> None:
        ADMISSION_ERRORS.inc()

    # -- agent components ---------------------------------------------------------------------

    @_safe
    def policy_decision(self, policy_version: str, decision: str) -> None:
        """`decision`: allow, deny or needs_approval (or approved, for a revalidated grant)."""
        POLICY_DECISIONS.labels(policy_version, decision).inc()

    @_safe
    def model_call(
        self,
        route: str,
        outcome: str,
        *,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cached_input_tokens: int = 0,
        cost: Decimal | float = 0,
    ) -> None:
        """One gateway request (`outcome`: ok, budget_exceeded, unavailable, invalid_output...)."""
        MODEL_CALLS.labels(route, outcome).inc()
        for kind, n in (
            ("input", input_tokens),
            ("output", output_tokens),
            ("cached_input", cached_input_tokens),
        ):
            if n:
                MODEL_TOKENS.labels(route, kind).inc(n)
        if cost:
            MODEL_COST.labels(route).inc(float(cost))

    @_safe
    def tool_call(self, tool: str, outcome: str) -> None:
        TOOL_CALLS.labels(tool, outcome).inc()

    @_safe
    def held(self, reason: str) -> None:
        CAP_WAITS.labels(reason).inc()

    @_safe
    def unauthorised_action(self, tool: str) -> None:
        log.error("UNAUTHORISED ACTION EXECUTED: %s ran without a policy decision", tool)
        UNAUTHORISED_ACTIONS.inc()


class MetricsAuditSink:
    """Wraps the tool executor's `AuditSink`: counts tool calls, and flags a write that may have
    reached its system (ok or unknown) without a policy decision stamped on it.

    `is_write(tool)` says whether a tool has side effects (e.g. from the tool registry).
    """

    def __init__(self, inner: Any, is_write: Callable[[str], bool], observer: Any) -> None:
        self.inner = inner
        self.is_write = is_write
        self.observer = observer

    def record(self, record: Any) -> None:
        tool, outcome = str(record.tool), str(record.outcome)
        self.observer.tool_call(tool, outcome)
        try:
            write = self.is_write(tool)
        except Exception:
            write = True  # unknown tool: treat as a write, the safe side for this alarm
        if write and outcome != "rejected" and not record.policy_version:
            self.observer.unauthorised_action(tool)
        self.inner.record(record)


def stamp_enqueued_at(headers: MutableMapping[str, Any] | None = None, **_: Any) -> None:
    """`before_task_publish` receiver: stamp the send time into the message headers, so the queue
    collector can tell the age of the oldest message (Celery's headers carry no send time)."""
    if headers is not None and ENQUEUED_AT_HEADER not in headers:
        headers[ENQUEUED_AT_HEADER] = time.time()


def multiprocess_dir() -> str | None:
    """The multiprocess directory, when this process runs in prometheus-client's multiprocess
    mode (the variable must be set before prometheus_client is imported)."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def exposition_registry(*extra: Any) -> CollectorRegistry:
    """The registry to serve: the process's own, or in multiprocess mode a fresh one that sums
    every process's files; `extra` collectors (e.g. queue depth) are added to it."""
    path = multiprocess_dir()
    if path is None and not extra:
        return REGISTRY
    if path is not None:
        from prometheus_client import multiprocess  # noqa: PLC0415 - only in that mode

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    else:
        registry = CollectorRegistry()
        registry.register(_Delegate(REGISTRY))
    for collector in extra:
        registry.register(collector)
    return registry


class _Delegate:
    """Serves another registry's metrics from within a registry of our own."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Any:
        return self._registry.collect()
