"""Tool registry and executor: the only path from a proposed call to a business system."""

from agent_jobs.tools.adapter import (
    Adapter,
    AdapterResult,
    Invocation,
    PythonCallableAdapter,
    ServiceFailed,
    ServiceRejected,
    ServiceThrottled,
    TransportFailed,
)
from agent_jobs.tools.audit import AuditRecord, AuditSink, LoggingAuditSink
from agent_jobs.tools.calls import (
    ExecContext,
    Ok,
    Outcome,
    PolicyStamp,
    Rejected,
    Throttled,
    ToolCall,
    ToolOutcome,
    Unknown,
)
from agent_jobs.tools.credentials import (
    Credential,
    CredentialInvalid,
    CredentialProvider,
    HmacCredentialProvider,
)
from agent_jobs.tools.descriptors import RetryPolicy, SideEffect, ToolDescriptor
from agent_jobs.tools.executor import ToolExecutor, classify
from agent_jobs.tools.http import HttpAdapter, SystemsConfig
from agent_jobs.tools.registry import InMemorySwitches, ToolRegistry, ToolSwitches
from agent_jobs.tools.throttle import MAX_RETRY_AFTER_S, parse_retry_after

__all__ = [
    "MAX_RETRY_AFTER_S",
    "Adapter",
    "AdapterResult",
    "AuditRecord",
    "AuditSink",
    "Credential",
    "CredentialInvalid",
    "CredentialProvider",
    "ExecContext",
    "HmacCredentialProvider",
    "HttpAdapter",
    "InMemorySwitches",
    "Invocation",
    "LoggingAuditSink",
    "Ok",
    "Outcome",
    "PolicyStamp",
    "PythonCallableAdapter",
    "Rejected",
    "RetryPolicy",
    "ServiceFailed",
    "ServiceRejected",
    "ServiceThrottled",
    "SideEffect",
    "SystemsConfig",
    "Throttled",
    "ToolCall",
    "ToolDescriptor",
    "ToolExecutor",
    "ToolOutcome",
    "ToolRegistry",
    "ToolSwitches",
    "TransportFailed",
    "Unknown",
    "classify",
    "parse_retry_after",
]
