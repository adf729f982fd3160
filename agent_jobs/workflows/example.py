"""`example@1`: pay out an amount to an account, the smallest workflow that exercises every path
of the runtime: reads with retries and a dead letter, a policy that asks for approval at a
threshold, an effect with an idempotency key, EXEC_UNKNOWN and reconciliation, verification.

Input: {"account": "acc_42", "amount_minor": 150000, "currency": "EUR", "reads": 1,
        "approval_threshold_minor": 100000}
"""

from __future__ import annotations

import concurrent.futures
import re
from typing import Any

from agent_jobs.core.contracts import Action
from agent_jobs.core.errors import InvalidInput
from agent_jobs.core.hashing import derive_idempotency_key
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.workflows.example_backend import (
    BackendRejected,
    BackendThrottled,
    BackendUnavailable,
    ExampleBackend,
)

POLICY_VERSION = "EXAMPLE-PAYOUT@1"
TOOL = "ledger.transfer"
TOOL_VERSION = "1"
KEY_TEMPLATE = "payout:{tenant}:{request}"
MAX_AMOUNT_MINOR = 10_000_000
MAX_REAPPROVALS = 3
_ACCOUNT = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class ExampleWorkflow:
    name = "example"
    version = 1

    def __init__(self, backend: ExampleBackend | None = None, call_timeout_s: float = 5.0) -> None:
        self._backend = backend
        self.call_timeout_s = call_timeout_s

    @property
    def backend(self) -> ExampleBackend:
        # Opened on first use so that importing the registry creates no file.
        if self._backend is None:
            self._backend = ExampleBackend()
        return self._backend

    def pinned(self) -> dict[str, Any]:
        return {"tools": {TOOL: TOOL_VERSION}}

    def start(self, inp: wf.StepInput) -> dict[str, Any]:
        data = inp.input
        account = data.get("account")
        amount = data.get("amount_minor")
        currency = data.get("currency", "EUR")
        reads = data.get("reads", 1)
        if not isinstance(account, str) or not _ACCOUNT.match(account):
            raise InvalidInput("account must be 1-64 characters of letters, digits, '_' or '-'")
        if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
            raise InvalidInput("amount_minor must be a positive integer")
        if not isinstance(currency, str) or not re.fullmatch(r"[A-Z]{3}", currency):
            raise InvalidInput("currency must be a 3-letter code")
        if isinstance(reads, bool) or not isinstance(reads, int) or not 0 <= reads <= 20:
            raise InvalidInput("reads must be an integer from 0 to 20")
        return {"reads_done": 0, "account_facts": None, "transfer": None, "proposals": 0}

    def _action(self, inp: wf.StepInput) -> Action:
        data = inp.input
        return Action(
            tool=TOOL,
            tool_version=TOOL_VERSION,
            args={
                "account": data["account"],
                "amount_minor": data["amount_minor"],
                "currency": data.get("currency", "EUR"),
            },
            # The key names the action (this request of this tenant), never the attempt.
            idempotency_key=derive_idempotency_key(
                KEY_TEMPLATE,
                {"tenant": inp.tenant_id, "request": _key_safe(inp.idempotency_key)},
            ),
        )

    def decide(self, inp: wf.StepInput) -> wf.StepDecision:
        state = dict(inp.state)
        last = inp.resumed.kind if inp.resumed is not None else None
        if last == "approval_denied":
            return wf.Fail("the payout was denied by an approver", state)
        if last == "policy_denied":
            return wf.Fail("policy denies this payout", state)
        if last == "effect_rejected" and inp.resumed is not None:
            return wf.Fail(f"the ledger refused the transfer ({inp.resumed.code})", state)
        if state.get("transfer"):
            return wf.ToVerify(state)
        if state["reads_done"] < inp.input.get("reads", 1):
            try:
                facts = self.backend.read_account(inp.input["account"])
            except BackendThrottled as exc:
                return wf.Retry(f"account read throttled: {exc}", retry_after_s=exc.retry_after_s)
            except BackendUnavailable as exc:
                return wf.Retry(f"account read failed: {exc}")
            state["account_facts"] = facts
            state["reads_done"] += 1
            return wf.Observe(state, note="account read")
        if state["proposals"] >= MAX_REAPPROVALS:
            return wf.Escalate("approval expired too many times", state)
        state["proposals"] += 1
        return wf.Act(self._action(inp), state)

    def authorize(self, inp: wf.StepInput, action: Action) -> wf.Authorization:
        amount = int(action.args["amount_minor"])
        threshold = int(inp.input.get("approval_threshold_minor", 100_000))
        if action.tool != TOOL:
            return wf.Authorization("deny", POLICY_VERSION, "unknown tool")
        if amount > MAX_AMOUNT_MINOR:
            return wf.Authorization("deny", POLICY_VERSION, "amount above the payout limit")
        if amount >= threshold:
            ttl = float(inp.input.get("approval_ttl_s", 1800))
            return wf.Authorization(
                "needs_approval", POLICY_VERSION, f"amount >= {threshold}", ttl_s=ttl
            )
        return wf.Authorization("allow", POLICY_VERSION)

    def execute(self, inp: wf.StepInput, action: Action) -> wf.EffectOutcome:
        args = action.args
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        future = pool.submit(
            self.backend.transfer,
            action.idempotency_key,
            args["account"],
            int(args["amount_minor"]),
            args["currency"],
        )
        try:
            transfer = future.result(timeout=self.call_timeout_s)
        except concurrent.futures.TimeoutError:
            return wf.EffectUnknown("timeout")
        except BackendRejected as exc:
            return wf.EffectRejected(exc.code)
        except BackendThrottled as exc:
            # Refused under load before committing: not applied, wanted still; same key later.
            return wf.EffectThrottled(exc.retry_after_s, str(exc))
        except BackendUnavailable as exc:
            # Refused before committing: a definitive "not applied".
            return wf.EffectRejected("unavailable", str(exc))
        except (TimeoutError, ConnectionError) as exc:
            return wf.EffectUnknown(type(exc).__name__)
        finally:
            pool.shutdown(wait=False)
        inp.emit(
            "execute_tool " + TOOL, {"outcome": "ok", "idempotency_key": action.idempotency_key}
        )
        return wf.EffectApplied(transfer.as_dict())

    def reconcile(self, inp: wf.StepInput, action: Action) -> wf.ReconcileResult:
        try:
            found = self.backend.lookup(action.idempotency_key)
        except BackendUnavailable as exc:
            return wf.LookupFailed(str(exc))
        if found is None:
            return wf.NoEffect()
        args = action.args
        if (found.account, found.amount_minor, found.currency) != (
            args["account"],
            args["amount_minor"],
            args["currency"],
        ):
            return wf.Different(f"ledger has {found.as_dict()} under the key")
        return wf.Found(found.as_dict())

    def after_effect(
        self, inp: wf.StepInput, action: Action, result: dict[str, Any]
    ) -> wf.AfterEffect:
        state = dict(inp.state)
        state["transfer"] = result
        return wf.AfterEffect(state, verify=True)

    def verify(self, inp: wf.StepInput) -> wf.Verdict:
        transfer = inp.state.get("transfer") or {}
        found = self.backend.lookup(str(transfer.get("idempotency_key")))
        if found is None or found.as_dict() != transfer:
            return wf.Escalate("the ledger does not show the recorded transfer")
        return wf.Complete(
            {"transfer_id": found.transfer_id, "amount_minor": found.amount_minor, "verified": True}
        )


def _key_safe(text: str) -> str:
    """Idempotency keys of requests may hold any printable character; keep the derived key tidy."""
    return re.sub(r"[^A-Za-z0-9_.:@/-]", "_", text)[:120]
