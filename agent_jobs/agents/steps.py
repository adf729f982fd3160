"""The generic tool-calling step: an `Agent`'s workflow hooks.

`decide` (RUNNING): one bounded model call offering the step's own tools. Reads it proposes run
through the tool executor at once (their results become facts and `tool` messages); an effect,
proposed alone, becomes the orchestrator's `Act` (policy, approval, intent, execute); several
effects proposed together are a plan: the first is acted on, each next one once the one before
is applied (each its own `Act`, no model call between them), the rest dropped at a refusal; a
final draft goes to the verifier. After an effect the task is back in RUNNING and decides again from
its facts: while fewer than the agent's `max_effects` are applied, `work` offers effects again
(the next one is an `Act` like the first, with its own key, decision and approval), then `reply`
offers reads only. `max_model_calls` bounds the model calls between two effects. What the
orchestrator tells the task on resuming (a denial, a rejection, the verifier's refusal) is told
to the model once, as a note.

`execute` sends the effect through the executor with the stamp of the decision it rests on
(`StepInput.decision`); `reconcile` asks the effect's lookup by key; `verify` checks the draft's
claims against the facts. Tool calls leave `execute_tool <name>` events; model calls, `chat`.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from agent_jobs.agents.audit import BufferedAudit
from agent_jobs.agents.claims import check_claims
from agent_jobs.agents.declare import EXECUTE, RECONCILE, REPLY, WORK, found_of, stored
from agent_jobs.agents.facts import Facts, record
from agent_jobs.agents.model import Asked, ask, usage
from agent_jobs.agents.policy import Call
from agent_jobs.core.contracts import Action
from agent_jobs.core.errors import InvalidInput
from agent_jobs.core.hashing import derive_idempotency_key
from agent_jobs.core.text import cut
from agent_jobs.ops import autonomy_threshold_minor
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.tools import (
    ExecContext,
    Ok,
    Outcome,
    PolicyStamp,
    Rejected,
    Throttled,
    ToolCall,
    ToolExecutor,
)

if TYPE_CHECKING:
    from agent_jobs.agents.agent import Agent

MAX_TRANSCRIPT = 60
NOTE_CHARS = 500
MAX_REFUSALS = 10
# A read's result the task keeps (as a fact and in the model's transcript): a business answer
# is kilobytes; more would be written into the task's state at every step.
MAX_RESULT_CHARS = 16_000


def request_id(task_key: str) -> str:
    """The task's own idempotency key as a key field (`{request_id}` in a key template)."""
    return re.sub(r"[^A-Za-z0-9_.:@/-]", "_", task_key)[:120] or "_"


def initial_state(data: dict[str, Any], task_key: str) -> dict[str, Any]:
    return {
        "input": data,
        "request_id": request_id(task_key),
        "step": WORK,
        "model_calls": {},
        "transcript": [],
        "facts": {},
        "draft": None,
        "redrafts": 0,
        "resumed_seen": None,
    }


def _say(state: dict[str, Any], entry: dict[str, Any]) -> None:
    state["transcript"] = [*(state.get("transcript") or []), entry][-MAX_TRANSCRIPT:]


def _note(state: dict[str, Any], text: str) -> None:
    _say(state, {"role": "note", "note": cut(text, NOTE_CHARS)})


_TOLD = {
    "policy_denied": "Policy denied {tool}: {reason}",
    "approval_denied": "A person denied {proposed}.",
    "approval_expired": "Nobody approved {tool} in time.",
    "approval_invalid": "The approval of {tool} is no longer valid: {reason}",
    "approval_expired_before_retry": "The approval of {tool} expired before it could be retried.",
    "effect_rejected": "The system refused {tool}: {code} {reason}",
    "redraft": "The verifier refused the draft: {reason}. Draft again, claiming only facts.",
}


def _absorb(inp: wf.StepInput, state: dict[str, Any]) -> None:
    """Tell the model, once, why the task is back (the last note repeats until a new one)."""
    r = inp.resumed
    if r is None or r.kind not in _TOLD:
        return
    seen = json.dumps([r.kind, r.reason, r.code, dict(r.detail)], sort_keys=True, default=str)
    if state.get("resumed_seen") == seen:
        return
    state["resumed_seen"] = seen
    # An approval's note names no tool: the effect is the one this task last proposed.
    named = r.detail.get("tool") or state.get("proposed")
    tool = str(named or "the effect")
    proposed = f"the proposed {named}" if named else "the proposed effect"
    _note(state, _TOLD[r.kind].format(tool=tool, proposed=proposed, reason=r.reason, code=r.code))
    key, hashed = r.detail.get("idempotency_key"), r.detail.get("action_hash")
    if r.kind == "effect_rejected" and isinstance(key, str) and isinstance(hashed, str):
        # Its key now names that action in the store (a failed effect row): the same key
        # cannot carry other arguments in this task (`_act` tells the model so).
        state["spent_keys"] = {**(state.get("spent_keys") or {}), key: hashed}
    if r.kind == "redraft":
        state["draft"] = None
    else:
        rest = [str(c.get("tool")) for c in state.get("planned") or []]
        if rest:
            # A refusal ends the plan: the model decides what now, from the facts of now.
            state["planned"] = []
            _note(state, f"The rest of the plan was not sent: {', '.join(rest)[:300]}.")
        # Kept for the outcome: why an effect it proposed was not applied.
        refusal = {"kind": r.kind, "tool": named, "reason": cut(r.reason, NOTE_CHARS),
                   "code": r.code or None}  # fmt: skip
        state["refusals"] = [*(state.get("refusals") or []), refusal][-MAX_REFUSALS:]


def _executor(agent: Agent) -> tuple[ToolExecutor, BufferedAudit]:
    from agent_jobs.obs.metrics import MetricsAuditSink  # noqa: PLC0415 - prometheus mode first

    audit = BufferedAudit()

    def is_write(tool: str) -> bool:
        d = agent.tools.get(tool)
        return True if d is None else d.is_write

    sink = MetricsAuditSink(audit, is_write, agent.services.observer)
    return ToolExecutor(agent.tools, agent.services.credentials, sink), audit


def run_call(agent: Agent, inp: wf.StepInput, call: ToolCall, scope: str) -> Outcome:
    """One call through the executor, audited into the task's events."""
    executor, audit = _executor(agent)
    ctx = ExecContext(
        tenant_id=inp.tenant_id,
        task_id=inp.task_id,
        trace_id=inp.trace_id,
        step_scope=scope,
        request_id=str(inp.state.get("request_id") or request_id(inp.idempotency_key)),
    )
    outcome = executor.execute(call, ctx)
    audit.flush(inp, scope)
    if isinstance(outcome, Ok):
        # One shape for what a tool answered, whatever its source (`declare.stored`).
        result = stored(agent.tools.get(call.tool), outcome.result)
        return outcome.model_copy(update={"result": result})
    return outcome


# -- decide ------------------------------------------------------------------------------------


def decide(agent: Agent, inp: wf.StepInput) -> wf.StepDecision:
    state = dict(inp.state)
    _absorb(inp, state)
    if inp.pinned.get("prompt") != agent.prompt_version:
        return wf.Fail(f"task pinned to prompt {inp.pinned.get('prompt')!r}; this worker "
                       f"ships {agent.prompt_version}", state)  # fmt: skip
    planned = list(state.get("planned") or [])
    if planned:
        return _next_planned(agent, inp, state, planned)
    step = str(state.get("step") or WORK)
    calls = dict(state.get("model_calls") or {})
    phase = _phase(state, step)
    if calls.get(phase, 0) >= agent.max_model_calls:
        return wf.Escalate(f"the model made no progress in {agent.max_model_calls} calls ({phase})")
    calls[phase] = calls.get(phase, 0) + 1
    state["model_calls"] = calls
    tools = agent.offered(step, inp.tenant_id)
    asked = ask(
        agent.services.gateway,
        inp,
        state,
        route=str(inp.pinned.get("model_route") or agent.model_route),
        prompt=agent.prompt,
        step=step,
        tools=tools,
        schema=agent.output_schema,
        observer=agent.services.observer,
    )
    if not isinstance(asked, Asked):
        return asked
    state, proposal = asked.state, asked.proposal
    _say(state, {"role": "assistant", "proposal": proposal})
    if proposal.get("kind") == "final_draft":
        state["draft"] = proposal["draft"]
        return wf.ToVerify(state)
    return _tool_calls(
        agent, inp, state, list(proposal.get("calls") or []), {d.name for d in tools}
    )


def _next_planned(
    agent: Agent, inp: wf.StepInput, state: dict[str, Any], planned: list[dict[str, Any]]
) -> wf.StepDecision:
    """The next effect of the plan the model proposed, now that the one before it is applied:
    an `Act` like any other (its own key, policy decision over the facts of now, approval), with
    no model call. Refused before it is sent, the rest of the plan is dropped."""
    state["planned"] = planned[1:]
    decision = _act(agent, inp, state, planned[0], planned[1:])
    if not isinstance(decision, wf.Act):
        state["planned"] = []
    return decision


def _phase(state: dict[str, Any], step: str) -> str:
    """What the model-call bound counts in: `work` until the first effect, `work.2` after it
    (the calls toward a second effect are a budget of their own), ...; `reply` once."""
    done = len(Facts.of(state).effects)
    return step if step != WORK or done == 0 else f"{step}.{done + 1}"


def _tool_calls(
    agent: Agent, inp: wf.StepInput, state: dict[str, Any], calls: list[Any], offered: set[str]
) -> wf.StepDecision:
    refused = [str(c["tool"]) for c in calls if c["tool"] not in offered]
    if refused:
        _note(state, f"Not available in this step: {', '.join(refused)[:200]}. Offered: "
                     f"{', '.join(sorted(offered))[:300]}.")  # fmt: skip
        return wf.Observe(state, note="tool not offered")
    effects = [c for c in calls if c["tool"] in agent.effects]
    if effects:
        if len(effects) != len(calls):
            _note(state, "Propose effects in a call of their own, after their reads: one "
                         "effect, or a plan of effects in the order they are to run.")  # fmt: skip
            return wf.Observe(state, note="effect not alone")
        room = agent.max_effects - len(Facts.of(state).effects)
        if len(effects) > max(room, 1):
            _note(state, f"A plan of {len(effects)} effects is more than this task may still "
                         f"apply ({room}); propose fewer.")  # fmt: skip
            return wf.Observe(state, note="plan too long")
        # A plan: the first now, each next once the one before is applied (`_next_planned`).
        state["planned"] = [{"tool": c["tool"], "args": dict(c.get("args") or {})}
                            for c in effects[1:]]  # fmt: skip
        decision = _act(agent, inp, state, effects[0], state["planned"])
        if not isinstance(decision, wf.Act):
            state["planned"] = []  # the model plans again, told why
        return decision
    step = str(state.get("step") or WORK)
    for c in calls:
        args = dict(c.get("args") or {})
        outcome = run_call(agent, inp, ToolCall(tool=str(c["tool"]), args=args), step)
        if isinstance(outcome, Ok) and _too_large(outcome.result):
            _say(state, {"role": "tool", "tool": c["tool"], "result": {"error": "result_too_large",
                         "message": f"more than {MAX_RESULT_CHARS} characters"}})  # fmt: skip
        elif isinstance(outcome, Ok):
            record(state, "reads", {"tool": c["tool"], "args": args, "result": outcome.result})
            _say(state, {"role": "tool", "tool": c["tool"], "result": outcome.result})
        elif isinstance(outcome, Throttled):
            return wf.Retry(f"{c['tool']} throttled", state, outcome.retry_after_s)
        elif isinstance(outcome, Rejected) and outcome.transient:
            return wf.Retry(f"{c['tool']}: {outcome.code}", state)
        else:
            code = getattr(outcome, "code", outcome.kind)
            _say(state, {"role": "tool", "tool": c["tool"], "result": {"error": code,
                         "message": cut(getattr(outcome, "message", ""), NOTE_CHARS)}})  # fmt: skip
    return wf.Observe(state, note="read " + ", ".join(sorted({str(c["tool"]) for c in calls})))


def _too_large(result: Any) -> bool:
    return len(json.dumps(result, ensure_ascii=False, default=str)) > MAX_RESULT_CHARS


def _act(
    agent: Agent,
    inp: wf.StepInput,
    state: dict[str, Any],
    call: dict[str, Any],
    rest: list[dict[str, Any]],
) -> wf.StepDecision:
    """`call` as the orchestrator's `Act`; with `approve_plan`, the plan's `rest` too, as the
    actions one approval asks for with it (each checked now as it will be at its turn: a plan
    with an effect that could not be sent is not shown to a person, the model is told)."""
    first = _action(agent, inp, state, call)
    if not isinstance(first, Action):
        return first
    plan: list[Action] = []
    for later in rest if agent.approve_plan else []:
        action = _action(agent, inp, state, later)
        if not isinstance(action, Action):
            return action
        plan.append(action)
    state["proposed"] = first.tool
    return wf.Act(first, state, plan=tuple(plan))


def _action(
    agent: Agent, inp: wf.StepInput, state: dict[str, Any], call: dict[str, Any]
) -> Action | wf.Observe:
    d = agent.tools.get(str(call["tool"]))
    assert d is not None and d.idempotency_key_template is not None  # effects are keyed
    args = dict(call.get("args") or {})
    errors = d.validate_args(args)
    if errors:
        _note(state, f"{d.name} arguments refused: {'; '.join(errors)}")
        return wf.Observe(state, note="effect arguments refused")
    trusted = {
        "tenant_id": inp.tenant_id,
        "task_id": inp.task_id,
        "request_id": str(state.get("request_id")),
    }
    try:
        key = derive_idempotency_key(d.idempotency_key_template, {**args, **trusted})
    except InvalidInput as exc:
        _note(state, f"{d.name} arguments cannot make its key: {exc}")
        return wf.Observe(state, note="effect key refused")
    done = Facts.of(state).effects
    if any(e.get("idempotency_key") == key for e in done):
        # Its key is this task's record that it happened: it is never sent twice (the store
        # would refuse the intent), so the model is told, not the task failed.
        _note(state, f"{d.name} was already applied in this task under the same key; it is not "
                     "sent again. Propose another effect, or draft the reply.")  # fmt: skip
        return wf.Observe(state, note="effect already applied")
    if len(done) >= agent.max_effects:
        _note(state, f"This task has applied its {agent.max_effects} effect(s); draft the reply.")
        return wf.Observe(state, note="effects bound reached")
    action = Action(tool=d.name, tool_version=d.version, args=args, idempotency_key=key)
    spent = (state.get("spent_keys") or {}).get(key)
    if spent is not None and spent != action.action_hash:
        # The store would refuse the intent (one key, one action) and the step would fail
        # until the task is dead-lettered: the model is told instead.
        _note(state, f"{d.name} was refused under its key with other arguments; this task "
                     "cannot send it again with different ones. Draft the reply.")  # fmt: skip
        return wf.Observe(state, note="effect key holds another action")
    return action


# -- authorize, execute, reconcile, after_effect ---------------------------------------------------


def authorize(agent: Agent, inp: wf.StepInput, action: Action) -> wf.Authorization:
    policy = agent.policy
    d = agent.tools.get(action.tool)
    pinned = (inp.pinned.get("tools") or {}).get(action.tool)
    if d is None or action.tool not in agent.effects:
        return wf.Authorization("deny", policy.version, "unknown_tool")
    if action.tool_version != d.version or (pinned is not None and pinned != d.version):
        return wf.Authorization("deny", policy.version, "tool_version_not_pinned")
    # The operator's incident lever (`autonomy_threshold`) is the policy's `autonomy`: what the
    # policy allows goes to a person above the cap, or at 0 for every effect.
    said = policy.evaluate(
        Call(action.tool, action.args, action.tool_version),
        Facts.of(inp.state),
        frozenset(agent.effects),
        autonomy_minor=autonomy_threshold_minor(inp.tenant_id),
    )
    return wf.Authorization(said.kind, policy.version, said.reason, policy.approval_ttl_s)


def execute(agent: Agent, inp: wf.StepInput, action: Action) -> wf.EffectOutcome:
    decision = inp.decision
    if decision is None:
        return wf.EffectRejected("no_recorded_decision", "no policy decision was recorded")
    call = ToolCall(
        tool=action.tool,
        args=action.args,
        idempotency_key=action.idempotency_key,
        policy_decision=PolicyStamp(
            decision=decision.kind,
            action_hash=decision.action_hash,
            policy_version=decision.policy_version,
            approval_id=decision.approval_id,
        ),
    )
    outcome = run_call(agent, inp, call, EXECUTE)
    if isinstance(outcome, Ok):
        return wf.EffectApplied({"result": outcome.result, "found_by": "call"})
    if isinstance(outcome, Rejected) and not outcome.transient:
        return wf.EffectRejected(outcome.code, outcome.message)
    if isinstance(outcome, Throttled):
        return wf.EffectThrottled(
            outcome.retry_after_s, outcome.code, by_operator=outcome.by_operator
        )
    # A transient refusal applied nothing, but "unknown" looks it up and retries with the same
    # key and grant, where a rejection would re-plan and ask a person again.
    reason = outcome.reason if outcome.kind == "unknown" else outcome.code
    return wf.EffectUnknown(cut(f"{reason}: {outcome.message}", 200))


def reconcile(agent: Agent, inp: wf.StepInput, action: Action) -> wf.ReconcileResult:
    effect = agent.effects.get(action.tool)
    if effect is None:
        return wf.LookupFailed("unknown_effect")
    call = ToolCall(tool=effect.lookup, args={effect.lookup_arg: action.idempotency_key})
    outcome = run_call(agent, inp, call, RECONCILE)
    if isinstance(outcome, Rejected) and outcome.code in ("http_404", "not_found"):
        return wf.NoEffect()
    if not isinstance(outcome, Ok):
        return wf.LookupFailed(getattr(outcome, "code", outcome.kind))
    found = found_of(outcome.result)
    if found is None:
        return wf.NoEffect()
    differs = sorted(k for k, v in action.args.items() if k in found and found[k] != v)
    if differs:
        return wf.Different(f"the effect under the key differs in {', '.join(differs)[:200]}")
    return wf.Found({"result": found, "found_by": "idempotency_key"})


def after_effect(
    agent: Agent, inp: wf.StepInput, action: Action, result: dict[str, Any]
) -> wf.AfterEffect:
    state = dict(inp.state)
    done = result.get("result")
    record(state, "effects", {"tool": action.tool, "args": dict(action.args),
                              "idempotency_key": action.idempotency_key, "result": done,
                              "found_by": result.get("found_by")})  # fmt: skip
    _say(state, {"role": "tool", "tool": action.tool, "result": done})
    # A refusal met before this effect is not why the task ends (`_declined`).
    state["refusals"] = []
    applied = len(Facts.of(state).effects)
    if applied >= agent.max_effects:
        # Then the reply, with reads only: no further effect can be proposed.
        state["step"] = REPLY
    else:
        state["step"] = WORK
        _note(state, f"{action.tool} applied ({applied} of at most {agent.max_effects} effects "
                     "in this task). Propose the next effect, or draft the reply.")  # fmt: skip
    return wf.AfterEffect(state, verify=False)


# -- verify ------------------------------------------------------------------------------------


def verify(agent: Agent, inp: wf.StepInput) -> wf.Verdict:
    state = dict(inp.state)
    draft = state.get("draft") or {}
    facts = Facts.of(state)
    claims, failures = check_claims(agent.claims, draft.get("claims") or [], facts)
    if failures:
        record_failure = {"role": "note", "note": "verifier: " + ", ".join(failures)}
        _say(state, record_failure)
        if int(state.get("redrafts") or 0) >= agent.max_redrafts:
            return wf.Escalate("the reply failed verification: " + ", ".join(failures), state)
        state["redrafts"] = int(state.get("redrafts") or 0) + 1
        state["draft"] = None
        return wf.Redraft(", ".join(failures), state)
    return wf.Complete(
        {
            "verified": True,
            "reply": str(draft.get("text") or ""),
            "claims": [{"type": c.claim_type(), **c.model_dump(mode="json")} for c in claims],
            "effects": [_done(e) for e in facts.effects],
            "model_calls": usage(state).calls,
            "model_cost_inr": str(usage(state).cost),
            "redrafts": int(state.get("redrafts") or 0),
            "declined": _declined(state),
        },
        state,
    )


def _declined(state: dict[str, Any]) -> dict[str, Any] | None:
    """Why the task ends without the effect it proposed last: the last refusal it met since
    its last applied effect (a policy's or a person's denial, an approval that expired or
    failed revalidation, the system's rejection). None when its last proposal was applied or
    none was refused (`after_effect` clears the refusals an applied effect makes moot)."""
    refusals = state.get("refusals") or []
    return dict(refusals[-1]) if refusals else None


def _done(effect: Any) -> dict[str, Any]:
    reconciled = effect.get("found_by") == "idempotency_key"
    return {"tool": effect["tool"], "result": effect["result"], "reconciled": reconciled}
