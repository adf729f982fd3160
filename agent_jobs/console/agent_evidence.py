"""The evidence of any declared agent (`agent_jobs.agents.Agent`), for the console: the facts its
decisions rest on — every tool result the task recorded (its policy's rules and its claims read
nothing else), each with where it came from — and its plan of effects: those applied, the one
proposed now (waiting for a person, or in flight), and the last refusal since the last applied.

Pure functions of a task's checkpoint (`TaskRow.state`): an agent's state holds `facts`
(`reads`, `effects`), `refusals` and the orchestrator's `runtime` (its `pending_action`). A
state without `facts` is not an agent's: None. Every value is a bounded string (rendered as DOM
text by the page, never markup); nested values are shown as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agent_jobs.core.text import clean_text, cut

_MAX_TEXT = 500
_MAX_FIELDS = 30


def _text(value: Any) -> str:
    raw = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    # NUL and lone surrogates replaced: the page gets text any JSON encoder and DOM accept.
    return cut(clean_text(raw), _MAX_TEXT)


def _fields(value: Any) -> dict[str, str | None]:
    """A result (or arguments) as `{name: text}`, at most `_MAX_FIELDS` of them."""
    if not isinstance(value, Mapping):
        return {"value": _text(value)} if value is not None else {}
    out: dict[str, str | None] = {}
    for k, v in list(value.items())[:_MAX_FIELDS]:
        out[_text(k)] = None if v is None else _text(v)
    return out


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def agent_facts(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every recorded tool result, oldest first: `{kind, tool, args, fields, source}`, where
    `source` is `{tool, observation}`: which call (`read 2`, `effect 1`) answered it and, for an
    effect, how (`answered`, or `found by its key` after an unknown outcome)."""
    facts = _map(state.get("facts"))
    out = []
    for kind in ("reads", "effects"):
        for n, fact in enumerate(_list(facts.get(kind)), 1):
            tool = _text(fact.get("tool") or "?")
            how = ""
            if kind == "effects":
                how = (
                    ", found by its key"
                    if fact.get("found_by") == "idempotency_key"
                    else ", answered"
                )
            out.append({
                "kind": kind[:-1],
                "tool": tool,
                "args": _fields(fact.get("args")),
                "fields": _fields(fact.get("result")),
                "source": {"tool": tool, "observation": f"{kind[:-1]} {n}{how}"},
            })  # fmt: skip
    return out


def effect_plan(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The task's effects in order: `{tool, args, idempotency_key, status, detail}` with status
    `applied`, then `proposed` (the pending action: waiting for a person, or being sent) and
    `planned` (proposed with it, still to come), or `refused` (the last refusal since the last
    applied effect)."""
    facts = _map(state.get("facts"))
    plan = [
        {"tool": _text(e.get("tool") or "?"), "args": _fields(e.get("args")),
         "idempotency_key": _text(e.get("idempotency_key") or ""), "status": "applied",
         "detail": "found by its key" if e.get("found_by") == "idempotency_key" else ""}
        for e in _list(facts.get("effects"))
    ]  # fmt: skip
    runtime = _map(state.get("runtime"))
    pending = runtime.get("pending_action")
    if isinstance(pending, Mapping):
        waiting = "waiting for a person's approval" if runtime.get("approval_id") else "being sent"
        key, tool = _text(pending.get("idempotency_key") or ""), _text(pending.get("tool") or "?")
        plan.append({"tool": tool, "args": _fields(pending.get("args")), "idempotency_key": key,
                     "status": "proposed", "detail": waiting})  # fmt: skip
        return plan + _planned(state)
    if state.get("planned"):
        return plan + _planned(state)
    refusals = _list(state.get("refusals"))
    if refusals:
        last = refusals[-1]
        why = " ".join(
            _text(x) for x in (last.get("kind"), last.get("code"), last.get("reason")) if x
        )
        plan.append({"tool": _text(last.get("tool") or "?"), "args": {}, "idempotency_key": "",
                     "status": "refused", "detail": why})  # fmt: skip
    return plan


def _planned(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The effects the model proposed together with the current one, still to come."""
    return [{"tool": _text(c.get("tool") or "?"), "args": _fields(c.get("args")),
             "idempotency_key": "", "status": "planned",
             "detail": "proposed with the plan; asked of the policy when its turn comes"}
            for c in _list(state.get("planned"))]  # fmt: skip


def agent_evidence(state: Mapping[str, Any]) -> dict[str, Any] | None:
    """An agent task's facts and plan of effects (`max_effects`: its bound, when recorded);
    None for a task that is not an agent's."""
    if not isinstance(state.get("facts"), Mapping):
        return None
    bound = state.get("max_effects")
    return {
        "facts": agent_facts(state),
        "plan": effect_plan(state),
        "max_effects": bound if isinstance(bound, int) and not isinstance(bound, bool) else None,
    }
