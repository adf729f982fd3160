"""The audit port: one record per executed (or refused) tool call.

Records carry the hash of the arguments, never the arguments: enough to correlate two calls and
to prove which action ran, without copying customer data into the audit pipeline.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Literal, Protocol

from agent_jobs.core.contracts import Frozen

log = logging.getLogger("agent_jobs.audit")


class AuditRecord(Frozen):
    """One tool call as the audit log sees it; also the data of its `execute_tool <name>` span."""

    tenant_id: str
    task_id: str
    trace_id: str
    tool: str
    tool_version: str | None
    args_hash: str
    outcome: Literal["ok", "rejected", "unknown", "throttled"]
    code: str | None
    idempotency_key: str | None
    duration_ms: int
    span_name: str
    attempts: int = 0
    policy_version: str | None = None
    approval_id: str | None = None
    started_at: datetime | None = None


class AuditSink(Protocol):
    """Appends audit records. Must not raise for ordinary failures; the executor logs if it does."""

    def record(self, record: AuditRecord) -> None: ...


class LoggingAuditSink:
    """Writes each record as one JSON line on the `agent_jobs.audit` logger, at DEBUG: the
    task's event log already holds every tool call, and a worker at INFO writes at most one
    line per step (set `agent_jobs.audit` to DEBUG to ship these lines to a log pipeline)."""

    def record(self, record: AuditRecord) -> None:
        log.debug("%s", record.model_dump_json())
