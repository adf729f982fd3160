"""The adapter port: how a descriptor reaches the thing that does the work.

An adapter performs one attempt and reports what it learned, in exceptions that say whether the
service answered definitively (`ServiceRejected`), refused for now under load (`ServiceThrottled`),
may have acted (`ServiceFailed`), or could not be heard from (`TransportFailed`). It never retries
and never decides ok/rejected/unknown/throttled: that classification belongs to the executor,
which knows whether the tool writes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from agent_jobs.tools.credentials import Credential


@dataclass(frozen=True)
class Invocation:
    """Everything one attempt needs; built by the executor, never by the model."""

    tool: str
    tool_version: str
    args: dict[str, Any]
    timeout_s: float
    credential: Credential = field(repr=False)
    idempotency_key: str | None = None
    tenant_id: str = ""
    trace_id: str = ""


@dataclass(frozen=True)
class AdapterResult:
    """What came back. `status_code` lets callers tell a replay (200) from a creation (201)."""

    value: Any
    status_code: int | None = None


class Adapter(Protocol):
    """Performs exactly one attempt of a tool call, within `inv.timeout_s`."""

    def invoke(self, inv: Invocation) -> AdapterResult: ...


class AdapterSignal(Exception):
    """Base of what an adapter may raise to describe a failed attempt."""


class ServiceRejected(AdapterSignal):
    """The request was not applied: the service said so (a 4xx, an in-process refusal), or the
    adapter refused it before sending anything (misconfiguration, unusable arguments).

    `transient` marks refusals that may succeed later (408): not applied, worth retrying. A 429
    is `ServiceThrottled`, which also says when.
    """

    def __init__(
        self, code: str, message: str = "", *, status: int | None = None, transient: bool = False
    ) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.status = status
        self.transient = transient


class ServiceThrottled(AdapterSignal):
    """The service refused the request *before applying it* because of load: HTTP 429, or 503
    with `Retry-After`. Nothing happened; the same request may be sent after `retry_after_s`
    (already bounded; None when the service gave no usable value)."""

    def __init__(
        self,
        code: str,
        message: str = "",
        *,
        retry_after_s: float | None,
        status: int | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s
        self.status = status


class ServiceFailed(AdapterSignal):
    """The service answered with a failure that does not say whether it applied the request (5xx,
    or a 2xx whose body cannot be used: too large, not JSON, not an object).

    The simulated payments service can fail *after* committing, so for a write this is "unknown".
    `transient` says whether asking again may help a read: a 5xx may pass, an answer too large
    or malformed will most likely come back the same.
    """

    def __init__(
        self, code: str, message: str = "", *, status: int | None = None, transient: bool = True
    ) -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code
        self.message = message
        self.status = status
        self.transient = transient


class TransportFailed(AdapterSignal):
    """No answer. `sent` is False only when the request provably never left (refused connect)."""

    def __init__(
        self, reason: Literal["timeout", "connection_error"], message: str = "", *, sent: bool
    ) -> None:
        super().__init__(f"{reason}: {message}" if message else reason)
        self.reason: Literal["timeout", "connection_error"] = reason
        self.message = message
        self.sent = sent


class PythonCallableAdapter:
    """Runs an in-process function as a tool: `fn(args)`, or `fn(args, invocation)`.

    The function runs in a daemon thread so the executor can stop waiting at the timeout. Python
    cannot kill a thread, so a timed-out function keeps running unobserved: functions with side
    effects should honour `invocation.timeout_s` themselves and be keyed like any other write.
    The function may raise `ServiceRejected` / `ServiceThrottled` / `ServiceFailed` /
    `TransportFailed` to describe a failure precisely; any other exception is treated as a
    failure of unknown effect.
    """

    def __init__(self, fn: Callable[..., Any], *, takes_invocation: bool = False) -> None:
        self._fn = fn
        self._takes_invocation = takes_invocation

    def invoke(self, inv: Invocation) -> AdapterResult:
        box: dict[str, Any] = {}
        done = threading.Event()
        args = dict(inv.args)

        def run() -> None:
            try:
                box["value"] = self._fn(args, inv) if self._takes_invocation else self._fn(args)
            except BaseException as e:
                box["error"] = e
            finally:
                done.set()

        worker = threading.Thread(target=run, name=f"tool:{inv.tool}", daemon=True)
        worker.start()
        if not done.wait(inv.timeout_s):
            raise TransportFailed("timeout", f"no result within {inv.timeout_s}s", sent=True)
        if "error" in box:
            raise box["error"]
        return AdapterResult(value=box.get("value"))
