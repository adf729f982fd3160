"""Fakes of the executor's ports, shipped for users' tests (no network, no secrets, no sleeping)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import Any

from agent_jobs.core.clock import Clock, FixedClock
from agent_jobs.tools.adapter import AdapterResult, Invocation
from agent_jobs.tools.audit import AuditRecord
from agent_jobs.tools.credentials import Credential, scope_of


class FakeCredentialProvider:
    """Mints readable, numbered tokens and remembers every mint; `fail=True` makes minting fail."""

    def __init__(self, clock: Clock | None = None, *, fail: bool = False) -> None:
        self._clock = clock or FixedClock()
        self.fail = fail
        self.minted: list[tuple[str, str, int, str]] = []

    def mint(self, tool: str, tenant_id: str, ttl_s: int, *, role: str = "") -> Credential:
        if self.fail:
            raise RuntimeError("vault unavailable")
        self.minted.append((tool, tenant_id, ttl_s, role))
        return Credential(
            token=f"fake-{len(self.minted)}:{tool}:{tenant_id}",
            expires_at=self._clock.now() + timedelta(seconds=ttl_s),
            scope=scope_of(tool, tenant_id),
            issued_at=self._clock.now(),
        )


class InMemoryAuditSink:
    """Keeps audit records in a list; `fail=True` makes recording raise."""

    def __init__(self, *, fail: bool = False) -> None:
        self.records: list[AuditRecord] = []
        self.fail = fail

    def record(self, record: AuditRecord) -> None:
        if self.fail:
            raise RuntimeError("audit store unavailable")
        self.records.append(record)


class ScriptedAdapter:
    """Plays back results or exceptions in order (the last one repeats) and records invocations.

    A script item may also be a callable taking the `Invocation`, for results that depend on it.
    """

    def __init__(self, script: Iterable[Any]) -> None:
        self._script = list(script)
        if not self._script:
            raise ValueError("a script needs at least one step")
        self.invocations: list[Invocation] = []

    @property
    def calls(self) -> int:
        return len(self.invocations)

    def invoke(self, inv: Invocation) -> AdapterResult:
        self.invocations.append(inv)
        step = self._script[min(len(self.invocations), len(self._script)) - 1]
        if isinstance(step, BaseException):
            raise step
        if callable(step):
            fn: Callable[[Invocation], Any] = step
            step = fn(inv)
        return step if isinstance(step, AdapterResult) else AdapterResult(value=step)
