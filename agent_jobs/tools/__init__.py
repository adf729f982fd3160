"""Tool registry and executor: the only path from a proposed call to a business system."""

from agent_jobs.tools.adapter import (
    Adapter,
    AdapterResult,
    Invocation,
    PythonCallableAdapter,
    ServiceFailed,
    ServiceRejected,
    TransportFailed,
)
from agent_jobs.tools.audit import AuditRecord, AuditSink, LoggingAuditSink
from agent_jobs.tools.calls import (
    ExecContext,
    Ok,
    PolicyStamp,
    Rejected,
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

__all__ = [
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
    "PolicyStamp",
    "PythonCallableAdapter",
    "Rejected",
    "RetryPolicy",
    "ServiceFailed",
    "ServiceRejected",
    "SideEffect",
    "SystemsConfig",
    "ToolCall",
    "ToolDescriptor",
    "ToolExecutor",
    "ToolOutcome",
    "ToolRegistry",
    "ToolSwitches",
    "TransportFailed",
    "Unknown",
    "classify",
]
