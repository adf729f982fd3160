"""The Prometheus observer and the audit-sink alarm (pure: the default registry, no services)."""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY

from agent_jobs.api.redaction import redact_event_data
from agent_jobs.obs.metrics import MetricsAuditSink, PrometheusObserver, stamp_enqueued_at
from agent_jobs.orchestrator.ports import Observer
from agent_jobs.tools.audit import AuditRecord


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_the_observer_implements_the_orchestrator_port() -> None:
    observer: Observer = PrometheusObserver()  # the protocol, checked by mypy and at runtime
    before = sample("agent_jobs_exec_unknown_entries_total")
    found = sample("agent_jobs_reconciliations_total", result="found")
    observer.reconciled("entered_unknown")
    observer.reconciled("found")
    assert sample("agent_jobs_exec_unknown_entries_total") == before + 1
    assert sample("agent_jobs_reconciliations_total", result="found") == found + 1
    # entering EXEC_UNKNOWN is not a reconciliation
    assert sample("agent_jobs_reconciliations_total", result="entered_unknown") == 0


def test_hooks_never_raise() -> None:
    observer = PrometheusObserver()
    observer.step("RUNNING", float("nan"), "ok")  # a broken clock must not break a step
    observer.lease_expired(-1)  # counters refuse negative increments; the hook swallows it


def record(tool: str, outcome: str, policy_version: str | None) -> AuditRecord:
    return AuditRecord(
        tenant_id="acme",
        task_id="tsk_1",
        trace_id="0" * 32,
        tool=tool,
        tool_version="1",
        args_hash="sha256:x",
        outcome=outcome,  # type: ignore[arg-type]
        code=None,
        idempotency_key=None,
        duration_ms=3,
        span_name=f"execute_tool {tool}",
        policy_version=policy_version,
    )


class Inner:
    def __init__(self) -> None:
        self.records: list[Any] = []

    def record(self, r: Any) -> None:
        self.records.append(r)


def test_audit_sink_counts_calls_and_flags_unauthorised_writes() -> None:
    inner = Inner()
    sink = MetricsAuditSink(inner, lambda tool: tool == "refunds.create", PrometheusObserver())
    alarm = sample("agent_jobs_unauthorised_actions_executed_total")
    calls = sample("agent_jobs_tool_calls_total", tool="refunds.create", outcome="ok")

    sink.record(record("payments.list", "ok", None))  # a read needs no policy decision
    sink.record(record("refunds.create", "ok", "POL-REF-004@4"))  # authorised write
    sink.record(record("refunds.create", "rejected", None))  # refused before it ran
    assert sample("agent_jobs_unauthorised_actions_executed_total") == alarm
    sink.record(record("refunds.create", "unknown", None))  # may have run, with no decision
    assert sample("agent_jobs_unauthorised_actions_executed_total") == alarm + 1
    assert sample("agent_jobs_tool_calls_total", tool="refunds.create", outcome="ok") == calls + 1
    assert len(inner.records) == 4  # everything still reaches the real audit sink


def test_enqueue_stamp_is_added_once() -> None:
    headers: dict[str, Any] = {}
    stamp_enqueued_at(headers=headers)
    first = headers["aj-enqueued-at"]
    stamp_enqueued_at(headers=headers)
    assert headers["aj-enqueued-at"] == first
    stamp_enqueued_at(headers=None)  # nothing to stamp, no error


def test_event_redaction_hashes_arguments_and_masks_personal_data() -> None:
    data = {
        "tool": "refunds.create",
        "action_hash": "sha256:abc",
        "args": {"payment_id": "pay_1", "amount_minor": 200000},
        "nested": [{"Arguments": [1, 2]}, {"note": "write to a.b@example.com"}],
        "customer_name": "Asha Rao",
        "token": "eyJ...",
    }
    out = redact_event_data(data)
    assert out["tool"] == "refunds.create" and out["action_hash"] == "sha256:abc"
    assert out["args"]["redacted"] is True and out["args"]["hash"].startswith("sha256:")
    assert out["args"] == redact_event_data({"args": dict(data["args"])})["args"]  # stable hash
    assert out["nested"][0]["Arguments"]["redacted"] is True
    assert out["nested"][1]["note"] == "write to [REDACTED:pii]"
    assert out["customer_name"] == "[REDACTED:pii]"
    assert out["token"]["redacted"] is True
    assert "pay_1" not in str(out) and "Asha" not in str(out)


def test_tenant_labels_are_bounded() -> None:
    from agent_jobs.obs.metrics import OTHER_TENANTS, TenantLabels

    labels = TenantLabels(limit=3)
    assert [labels(t) for t in ("a", "b", "a", "c")] == ["a", "b", "a", "c"]
    assert labels("d") == OTHER_TENANTS and labels("e") == OTHER_TENANTS
    assert labels("b") == "b"  # a named tenant keeps its name: its series never changes meaning


def test_rate_limited_series_stop_growing_at_the_cap(monkeypatch: Any) -> None:
    from agent_jobs.obs import metrics

    monkeypatch.setattr(metrics, "tenant_label", metrics.TenantLabels(limit=2))
    observer = PrometheusObserver()
    other = sample("agent_jobs_rate_limited_total", tenant="other")
    for i in range(5):
        observer.rate_limited(f"cap-test-{i}")
    named = {
        s.labels["tenant"]
        for family in REGISTRY.collect()
        if family.name == "agent_jobs_rate_limited"
        for s in family.samples
        if s.labels["tenant"].startswith("cap-test-")
    }
    assert named == {"cap-test-0", "cap-test-1"}
    assert sample("agent_jobs_rate_limited_total", tenant="other") == other + 3
