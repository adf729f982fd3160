"""The audit sink of a step's tool calls: each record is logged at once and kept, then written
as the task's `execute_tool <name>` events from the step's own thread (the store is not shared
across the threads that run parallel reads). Used by every workflow that calls tools."""

from __future__ import annotations

import threading

from agent_jobs.orchestrator import workflow as wf
from agent_jobs.tools import AuditRecord, LoggingAuditSink


class BufferedAudit:
    """An `AuditSink` that logs each record and keeps it for the task's event log."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.records: list[AuditRecord] = []
        self._log = LoggingAuditSink()

    def record(self, record: AuditRecord) -> None:
        self._log.record(record)
        with self._lock:
            self.records.append(record)

    def flush(self, inp: wf.StepInput, scope: str) -> None:
        """Append one `execute_tool <name>` event per record (the ids are the task's own)."""
        with self._lock:
            records, self.records = self.records, []
        for r in records:
            data = r.model_dump(mode="json", exclude={"tenant_id", "task_id", "trace_id"})
            inp.emit(r.span_name, {**data, "step_scope": scope})
