"""`decide` for refund_resolution@3: a fixed sequence of phases with bounded model decision points.

    investigate -> policy -> decide -> (gate, approval, effect: the orchestrator) -> confirm
                -> draft -> verify (VERIFYING)

Each call of `decide` does one durable thing: ask the model (its proposal is committed before
anything acts on it), run the reads it proposed, or run the deterministic verification read. The
model chooses reads, the refund (or none) and the reply's wording; it cannot skip a phase, add
one, widen a step's tools or decide policy. A phase whose evidence is still missing asks the model
again at most `MAX_ASKS` times, and the route's call budget bounds everything else.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent_jobs.config import settings
from agent_jobs.core.contracts import Action
from agent_jobs.core.errors import ConfigError, InvalidInput
from agent_jobs.core.hashing import derive_idempotency_key
from agent_jobs.core.text import for_log
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.policy import CURRENT
from agent_jobs.tools import Ok, Rejected, ToolCall, ToolDescriptor
from agent_jobs.tools.refund_tools import STEP_INVESTIGATE, STEP_RECONCILE
from agent_jobs.workflows.refund import state as st
from agent_jobs.workflows.refund.agent import REFUND, REFUND_EFFECT
from agent_jobs.workflows.refund.model import Asked, ask
from agent_jobs.workflows.refund.toolcalls import run_one, run_reads
from agent_jobs.workflows.refund.wiring import RefundServices

POLICY_DOC, _, _VERSION = CURRENT.partition("@")
POLICY_DOC_VERSION = int(_VERSION)
# The task phases the code below names (all declared in `REFUND.order`, checked at the end).
DECIDE, CONFIRM, DRAFT, VERIFY = "decide", "confirm", "draft", "verify"
MAX_ASKS = 2  # model asks per evidence phase before a person takes over
MAX_REAPPROVALS = 3  # grants that expired unused before the task escalates
# The confirmation read may lag the write: re-read at most this many times, after these pauses
# (seconds, the last one repeated), within `RefundServices.confirm_lag_s` of the first miss.
MAX_CONFIRM_REREADS = 4
CONFIRM_BACKOFF_S = (0.5, 1.0, 2.0, 4.0)

# The tools each decision point may show the model (and run, for reads): its declared phases.
STEP_TOOLS = {p.name: p.tools for p in REFUND.phases if p.tools}
# The evidence phases: task phase -> its decision point, for the declared points whose tools
# are all reads (investigate, policy). The model proposes reads there, code runs them.
_EFFECTS = {e.tool for e in REFUND.effects}
_PHASE_STEP = {p.at: p.name for p in REFUND.phases if p.tools and not _EFFECTS & set(p.tools)}
_REASON = re.compile(r"^[a-z0-9_]{1,64}$")


@dataclass
class Ctx:
    """One `decide` call: the services, the step input and a working copy of the state."""

    services: RefundServices
    inp: wf.StepInput
    state: dict[str, Any]

    @property
    def request_id(self) -> str:
        return str(self.state["request"]["request_id"])

    def tools(self, step_type: str) -> list[ToolDescriptor]:
        """The step's tools resolvable for this tenant now (operator switches may hide some).

        Raises `ToolPinBroken` when a tool is registered at another version than the task was
        pinned to: its schema changed under the task, which a person must look at.
        """
        pinned = self.inp.pinned.get("tools") or {}
        out = []
        for name in STEP_TOOLS[step_type]:
            d = self.services.tools.resolve(name, self.inp.tenant_id)
            if not isinstance(d, ToolDescriptor):
                continue
            if pinned.get(name) != d.version:
                raise ToolPinBroken(f"{name} is at version {d.version}, pinned {pinned.get(name)}")
            out.append(d)
        return out


class ToolPinBroken(Exception):
    """A tool's schema version differs from the one the task was pinned to."""


def decide(services: RefundServices, inp: wf.StepInput) -> wf.StepDecision:
    """One durable step of the RUNNING phases (see the module doc)."""
    # `inp.state` is this step's own copy (`StepInput`): a shallow one is enough to drop the
    # orchestrator's part without touching what the caller handed in.
    state = {k: v for k, v in inp.state.items() if k != "runtime"}  # it puts its own back
    try:
        return _decide(Ctx(services, inp, state))
    except ToolPinBroken as exc:
        return wf.Escalate(f"tool schema changed under the task: {exc}", state)


def _decide(c: Ctx) -> wf.StepDecision:
    state = c.state
    if state.get("awaiting") == "authorization":
        return after_gate(c)
    if state.get("planned"):
        return run_planned(c)
    phase = state["phase"]
    if phase in _PHASE_STEP:
        return ask_reads(c, phase)
    run = _RUN.get(phase)
    if run is None:
        return wf.Escalate(f"refund workflow in unknown phase {phase!r}", state)
    return run(c)


# -- facts the model decides on (redacted by `model.ask`) -------------------------------------


def model_facts(state: dict[str, Any]) -> dict[str, Any]:
    """The structured facts of a model request (the scripted rules read them; see `rules`)."""
    payments = [
        row
        for t, r in st.observations(state)
        if t == "payments.list"
        for row in r.get("payments", [])
    ]
    refunds = [
        row
        for t, r in st.observations(state)
        if t == "refunds.list"
        for row in r.get("refunds", [])
    ]
    policy = [
        {k: p.get(k) for k in ("doc_id", "version", "chunk_id")}
        for t, r in st.observations(state)
        if t in ("policy.search", "policy.get")
        for p in r.get("passages", [r])
    ]
    gate = [e for e in st.history(state) if e.get("kind") == "gate"]
    verifier = [e for e in st.history(state) if e.get("kind") == "verifier"]
    return {
        "message": state["request"]["message"],
        "order_id": state["request"].get("order_id"),
        "order": st.raw_order(state),
        "payments": payments,
        "refunds": refunds,
        "policy": policy,
        "denials": [{"reason": e.get("reason"), "args": e.get("args", {})} for e in gate],
        "decision": state.get("decision"),
        "refund": state.get("refund"),
        "verify_failures": verifier[-1]["failures"] if verifier else [],
        "redrafts": int(state.get("redrafts") or 0),
    }


# -- investigate and policy: the model proposes reads, code runs them --------------------------


def _missing(state: dict[str, Any], phase: str) -> str:
    """What the phase still needs, in words for the model; "" when its evidence is complete."""
    if phase == "investigate":
        order = st.raw_order(state)
        paid = order is not None and any(
            e["ok"]
            and e["tool"] == "payments.list"
            and e["args"].get("order_id") == order.get("order_id")
            for e in st.tool_entries(state)
        )
        return "" if paid else "orders.get and payments.list of the customer's order"
    if phase == "policy":
        docs = st.verified_facts(state).policy_docs
        return "" if (POLICY_DOC, POLICY_DOC_VERSION) in docs else f"passages of {POLICY_DOC}"
    return ""


def _advance(state: dict[str, Any]) -> None:
    """Move past every evidence phase whose evidence is already there (reads proposed early),
    in the declared order."""
    while state["phase"] in _PHASE_STEP and not _missing(state, state["phase"]):
        state["phase"] = REFUND.after(state["phase"])


def ask_reads(c: Ctx, phase: str) -> wf.StepDecision:
    state = c.state
    # Only answered asks count: an outage or an invalid answer is the retry budget's business.
    answered = int((state.get("asks") or {}).get(phase, 0))
    if answered >= MAX_ASKS:
        return wf.Escalate(f"the model did not establish {_missing(state, phase)}", state)
    step = _PHASE_STEP[phase]
    extra = f"Still needed: {_missing(state, phase)}." if answered else ""
    asked = ask(
        c.services, c.inp, state, step, tools=c.tools(step), facts=model_facts(state), extra=extra
    )
    if not isinstance(asked, Asked):
        return asked
    c.state = state = asked.state
    state["asks"] = {**(state.get("asks") or {}), phase: answered + 1}
    proposal = asked.proposal
    if proposal.get("kind") == "tool_calls":
        state["planned"] = {"calls": proposal["calls"]}
        return wf.Observe(state, note=f"{step}: {len(proposal['calls'])} read(s) proposed")
    if phase == "investigate" and proposal.get("kind") == "no_action":
        why = for_log(proposal.get("reason"), 80)
        return wf.Escalate(f"the order could not be identified ({why})", state)
    return wf.Observe(state, note=f"{step}: no reads proposed")


def run_planned(c: Ctx) -> wf.StepDecision:
    """Run the persisted reads in parallel; transient failures are retried without the model."""
    state = c.state
    calls = list(state["planned"]["calls"])
    results = run_reads(c.services, c.inp, calls, STEP_INVESTIGATE, c.request_id)
    again = []
    for r in results:
        if isinstance(r.outcome, Ok):
            st.record_tool(state, r.tool, r.args, result=r.outcome.result)
        elif isinstance(r.outcome, Rejected) and not r.outcome.transient:
            st.record_tool(state, r.tool, r.args, code=r.outcome.code, message=r.outcome.message)
        else:
            again.append({"tool": r.tool, "args": r.args})
    state["planned"] = {"calls": again} if again else None
    if again:
        return wf.Retry(f"{len(again)} read(s) failed transiently", state)
    if state["phase"] == "investigate":
        not_found = [e for e in st.tool_entries(state) if e.get("code") == "order_not_found"]
        if not_found and st.raw_order(state) is None:
            missing = for_log(not_found[-1]["args"].get("order_id"), 80)
            return wf.Escalate(f"order {missing} not found", state)
    _advance(state)
    return wf.Observe(state, note=f"{len(results)} read(s) recorded")


# -- decide: a refund, or none -----------------------------------------------------------------


def _reason(text: Any) -> str:
    """A model's reason is shown to nobody verbatim: keep it a code, or say it was not one."""
    value = str(text or "").strip().lower()
    return value if _REASON.match(value) else "unspecified"


def ask_decision(c: Ctx) -> wf.StepDecision:
    refunds = c.services.tools.resolve("refunds.create", c.inp.tenant_id)
    if not isinstance(refunds, ToolDescriptor):
        # An operator switched refunds off (or the tenant to read-only): a person decides; the
        # model must not be left to conclude "no refund" from a tool it cannot see.
        return wf.Escalate(f"refunds.create is unavailable ({refunds.code})", c.state)
    asked = ask(
        c.services,
        c.inp,
        c.state,
        "decide",
        tools=c.tools("decide"),
        facts=model_facts(c.state),
    )
    if not isinstance(asked, Asked):
        return asked
    c.state = state = asked.state
    proposal = asked.proposal
    if proposal.get("kind") == "no_action":
        if any(e.get("kind") == "gate" and e.get("decision") == "deny" for e in st.history(state)):
            # Policy refused what the model proposed, and the model then proposes nothing: the
            # customer may still be owed a refund. A person decides; never "no refund" by default.
            return wf.Escalate(
                "policy denied the proposed refund and no other was proposed; a person decides",
                state,
            )
        state["decision"] = {"kind": "no_refund", "reason": _reason(proposal.get("reason"))}
        # No refund, nothing to confirm: on to the phase after the confirming read.
        state["phase"] = REFUND.after(CONFIRM)
        return wf.Observe(state, note="no refund proposed")
    calls = proposal.get("calls") or [] if proposal.get("kind") == "tool_calls" else []
    creates = [x for x in calls if x.get("tool") == "refunds.create"]
    if len(calls) == 1 and creates:
        return act(c, dict(creates[0].get("args") or {}))
    if calls and not creates:
        state["planned"] = {"calls": calls}
        return wf.Observe(state, note="decide: more reads proposed")
    st.append(
        state, {"kind": "note", "text": "propose one refunds.create alone, reads, or no_action"}
    )
    return wf.Observe(state, note="unusable proposal; asking again")


def act(c: Ctx, args: dict[str, Any]) -> wf.StepDecision:
    """Turn the proposed refund into an exact `Action` for the gate: pinned tool version, key
    derived from the request and the payment (the action's identity, never the attempt)."""
    state = c.state
    d = c.services.tools.get(REFUND_EFFECT.tool)
    version = (c.inp.pinned.get("tools") or {}).get(REFUND_EFFECT.tool)
    if d is None or d.version != version or d.idempotency_key_template is None:
        return wf.Fail(
            f"{REFUND_EFFECT.tool} is not available at the pinned version {version}", state
        )
    try:
        key = derive_idempotency_key(
            d.idempotency_key_template, {**args, "request_id": c.request_id}
        )
    except InvalidInput as exc:
        st.append(state, {"kind": "note", "text": f"that refund cannot be keyed: {exc}"})
        return wf.Observe(state, note="unusable refund proposal")
    action = Action(tool=d.name, tool_version=d.version, args=args, idempotency_key=key)
    state["proposal"] = {
        "action": action.model_dump(mode="json"),
        "action_hash": action.action_hash,
    }
    state["awaiting"] = "authorization"
    return wf.Act(action, state)


def after_gate(c: Ctx) -> wf.StepDecision:
    """Back in RUNNING after proposing: `inp.resumed` says why."""
    state = c.state
    resumed = c.inp.resumed
    kind = resumed.kind if resumed is not None else None
    reason = resumed.reason if resumed is not None else ""
    proposal = state.get("proposal") or {}
    action = proposal.get("action") or {}
    state["awaiting"] = None
    if kind == "approval_invalid" and reason in ("expired", "policy_changed"):
        kind = "approval_expired"
    if kind == "approval_invalid" and reason == "policy_denies_now":
        kind, reason = "policy_denied", "policy_denies_now"
    if kind == "policy_denied":
        st.append(
            state,
            {
                "kind": "gate",
                "tool": action.get("tool"),
                "args": action.get("args"),
                "decision": "deny",
                "reason": reason,
            },
        )
        state["proposal"] = None
        return ask_decision(c)
    if kind == "approval_expired":
        state["reapprovals"] = int(state.get("reapprovals") or 0) + 1
        if state["reapprovals"] > MAX_REAPPROVALS:
            return wf.Escalate("approval expired too many times", state)
        # The same exact action goes back through the gate (policy re-evaluated, fresh grant).
        state["awaiting"] = "authorization"
        return wf.Act(Action.model_validate(action), state)
    if kind == "approval_denied":
        return wf.Escalate("an approver denied the refund; nothing was executed", state)
    if kind == "approval_invalid":
        return wf.Escalate(
            f"the approval could not be used ({reason}); nothing was executed", state
        )
    if kind == "effect_rejected":
        code_raw = resumed.code if resumed is not None else ""
        st.record_tool(state, "refunds.create", action.get("args") or {}, code=code_raw)
        code = for_log(code_raw, 80)
        return wf.Escalate(f"the payments system refused the refund ({code})", state)
    return wf.Escalate(f"unexpected return from the gate ({kind})", state)


# -- confirm and draft --------------------------------------------------------------------------


def confirm(c: Ctx) -> wf.StepDecision:
    """The deterministic verification read: the refund as the ledger has it now."""
    state = c.state
    key = str(state.get("refund_key"))
    args = {REFUND_EFFECT.lookup_arg: key}
    outcome = run_one(
        c.services,
        c.inp,
        ToolCall(tool=REFUND_EFFECT.lookup, args=args),
        STEP_RECONCILE,
        c.request_id,
    )
    if isinstance(outcome, Rejected):
        if outcome.transient:
            return wf.Retry(f"verification read failed: {outcome.code}", state)
        return wf.Escalate(f"verification read refused: {outcome.code}", state)
    result = outcome.result if isinstance(outcome, Ok) and isinstance(outcome.result, dict) else {}
    rows = [
        r
        for r in result.get("refunds", [])
        if r.get("refund_id") == (state.get("refund") or {}).get("refund_id")
    ]
    if not rows:
        return _lagging(c)
    state.pop("confirm_lag", None)
    st.record_tool(state, REFUND_EFFECT.lookup, args, result=result)
    state["refund"] = rows[0]
    state["phase"] = REFUND.after(CONFIRM)
    return wf.Observe(state, note="refund confirmed in the ledger")


def _lagging(c: Ctx) -> wf.StepDecision:
    """The ledger does not show the refund yet. A read replica or a queue behind the write can
    lag it by a second or two, so read again after a pause (parked in RETRY_WAIT, holding no
    worker), bounded by a count and by `confirm_lag_s` since the first miss; then a person looks.
    Never so often that the retry budget would dead-letter a task whose refund was made."""
    state = c.state
    now = c.services.clock()
    lag = dict(state.get("confirm_lag") or {})
    misses = int(lag.get("misses", 0)) + 1
    since = float(lag.get("since", now))
    waited = max(0.0, now - since)
    pause = CONFIRM_BACKOFF_S[min(misses, len(CONFIRM_BACKOFF_S)) - 1]
    budget_left = settings().max_attempts - (c.inp.attempts + 1)
    if misses > MAX_CONFIRM_REREADS or waited + pause > c.services.confirm_lag_s or budget_left < 1:
        return wf.Escalate(
            f"the ledger does not show the refund this task made ({misses} read(s) over "
            f"{waited:.1f} s)",
            state,
        )
    state["confirm_lag"] = {"misses": misses, "since": since}
    return wf.Retry(f"the ledger does not show the refund yet (read {misses})", state, pause)


def ask_draft(c: Ctx) -> wf.StepDecision:
    asked = ask(c.services, c.inp, c.state, "draft_reply", tools=[], facts=model_facts(c.state))
    if not isinstance(asked, Asked):
        return asked
    state = asked.state
    if asked.proposal.get("kind") != "final_draft":
        st.append(state, {"kind": "note", "text": "answer with a final_draft"})
        return wf.Observe(state, note="no draft; asking again")
    state["draft"] = asked.proposal["draft"]
    state["phase"] = REFUND.after(DRAFT)
    return wf.ToVerify(state)


# What runs in each task phase that is not an evidence phase; every declared phase has a step.
_RUN: dict[str, Callable[[Ctx], wf.StepDecision]] = {
    DECIDE: ask_decision,
    CONFIRM: confirm,
    DRAFT: ask_draft,
    # The verifier raised last time: let it try again.
    VERIFY: lambda c: wf.ToVerify(c.state),
}
if set(REFUND.order) != set(_PHASE_STEP) | set(_RUN):
    raise ConfigError("refund phases: a declared phase without a step, or a step in none")
