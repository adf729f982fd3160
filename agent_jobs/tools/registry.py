"""The tool registry: which tools exist, and which a tenant may use right now.

Resolution is per tenant because the incident levers are per tenant: a per-tool disable flag
(for everyone or one tenant) and a per-tenant downgrade to read-only. Both are read at every call
through a `ToolSwitches` port, so flipping one takes effect without a deployment.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from agent_jobs.core.errors import ConfigError
from agent_jobs.tools.calls import Rejected
from agent_jobs.tools.descriptors import ToolDescriptor

log = logging.getLogger(__name__)


class ToolSwitches(Protocol):
    """Operator switches. A database-backed implementation lives with the store."""

    def tool_disabled(self, tool: str, tenant_id: str) -> bool:
        """Whether `tool` is switched off for `tenant_id` (or for every tenant)."""
        ...

    def tenant_read_only(self, tenant_id: str) -> bool:
        """Whether `tenant_id` is downgraded to read-only tools."""
        ...


class InMemorySwitches:
    """Switches held in process memory: the embedded mode and tests."""

    def __init__(self) -> None:
        self._disabled: set[tuple[str, str | None]] = set()
        self._read_only: set[str] = set()

    def disable_tool(self, tool: str, tenant_id: str | None = None) -> None:
        """Switch `tool` off for one tenant, or for all when `tenant_id` is None."""
        self._disabled.add((tool, tenant_id))

    def enable_tool(self, tool: str, tenant_id: str | None = None) -> None:
        self._disabled.discard((tool, tenant_id))

    def set_read_only(self, tenant_id: str, read_only: bool = True) -> None:
        if read_only:
            self._read_only.add(tenant_id)
        else:
            self._read_only.discard(tenant_id)

    def tool_disabled(self, tool: str, tenant_id: str) -> bool:
        return (tool, None) in self._disabled or (tool, tenant_id) in self._disabled

    def tenant_read_only(self, tenant_id: str) -> bool:
        return tenant_id in self._read_only


class ToolRegistry:
    """Descriptors by name (one version of each per deployment) plus the operator switches."""

    def __init__(
        self, descriptors: Iterable[ToolDescriptor] = (), *, switches: ToolSwitches | None = None
    ) -> None:
        self._tools: dict[str, ToolDescriptor] = {}
        self.switches: ToolSwitches = switches if switches is not None else InMemorySwitches()
        for d in descriptors:
            self.register(d)

    def register(self, descriptor: ToolDescriptor) -> None:
        """Add a tool. Registering a name twice is a configuration error, not an override."""
        if descriptor.name in self._tools:
            raise ConfigError(f"tool {descriptor.name} is already registered")
        self._tools[descriptor.name] = descriptor

    def check(self) -> None:
        """Fail fast if a keyed tool's reconcile read is missing or is itself a write."""
        for d in self._tools.values():
            if d.reconcile_tool is None:
                continue
            rec = self._tools.get(d.reconcile_tool)
            if rec is None or rec.is_write:
                raise ConfigError(f"tool {d.name}: reconcile tool {d.reconcile_tool} is not a read")

    def names(self) -> list[str]:
        return sorted(self._tools)

    def get(self, name: str) -> ToolDescriptor | None:
        """The descriptor regardless of switches (for operators and reconciliation planning)."""
        return self._tools.get(name)

    def resolve(self, name: str, tenant_id: str) -> ToolDescriptor | Rejected:
        """The descriptor `tenant_id` may call now, or why it may not (never an exception)."""
        d = self._tools.get(name)
        if d is None:
            return Rejected(code="unknown_tool", message=f"no tool named {name!r}")
        try:
            disabled = self.switches.tool_disabled(name, tenant_id)
            read_only = d.is_write and self.switches.tenant_read_only(tenant_id)
        except Exception:
            # Fail closed: if the switches cannot be read, an incident lever might be on.
            log.exception("tool switches unavailable; refusing %s", name)
            return Rejected(code="switches_unavailable", transient=True)
        if disabled:
            return Rejected(code="tool_disabled", message=f"{name} is disabled for this tenant")
        if read_only:
            return Rejected(code="tenant_read_only", message="tenant is downgraded to read-only")
        return d

    def available(self, tenant_id: str, step_scope: str) -> list[ToolDescriptor]:
        """What a model may be shown in this step: resolvable for the tenant and in scope."""
        out = []
        for name in self.names():
            d = self.resolve(name, tenant_id)
            if isinstance(d, ToolDescriptor) and step_scope in d.step_scopes:
                out.append(d)
        return out
