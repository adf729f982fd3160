"""`refund_resolution@3`: the refund agent of seed 004 as a workflow of the orchestrator.

The orchestrator owns status, approvals, the intent-before-effect commit and reconciliation; this
class supplies the refund-specific hooks:

- `decide` (RUNNING): the phases of `phases.py`: reads, policy retrieval, the refund proposal,
  the verification read, the reply draft;
- `authorize`: POL-REF-004 at the current version, on ledger facts from the task's observations
  (never model text); the orchestrator calls it again before executing an approved action;
- `execute`: `refunds.create` through the tool executor with the key `refund:{request}:{payment}`
  and a stamp of the decision it rests on (action hash, policy version, approval id);
- `reconcile`: `refunds.get_by_key`, compared with the intent;
- `after_effect`: record the refund, then verify it against the ledger before drafting;
- `verify` (VERIFYING): the draft's claims against verified facts; one redraft, then ESCALATED;
  the reply is rendered by trusted code with the customer's name put back.

Input: `{"message": "Order 8472 was charged twice ...", "channel": "chat", "order_id"?: "8472"}`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from agent_jobs.agents.facts import Facts
from agent_jobs.core.contracts import Action
from agent_jobs.core.errors import InvalidInput
from agent_jobs.core.text import clean_text, for_log
from agent_jobs.ops import autonomy_threshold_minor
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.policy import CURRENT, UnknownPolicyVersion
from agent_jobs.tools import Ok, Rejected, ToolCall
from agent_jobs.tools.refund_tools import STEP_EXECUTE, STEP_RECONCILE
from agent_jobs.verify import (
    NoRefund,
    RefundSubmitted,
    UnverifiedClaims,
    parse_claims,
    render_reply,
    verify_draft,
)
from agent_jobs.workflows.refund import phases
from agent_jobs.workflows.refund import state as st
from agent_jobs.workflows.refund.agent import CLAIMS, REFUND, REFUND_EFFECT
from agent_jobs.workflows.refund.toolcalls import refund_call, run_one
from agent_jobs.workflows.refund.wiring import RefundServices, services_from_env

NAME = REFUND.name
VERSION = REFUND.version
# Tool schema versions a task is pinned to (declared in `agent.py`).
TOOL_VERSIONS = dict(REFUND.tools)
MAX_MESSAGE_CHARS = 4000
_ORDER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
INPUT_FIELDS = ("message", "channel", "order_id")
CHANNELS = ("chat", "email")


@dataclass(frozen=True)
class RefundInput:
    """A valid submission: the customer's message, its channel, and an optional order id."""

    message: str
    channel: str
    order_id: str | None


def validate_input(data: Mapping[str, Any]) -> RefundInput:
    """The one check of a submission, at submit (`check_input`) and at start (`start`).

    Raises `InvalidInput` naming the field (`input.<name>`). Unknown fields are refused: a typo
    such as `order` for `order_id` must not silently drop the order the caller meant."""
    unknown = sorted(str(k) for k in data if k not in INPUT_FIELDS)
    if unknown:
        name = for_log(unknown[0], 64)
        raise InvalidInput(
            f"unknown field {name!r} (known: {', '.join(INPUT_FIELDS)})", field=f"input.{name}"
        )
    message = data.get("message")
    channel = data.get("channel", "chat")
    order_id = data.get("order_id")
    if not isinstance(message, str) or not message.strip():
        raise InvalidInput("message must be a non-empty string", field="input.message")
    if len(message) > MAX_MESSAGE_CHARS:
        raise InvalidInput(
            f"message must be at most {MAX_MESSAGE_CHARS} characters", field="input.message"
        )
    if channel not in CHANNELS:
        raise InvalidInput("channel must be 'chat' or 'email'", field="input.channel")
    if order_id is not None and (not isinstance(order_id, str) or not _ORDER_ID.match(order_id)):
        raise InvalidInput(
            "order_id must be 1-64 letters, digits, '_' or '-'", field="input.order_id"
        )
    # Content is data: NUL and lone surrogates cannot be stored; they become U+FFFD here, once.
    return RefundInput(clean_text(message), str(channel), order_id)


class RefundWorkflow:
    """The refund workflow. `services` may be given (tests) or built from the environment on
    first use (workers): registering the workflow touches no file and no network."""

    name = NAME
    version = VERSION

    def __init__(
        self, services: RefundServices | Callable[[], RefundServices] | None = None
    ) -> None:
        self._factory: Callable[[], RefundServices] = (
            services_from_env if services is None else _constant(services)
        )
        self._services: RefundServices | None = None
        self._lock = threading.Lock()

    @property
    def services(self) -> RefundServices:
        if self._services is None:
            with self._lock:
                if self._services is None:
                    self._services = self._factory()
        return self._services

    def pinned(self) -> dict[str, Any]:
        # Policy is recorded as the version in force at the start, but is always evaluated at
        # the current version: acting under a rescinded rule is worse than being inconsistent.
        return REFUND.pinned()

    def check_input(self, input: dict[str, Any]) -> None:
        """Refuse an invalid submission before a task exists (`InputCheck`)."""
        validate_input(input)

    def start(self, inp: wf.StepInput) -> dict[str, Any]:
        # Validated again: a task created by an older release may reach this worker.
        data = validate_input(inp.input)
        return st.initial_state(
            data.message, data.channel, data.order_id, st.request_id(inp.idempotency_key)
        )

    def quick(self, inp: wf.StepInput) -> bool:
        """Starting (validate the input, build the first state) and verifying (pure checks of
        the draft against the facts this task read) do no I/O: they run as quick steps, one
        compare-and-set without a lease. Every other step calls the model or a tool."""
        return not inp.state or inp.state.get("phase") == phases.VERIFY

    def decide(self, inp: wf.StepInput) -> wf.StepDecision:
        return phases.decide(self.services, inp)

    def authorize(self, inp: wf.StepInput, action: Action) -> wf.Authorization:
        """The declared policy at the task's version decides (`REFUND.authorize`)."""
        version = policy_version(inp.pinned)
        policy = REFUND.policy_at(version)
        if policy is None:
            raise UnknownPolicyVersion(version)
        return REFUND.authorize(
            policy,
            action,
            ledger_facts(inp.state),
            inp.pinned,
            autonomy_minor=autonomy_minor(inp.pinned, autonomy_threshold_minor(inp.tenant_id)),
        )

    def _request_id(self, inp: wf.StepInput) -> str:
        return str(inp.state["request"]["request_id"])

    def execute(self, inp: wf.StepInput, action: Action) -> wf.EffectOutcome:
        runtime = inp.state.get("runtime") or {}
        recorded = inp.state.get("proposal") or {}
        if not recorded.get("action_hash"):
            return wf.EffectRejected("no_recorded_decision", "no policy decision was recorded")
        call = refund_call(
            action.args,
            action.idempotency_key,
            # The hash the gate (and any grant) was given, not one recomputed from these args:
            # arguments changed since then make the executor refuse the call.
            action_hash=str(recorded["action_hash"]),
            policy_version=str(
                (runtime.get("last_policy") or {}).get("policy_version")
                or policy_version(inp.pinned)
            ),
            approval_id=runtime.get("approval_id"),
        )
        outcome = run_one(self.services, inp, call, STEP_EXECUTE, self._request_id(inp))
        if isinstance(outcome, Ok):
            result = outcome.result if isinstance(outcome.result, dict) else {}
            return wf.EffectApplied(
                {"refund": result, "found_by": "create", "replayed": outcome.status_code == 200}
            )
        if isinstance(outcome, Rejected) and not outcome.transient:
            return wf.EffectRejected(outcome.code, outcome.message)
        if outcome.kind == "throttled":
            # Refused under load before anything was applied (429, or 503 + Retry-After): the
            # orchestrator parks the task and sends the same key and grant after the delay.
            reason = f"{outcome.code}: {outcome.message}" if outcome.message else outcome.code
            return wf.EffectThrottled(
                outcome.retry_after_s, reason[:200], by_operator=outcome.by_operator
            )
        # A transient refusal (408) applied nothing, but "unknown" sends the task to look it up
        # and retry with the same key and grant, where a rejection would re-plan and make a
        # person approve the same refund twice.
        reason = outcome.reason if outcome.kind == "unknown" else outcome.code
        return wf.EffectUnknown(f"{reason}: {outcome.message}"[:200])

    def reconcile(self, inp: wf.StepInput, action: Action) -> wf.ReconcileResult:
        args = {REFUND_EFFECT.lookup_arg: action.idempotency_key}
        call = ToolCall(tool=REFUND_EFFECT.lookup, args=args)
        outcome = run_one(self.services, inp, call, STEP_RECONCILE, self._request_id(inp))
        if not isinstance(outcome, Ok):
            return wf.LookupFailed(getattr(outcome, "code", "unknown"))
        rows = (outcome.result or {}).get("refunds", []) if isinstance(outcome.result, dict) else []
        if not rows:
            return wf.NoEffect()
        row = rows[0]
        wanted = {k: action.args[k] for k in ("payment_id", "amount_minor", "currency")}
        found = {k: row.get(k) for k in wanted}
        if found != wanted:
            return wf.Different(f"refund {row.get('refund_id')} under the key is {found}")
        return wf.Found({"refund": row, "found_by": "idempotency_key"})

    def after_effect(
        self, inp: wf.StepInput, action: Action, result: dict[str, Any]
    ) -> wf.AfterEffect:
        state = {k: v for k, v in inp.state.items() if k != "runtime"}
        refund = dict(result.get("refund") or {})
        by_key = result.get("found_by") == "idempotency_key"
        tool = REFUND_EFFECT.lookup if by_key else REFUND_EFFECT.tool
        args = {REFUND_EFFECT.lookup_arg: action.idempotency_key} if by_key else dict(action.args)
        st.record_tool(state, tool, args, result=refund)
        state.update(
            refund=refund,
            refund_key=action.idempotency_key,
            found_by=result.get("found_by"),
            decision={"kind": "refund"},
            awaiting=None,
            phase=REFUND.after(phases.DECIDE),
        )
        # Not straight to VERIFYING: the reply is drafted after the ledger confirms the refund.
        return wf.AfterEffect(state, verify=False)

    def verify(self, inp: wf.StepInput) -> wf.Verdict:
        state = {k: v for k, v in inp.state.items() if k != "runtime"}
        facts = st.verified_facts(state)
        draft = state.get("draft") or {}
        failures: list[str] = []
        reply = ""
        try:
            claims = parse_claims(draft.get("claims") or [], CLAIMS)
        except ValidationError:
            claims, failures = [], ["malformed_claims"]
        if not failures:
            failures = verify_draft(str(draft.get("text") or ""), claims, facts).failures
            failures += _missing_claims(state, claims)
        if not failures:
            try:
                reply = render_reply(st.raw_order(state) or {}, facts, claims)
            except UnverifiedClaims as exc:
                failures = exc.failures
        if failures:
            return self._redraft(state, failures)
        state["phase"] = "done"
        return wf.Complete(_outcome(state, reply), state)

    @staticmethod
    def _redraft(state: dict[str, Any], failures: list[str]) -> wf.Verdict:
        st.append(state, {"kind": "verifier", "failures": failures})
        if int(state.get("redrafts") or 0) >= 1:
            return wf.Escalate(
                "the reply failed verification after a redraft: " + ", ".join(failures), state
            )
        state.update(redrafts=int(state.get("redrafts") or 0) + 1, draft=None, phase=phases.DRAFT)
        return wf.Redraft(", ".join(failures), state)


def policy_version(pinned: Mapping[str, Any]) -> str:
    """The bundle a task decides under: its release's (pinned with the release, so a task keeps
    the policy its release was evaluated with), else the current one. A task without a release
    records the version in force at its start but is decided at the current version: acting
    under a rescinded rule is worse than being inconsistent."""
    if pinned.get("release") and pinned.get("policy"):
        return str(pinned["policy"])
    return CURRENT


def autonomy_minor(pinned: Mapping[str, Any], operator: int | None) -> int | None:
    """What may execute without a person: the lower of the operator's switch (an incident sets
    it to 0) and the task's release flag `auto_execute_under_minor` (0: every refund asks). A
    task without a release has only the operator's; the bundle's own threshold applies in all
    cases, since the bundle never lets an autonomy cap raise it."""
    caps = [operator] if operator is not None else []
    if pinned.get("release"):
        flag = (pinned.get("flags") or {}).get("auto_execute_under_minor", 0)
        # Not an int (a stored row edited by hand, a bool): fail closed, every refund asks.
        caps.append(flag if isinstance(flag, int) and not isinstance(flag, bool) else 0)
    return min(caps) if caps else None


def ledger_facts(state: Mapping[str, Any]) -> Facts:
    """The task's successful reads and effects as the declared policy's `Facts`: its ledger
    rule rebuilds the ledger from them exactly as `state.ledger_facts` does (same order)."""
    observed = st.observations(dict(state))
    return Facts(input={}, reads=tuple({"tool": t, "result": r} for t, r in observed), effects=())


def _missing_claims(state: dict[str, Any], claims: list[Any]) -> list[str]:
    """A reply must state what happened: the refund this task made, or that none was made."""
    refund = state.get("refund")
    if refund:
        ids = {c.refund_id for c in claims if isinstance(c, RefundSubmitted)}
        return [] if refund.get("refund_id") in ids else ["refund_not_claimed"]
    return [] if any(isinstance(c, NoRefund) for c in claims) else ["no_refund_not_claimed"]


def _outcome(state: dict[str, Any], reply: str) -> dict[str, Any]:
    usage = st.usage(state)
    common = {
        "verified": True,
        "reply": reply,
        "model_calls": usage.calls,
        "model_cost_inr": str(usage.cost),
    }
    refund = state.get("refund")
    if not refund:
        reason = (state.get("decision") or {}).get("reason") or "no_duplicate_capture"
        return {"refund_id": None, "no_refund_reason": reason, **common}
    return {
        "refund_id": refund.get("refund_id"),
        "payment_id": refund.get("payment_id"),
        "amount_minor": refund.get("amount_minor"),
        "currency": refund.get("currency"),
        "refund_status": refund.get("status"),
        "reconciled": state.get("found_by") == "idempotency_key",
        **common,
    }


def _constant(
    services: RefundServices | Callable[[], RefundServices],
) -> Callable[[], RefundServices]:
    if isinstance(services, RefundServices):
        return lambda: services
    return services
