"""The refund task's checkpoint: what the workflow keeps in `task.state`, and how it is read.

The state is the ordered history the seed asks for: every model proposal, tool observation and
gate decision, in order, so a resumed task sees exactly what the first run saw without asking the
model again. Facts for policy and verification are always rebuilt from the tool observations in
it, never from anything a model wrote.

    {"request": {...}, "phase": "investigate", "planned": None, "history": [...],
     "asks": {...}, "proposal": None, "decision": None, "refund": None, "draft": None,
     "redrafts": 0, "reapprovals": 0, "model": {"usage": {...}, "calls": [...]}}
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Literal

from agent_jobs.core.text import clean_json, clean_text, cut
from agent_jobs.gateway import CallRecord, TaskUsage
from agent_jobs.policy import LedgerFacts
from agent_jobs.verify import Customer, VerifiedFacts, ledger_words

Phase = Literal["investigate", "policy", "decide", "confirm", "draft", "verify"]

# How much a tool's output may be believed. Ledger reads are the system of record; free text
# (policy passages, and the order's note inside `orders.get`) is data to quote, never instructions.
TRUST = {
    "orders.get": "system_of_record",
    "payments.list": "system_of_record",
    "refunds.list": "system_of_record",
    "refunds.get_by_key": "system_of_record",
    "refunds.create": "system_of_record",
    "policy.search": "untrusted_text",
    "policy.get": "untrusted_text",
}

_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9_.:@/-]")


def request_id(idempotency_key: str) -> str:
    """The request's identity inside idempotency keys (`refund:{request_id}:{payment_id}`).

    The client's Idempotency-Key names the request (the seed's `req-8472`); characters the key
    alphabet does not allow become `_`, so the derived key is stable for every retry.
    """
    return _KEY_UNSAFE.sub("_", idempotency_key)[:120]


def initial_state(message: str, channel: str, order_id: str | None, request: str) -> dict[str, Any]:
    return {
        "request": {
            "message": clean_text(message),
            "channel": channel,
            "order_id": order_id,
            "request_id": request,
        },
        "phase": "investigate",
        # Reads the model proposed, persisted before they run: a retry re-runs them, not the model.
        "planned": None,
        "history": [],
        "asks": {"investigate": 0, "policy": 0},
        "proposal": None,
        "awaiting": None,
        "decision": None,
        "refund": None,
        "draft": None,
        "redrafts": 0,
        "reapprovals": 0,
        "model": {"usage": TaskUsage().model_dump(mode="json"), "calls": []},
    }


def history(state: dict[str, Any]) -> list[dict[str, Any]]:
    return list(state.get("history") or [])


def append(state: dict[str, Any], entry: dict[str, Any]) -> None:
    """Add one history entry to `state` (a step's working copy)."""
    state["history"] = [*history(state), entry]


def tool_entries(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in history(state) if e.get("kind") == "tool"]


def record_tool(
    state: dict[str, Any],
    tool: str,
    args: dict[str, Any],
    *,
    result: Any = None,
    code: str | None = None,
    message: str = "",
) -> None:
    """Append a tool observation: its result when the call succeeded, else its error code."""
    seq = len(tool_entries(state)) + 1
    # Content is data: a business system may send NUL or lone surrogates, which no store or wire
    # can carry. They become U+FFFD once, here, so every later read (policy, the model, the
    # verifier, a resumed worker) sees the same value.
    append(
        state,
        {
            "kind": "tool",
            "id": f"obs_{seq}",
            "tool": tool,
            "args": clean_json(args),
            "ok": code is None,
            "result": clean_json(result) if code is None else None,
            "code": None if code is None else clean_text(code)[:64],
            "message": cut(clean_text(message), 200),
            "trust": TRUST.get(tool, "untrusted_text"),
        },
    )


def observations(state: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """`(tool, result)` of every successful read and effect, oldest first."""
    return [
        (e["tool"], e["result"])
        for e in tool_entries(state)
        if e.get("ok") and isinstance(e.get("result"), dict)
    ]


def latest(state: dict[str, Any], tool: str) -> dict[str, Any] | None:
    """The newest successful result of `tool`."""
    found = [r for t, r in observations(state) if t == tool]
    return found[-1] if found else None


def ledger_facts(state: dict[str, Any]) -> LedgerFacts:
    """What policy decides on: the ledger as the tools returned it."""
    return LedgerFacts.from_observations(observations(state))


def verified_facts(state: dict[str, Any]) -> VerifiedFacts:
    """What the verifier checks claims against."""
    return VerifiedFacts.from_observations(observations(state))


def raw_order(state: dict[str, Any]) -> dict[str, Any] | None:
    """The order as `orders.get` returned it (customer details included: trusted code only)."""
    return latest(state, "orders.get")


def customer(state: dict[str, Any]) -> Customer:
    """The customer of the order, with the task's ledger words (never masked as a name part)."""
    order = raw_order(state)
    if order is None:
        return Customer(ref="customer")
    ledger = [r for t, r in observations(state) if TRUST.get(t) == "system_of_record"]
    return replace(Customer.from_order(order), keep=ledger_words(ledger))


def usage(state: dict[str, Any]) -> TaskUsage:
    return TaskUsage.model_validate((state.get("model") or {}).get("usage") or {})


def record_usage(
    state: dict[str, Any], after: TaskUsage | None, calls: tuple[CallRecord, ...], step: str
) -> None:
    """Persist the gateway's accounting: the usage to pass back next time, and each billed call."""
    model = dict(state.get("model") or {})
    if after is not None:
        model["usage"] = after.model_dump(mode="json")
    model["calls"] = [
        *(model.get("calls") or []),
        *({**c.model_dump(mode="json"), "step_type": step} for c in calls),
    ]
    state["model"] = model
