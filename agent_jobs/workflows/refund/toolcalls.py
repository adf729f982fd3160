"""Tool calls of the refund workflow, always through the tool executor.

Reads proposed together run in parallel (the seed's orders + payments: the slower of the two, not
their sum). Every call leaves an `execute_tool <name>` event on the task with the arguments
hashed, written from the step's own thread after the calls return (the store is not shared
across the read threads).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from agent_jobs.agents.audit import BufferedAudit
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.tools import (
    ExecContext,
    Outcome,
    PolicyStamp,
    ToolCall,
    ToolExecutor,
)
from agent_jobs.workflows.refund.agent import REFUND_EFFECT
from agent_jobs.workflows.refund.wiring import RefundServices

MAX_PARALLEL_READS = 4

_pool: ThreadPoolExecutor | None = None
_pool_pid = 0
_pool_lock = threading.Lock()


def _read_pool() -> ThreadPoolExecutor:
    """The process's read threads, kept: starting threads for every step that reads in parallel
    cost more CPU than the reads' own client work. At most `MAX_PARALLEL_READS` calls run at
    once in a process (with one step at a time per process, as the workers run, that is the
    bound per step). A forked child makes its own: threads do not survive a fork."""
    global _pool, _pool_pid
    with _pool_lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(MAX_PARALLEL_READS, thread_name_prefix="aj-reads")
            _pool_pid = os.getpid()
        return _pool


def _counted(services: RefundServices, audit: BufferedAudit) -> Any:
    """The audit sink, counting tool calls by outcome and flagging a write that may have reached
    its system without a policy decision (the "unauthorised actions executed" metric: zero)."""
    from agent_jobs.obs.metrics import MetricsAuditSink  # noqa: PLC0415 - see wiring.py

    def is_write(tool: str) -> bool:
        descriptor = services.tools.get(tool)
        return True if descriptor is None else descriptor.is_write

    return MetricsAuditSink(audit, is_write, services.observer)


def context(inp: wf.StepInput, scope: str, request_id: str) -> ExecContext:
    """Trusted context from the task row: the executor derives keys and credentials from it."""
    return ExecContext(
        tenant_id=inp.tenant_id,
        task_id=inp.task_id,
        trace_id=inp.trace_id,
        step_scope=scope,
        request_id=request_id,
    )


@dataclass(frozen=True)
class ReadResult:
    tool: str
    args: dict[str, Any]
    outcome: Outcome


def run_reads(
    services: RefundServices,
    inp: wf.StepInput,
    calls: list[dict[str, Any]],
    scope: str,
    request_id: str,
) -> list[ReadResult]:
    """Run `calls` ({tool, args}) in parallel under `scope`; results in the calls' order."""
    audit = BufferedAudit()
    executor = ToolExecutor(
        services.tools, services.credentials, _counted(services, audit), sleep=services.sleep
    )
    ctx = context(inp, scope, request_id)

    def one(call: dict[str, Any]) -> ReadResult:
        args = dict(call.get("args") or {})
        outcome = executor.execute(ToolCall(tool=str(call["tool"]), args=args), ctx)
        return ReadResult(str(call["tool"]), args, outcome)

    # One call runs on the step's own thread; several on the process's read threads.
    if len(calls) == 1 or not services.parallel_reads:
        results = [one(call) for call in calls]
    else:
        results = list(_read_pool().map(one, calls))
    audit.flush(inp, scope)
    return results


def run_one(
    services: RefundServices,
    inp: wf.StepInput,
    call: ToolCall,
    scope: str,
    request_id: str,
) -> Outcome:
    """One call (the refund write, or a reconcile or verification read), audited.

    Besides ok, rejected and unknown, the outcome may be `Throttled` (429, or 503 with
    `Retry-After`: nothing applied, come back after `retry_after_s`): for the write the workflow
    maps it to the orchestrator's `Throttled`, for a reconcile read to `LookupFailed`, and a
    read is retried after the delay, never failed for it."""
    audit = BufferedAudit()
    executor = ToolExecutor(
        services.tools, services.credentials, _counted(services, audit), sleep=services.sleep
    )
    outcome = executor.execute(call, context(inp, scope, request_id))
    audit.flush(inp, scope)
    return outcome


def refund_call(
    args: dict[str, Any],
    key: str,
    *,
    action_hash: str,
    policy_version: str,
    approval_id: str | None,
) -> ToolCall:
    """The refund write with its key and the stamp of the decision (and grant) it rests on."""
    return ToolCall(
        tool=REFUND_EFFECT.tool,
        args=args,
        idempotency_key=key,
        policy_decision=PolicyStamp(
            decision="approved" if approval_id else "allow",
            action_hash=action_hash,
            policy_version=policy_version,
            approval_id=approval_id,
        ),
    )
