"""The tool executor: the only code path from a proposed call to a business system.

In the seed's order: resolve the tool for the tenant; validate the arguments against its schema;
check the step's scope; for a write, check the policy stamp binds these exact arguments (and the
idempotency key names this action); mint a scoped short-lived credential; call the adapter with
the tool's timeout; classify `ok | rejected | unknown | throttled`; and, whatever happened, audit.

Classification (reads retry transient failures per their `RetryPolicy`; writes never retry here),
as "what the adapter learned: write -> read (after retries)":

- a result: ok -> ok (every string cleaned per `core.text`, whatever the adapter)
- a 4xx or a refusal (`ServiceRejected`): rejected(code) -> rejected(code)
- a 429, or a 503 with `Retry-After` (`ServiceThrottled`): throttled(retry_after_s) ->
  throttled(retry_after_s), after waiting and asking again within the read's retry policy when
  the wait is no longer than the tool's own timeout
- a 5xx: unknown(server_error_after_send) -> rejected(code, transient)
- a 2xx too large, not JSON or not an object: unknown(server_error_after_send) ->
  rejected(code), not transient
- a timeout after sending: unknown(timeout) -> rejected(timeout, transient)
- a dropped or refused connection: unknown(connection_error) -> rejected(connection_error,
  transient)
- an unexpected exception: unknown(server_error_after_send) -> rejected(adapter_error)

Reads never report unknown: a read cannot have half-happened, it only failed to answer.

Operator switches (`ops`) are checked after the scope, before the policy stamp and the
credential: a tool disabled for the tenant refuses a read (`tool_disabled`, final: the model
re-plans without it); a write stopped by a switch (its tool disabled, the tenant read-only, or
side effects stopped) applied nothing and is still wanted, so it comes back `throttled` with
`retry_after_s` = the switch poll interval and the switch's code: the task parks holding nothing
and asks again, and never fails because a switch was on. Reads, reconciliation and verification
go on while effects are stopped. A credential minted before the credential epoch is never sent.

Throttled is its own outcome because it is the one refusal that is neither final nor ambiguous:
the service applied nothing (so nothing to reconcile) and the action is still wanted (so no
re-plan, no second approval); the caller parks and sends the same call, same key, later. A
long `Retry-After` is not waited out here: a worker is not held for a service's convenience.

A refused connection provably sent nothing, yet a write still reports unknown: the reconcile read
then finds nothing and the same key and grant retry, where a rejection would send the task back
to planning and make a human approve the same refund twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from agent_jobs.core.clock import Clock, SystemClock
from agent_jobs.core.errors import InvalidInput
from agent_jobs.core.hashing import action_hash, args_hash, derive_idempotency_key
from agent_jobs.core.text import clean_json, clean_text
from agent_jobs.ops.live import installed as installed_switches
from agent_jobs.ops.switches import (
    POLL_INTERVAL_S,
    Switches,
    SwitchSet,
)
from agent_jobs.tools.adapter import (
    Invocation,
    ServiceFailed,
    ServiceRejected,
    ServiceThrottled,
    TransportFailed,
)
from agent_jobs.tools.audit import AuditRecord, AuditSink
from agent_jobs.tools.calls import ExecContext, Ok, Outcome, Rejected, Throttled, ToolCall, Unknown
from agent_jobs.tools.credentials import Credential, CredentialProvider, revoked
from agent_jobs.tools.descriptors import CONTEXT_KEY_FIELDS, ToolDescriptor
from agent_jobs.tools.registry import ToolRegistry

log = logging.getLogger(__name__)


@dataclass
class _Progress:
    """What the audit record needs to know, whichever way `_run` ended."""

    started: float
    started_at: datetime
    descriptor: ToolDescriptor | None = None
    attempts: int = 0
    dispatched: bool = False


def classify(exc: BaseException, *, write: bool) -> Outcome:
    """Map one failed attempt to an outcome, per the table in the module docstring."""
    if isinstance(exc, ServiceRejected):
        return Rejected(
            code=clean_text(exc.code), message=clean_text(exc.message), transient=exc.transient
        )
    if isinstance(exc, ServiceThrottled):
        return Throttled(
            retry_after_s=exc.retry_after_s,
            code=clean_text(exc.code),
            message=clean_text(exc.message),
            status=exc.status,
        )
    if isinstance(exc, ServiceFailed):
        if write:
            return Unknown(reason="server_error_after_send", message=clean_text(str(exc)))
        return Rejected(
            code=clean_text(exc.code), message=clean_text(exc.message), transient=exc.transient
        )
    if isinstance(exc, TransportFailed):
        if write:
            return Unknown(reason=exc.reason, message=clean_text(exc.message))
        return Rejected(code=exc.reason, message=clean_text(exc.message), transient=True)
    if write:
        return Unknown(reason="server_error_after_send", message=type(exc).__name__)
    return Rejected(code="adapter_error", message=type(exc).__name__)


def _wait(d: ToolDescriptor, code: str, message: str) -> Outcome:
    """A call an operator switch stops: a write waits (nothing applied, still wanted); a read
    that cannot be made is a transient refusal."""
    if d.is_write:
        return Throttled(
            retry_after_s=POLL_INTERVAL_S, code=code, message=message, by_operator=True
        )
    return Rejected(code=code, message=message, transient=True)


def check_switches(d: ToolDescriptor, tenant_id: str, switches: SwitchSet) -> Outcome | None:
    """The operator switches that stop this call for this tenant, as an outcome (or None)."""
    if not d.is_write:
        if switches.tool_disabled(d.name, tenant_id) is not None:
            return Rejected(code="tool_disabled", message=f"{d.name} is disabled by operator")
        return None
    held = switches.write_held(d.name, tenant_id)
    return None if held is None else _wait(d, *held)


def _safe_args_hash(call: ToolCall) -> str:
    try:
        return args_hash(call.args)
    except InvalidInput:
        return "sha256:unhashable"


class ToolExecutor:
    """Executes `ToolCall`s. Never raises for a tool's failure: every result is an outcome."""

    def __init__(
        self,
        registry: ToolRegistry,
        credentials: CredentialProvider,
        audit: AuditSink,
        *,
        clock: Clock | None = None,
        sleep: Callable[[float], None] = time.sleep,
        switches: Switches | None = None,
    ) -> None:
        self.registry = registry
        self._credentials = credentials
        self._audit = audit
        self._clock = clock or SystemClock()
        self._sleep = sleep
        # None: the process's installed switches (`ops.live`), read at each call.
        self._switches = switches

    def _switch_set(self) -> SwitchSet:
        return (self._switches or installed_switches()).current()

    def execute(self, call: ToolCall, ctx: ExecContext) -> Outcome:
        """Run one call through every check, then the adapter; audit in all cases."""
        progress = _Progress(started=self._clock.monotonic(), started_at=self._clock.now())
        outcome: Outcome = Rejected(code="internal_error")
        try:
            outcome = self._run(call, ctx, progress)
        except Exception as e:
            # A bug here must not turn a write that may have gone out into a clean failure.
            log.exception("tool executor failed on %s", call.tool)
            write = progress.descriptor is not None and progress.descriptor.is_write
            outcome = (
                classify(e, write=True)
                if write and progress.dispatched
                else Rejected(code="internal_error", message=type(e).__name__)
            )
        finally:
            self._record(call, ctx, progress, outcome)
        return outcome

    def _run(self, call: ToolCall, ctx: ExecContext, progress: _Progress) -> Outcome:
        resolved = self.registry.resolve(call.tool, ctx.tenant_id)
        if isinstance(resolved, Rejected):
            return resolved
        d = progress.descriptor = resolved

        errors = d.validate_args(call.args)
        if errors:
            return Rejected(code="bad_args", message="; ".join(errors))
        if ctx.step_scope not in d.step_scopes:
            return Rejected(
                code="outside_scope", message=f"{d.name} is not allowed in step {ctx.step_scope!r}"
            )
        switches = self._switch_set()
        stopped = check_switches(d, ctx.tenant_id, switches)
        if stopped is not None:
            return stopped
        if d.is_write:
            refused = self._check_write(d, call, ctx)
            if refused is not None:
                return refused

        try:
            credential = self._credentials.mint(
                d.name, ctx.tenant_id, d.credential_ttl_s, role=d.permission
            )
        except Exception as e:
            log.warning("credential mint failed for %s: %s", d.name, type(e).__name__)
            return Rejected(code="credential_unavailable", transient=True)
        if revoked(credential, switches.credential_epoch(ctx.tenant_id)):
            # A provider that caches (a vault lease) handed out one from before a revocation.
            return _wait(d, "credential_revoked", "tool credentials revoked by operator")

        return self._call(d, call, ctx, credential, progress)

    def _check_write(self, d: ToolDescriptor, call: ToolCall, ctx: ExecContext) -> Rejected | None:
        """The policy stamp must bind these exact args; a keyed call must carry its action's key."""
        stamp = call.policy_decision
        if stamp is None:
            return Rejected(code="no_policy_decision", message="a write needs a policy decision")
        try:
            expected = action_hash(d.name, d.version, call.args)
        except InvalidInput as e:
            return Rejected(code="bad_args", message=str(e))
        # Recomputed from the args about to be sent: arguments changed after the decision or the
        # approval (or a tool version bump) cannot ride on the old decision.
        if stamp.action_hash != expected:
            return Rejected(
                code="action_hash_mismatch",
                message="arguments differ from the action the policy decision was made on",
            )
        if stamp.decision == "approved" and not stamp.approval_id:
            return Rejected(code="approval_missing", message="an approved stamp names no approval")
        if d.side_effect != "keyed":
            return None
        if call.idempotency_key is None:
            return Rejected(code="idempotency_key_required", message=f"{d.name} is keyed")
        assert d.idempotency_key_template is not None  # guaranteed by ToolDescriptor
        trusted = {f: getattr(ctx, f) for f in CONTEXT_KEY_FIELDS}
        try:
            key = derive_idempotency_key(d.idempotency_key_template, {**call.args, **trusted})
        except InvalidInput as e:
            return Rejected(code="bad_args", message=str(e))
        # A key that names the attempt (or another action) would defeat the service's dedup.
        if call.idempotency_key != key:
            return Rejected(
                code="idempotency_key_mismatch",
                message=f"key does not match template {d.idempotency_key_template}",
            )
        return None

    def _call(
        self,
        d: ToolDescriptor,
        call: ToolCall,
        ctx: ExecContext,
        credential: Credential,
        progress: _Progress,
    ) -> Outcome:
        inv = Invocation(
            tool=d.name,
            tool_version=d.version,
            args=dict(call.args),
            timeout_s=d.timeout_s,
            credential=credential,
            idempotency_key=call.idempotency_key if d.is_write else None,
            tenant_id=ctx.tenant_id,
            trace_id=ctx.trace_id,
        )
        # Writes get exactly one attempt whatever the descriptor says (also checked at startup).
        max_attempts = 1 if d.is_write else d.retry.max_attempts
        while True:
            if progress.attempts and revoked(
                credential, self._switch_set().credential_epoch(ctx.tenant_id)
            ):
                # Revoked while a read waited to try again: never sent again.
                return Rejected(code="credential_revoked", transient=True)
            progress.attempts += 1
            progress.dispatched = True
            try:
                res = d.adapter.invoke(inv)
            except Exception as e:
                outcome = classify(e, write=d.is_write)
            else:
                # Content is data: whatever the adapter, no NUL or lone surrogate gets past here.
                return Ok(result=clean_json(res.value), status_code=res.status_code)
            retryable = isinstance(outcome, Throttled) or (
                isinstance(outcome, Rejected) and outcome.transient
            )
            if not retryable or progress.attempts >= max_attempts:
                return outcome
            delay = d.retry.delay_s(progress.attempts)
            if isinstance(outcome, Throttled) and outcome.retry_after_s is not None:
                if outcome.retry_after_s > d.timeout_s:
                    return outcome  # longer than a slow answer: the caller parks the task
                delay = max(delay, outcome.retry_after_s)
            self._sleep(delay)

    def _record(
        self,
        call: ToolCall,
        ctx: ExecContext,
        progress: _Progress,
        outcome: Outcome,
    ) -> None:
        d = progress.descriptor
        stamp = call.policy_decision
        code = outcome.code if isinstance(outcome, (Rejected, Throttled)) else None
        if isinstance(outcome, Unknown):
            code = outcome.reason
        try:
            self._audit.record(
                AuditRecord(
                    tenant_id=ctx.tenant_id,
                    task_id=ctx.task_id,
                    trace_id=ctx.trace_id,
                    tool=call.tool,
                    tool_version=d.version if d else None,
                    args_hash=_safe_args_hash(call),
                    outcome=outcome.kind,
                    code=code,
                    idempotency_key=call.idempotency_key,
                    duration_ms=round((self._clock.monotonic() - progress.started) * 1000),
                    span_name=f"execute_tool {call.tool}",
                    attempts=progress.attempts,
                    policy_version=stamp.policy_version if stamp else None,
                    approval_id=stamp.approval_id if stamp else None,
                    started_at=progress.started_at,
                )
            )
        except Exception:
            # The outcome must reach the orchestrator even if the audit sink is down; the event
            # log (written with the transition) still records it.
            log.exception("audit sink failed for %s on task %s", call.tool, ctx.task_id)
