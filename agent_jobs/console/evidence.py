"""The evidence an approver reads next to an action: the ledger facts the policy decided on, each
with the observation it came from, and the order's context (kept apart: policy never reads it).

Pure functions of a task's checkpoint (`TaskRow.state`). Facts are parsed with the policy's own
models (`policy.facts`), so a field the policy ignores is not shown as if it mattered, and a later
read of the same payment or refund replaces the earlier one, exactly as `LedgerFacts` does. A
workflow whose checkpoint has no tool observations simply has no evidence to show. A declared
agent's facts and plan of effects are `agent_evidence`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from agent_jobs.console.agent_evidence import agent_evidence
from agent_jobs.policy.facts import LedgerFacts
from agent_jobs.verify.render import format_money

# Where a fact can come from: the systems of record. Policy text and model output never are.
LEDGER_TOOLS = frozenset(
    {"orders.get", "payments.list", "refunds.list", "refunds.get_by_key", "refunds.create"}
)
POLICY_TOOLS = frozenset({"policy.search", "policy.get", "policies.search", "policies.get"})
_MAX_TEXT = 500


def _observations(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    history = state.get("history")
    if not isinstance(history, list):
        return []
    return [
        e
        for e in history
        if isinstance(e, dict)
        and e.get("kind") == "tool"
        and e.get("ok")
        and isinstance(e.get("result"), dict)
    ]


def _text(value: Any) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 1] + "…"


def _money(amount_minor: Any, currency: Any) -> str | None:
    if isinstance(amount_minor, int) and not isinstance(amount_minor, bool) and currency:
        return format_money(amount_minor, str(currency))
    return None


def amount_of(args: Mapping[str, Any]) -> str | None:
    """`₹2,000` for an action's `amount_minor` (or, failing it, its first other `..._minor`
    argument: an agent's `price_minor`) and `currency`; None when it names no amount."""
    named = (
        "amount_minor"
        if "amount_minor" in args
        else next((k for k in args if isinstance(k, str) and k.endswith("_minor")), "amount_minor")
    )
    return _money(args.get(named), args.get("currency"))


def ledger_evidence(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The facts policy reads, newest read of each winning: `{kind, id, fields, source}` where
    `source` is `{tool, observation}` (the checkpoint's observation id)."""
    facts: dict[tuple[str, str], dict[str, Any]] = {}
    for obs in _observations(state):
        tool = str(obs.get("tool") or "")
        if tool not in LEDGER_TOOLS:
            continue
        try:
            ledger = LedgerFacts.from_observations([(tool, obs["result"])])
        except (ValidationError, TypeError, AttributeError, ValueError):
            continue  # a malformed read is not evidence
        source = {"tool": tool, "observation": _text(obs.get("id"))}
        if ledger.order is not None:
            o = ledger.order
            facts[("order", o.order_id)] = {
                "kind": "order",
                "id": o.order_id,
                "fields": {
                    "total": _money(o.total_minor, o.currency),
                    "payments": ", ".join(o.payment_ids),
                },
                "source": source,
            }
        for p in ledger.payments:
            facts[("payment", p.payment_id)] = {
                "kind": "payment",
                "id": p.payment_id,
                "fields": {
                    "kind": p.kind,
                    "status": p.status,
                    "amount": _money(p.amount_minor, p.currency),
                    "refunded": _money(p.refunded_minor, p.currency),
                    "created_at": p.created_at.isoformat() if p.created_at else None,
                },
                "source": source,
            }
        for r in ledger.refunds:
            facts[("refund", r.refund_id)] = {
                "kind": "refund",
                "id": r.refund_id,
                "fields": {
                    "payment": r.payment_id,
                    "status": r.status,
                    "amount": _money(r.amount_minor, r.currency),
                },
                "source": source,
            }
    return list(facts.values())


def order_context(state: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the order says that policy deliberately ignores: the customer's name and the order's
    free-text note. Written by customers; shown as text, never followed."""
    order: Mapping[str, Any] | None = None
    source = ""
    for obs in _observations(state):
        if obs.get("tool") == "orders.get":
            order, source = obs["result"], _text(obs.get("id"))
    if order is None:
        return None
    customer = order.get("customer")
    name = customer.get("name") if isinstance(customer, dict) else None
    return {
        "order_id": _text(order.get("order_id")),
        "customer_name": _text(name),
        "note": _text(order.get("note")),
        "source": {"tool": "orders.get", "observation": source},
    }


def policy_passages(state: Mapping[str, Any]) -> list[str]:
    """The policy passages retrieved for the task, as `DOC@version#chunk` references."""
    refs: list[str] = []
    for obs in _observations(state):
        if obs.get("tool") not in POLICY_TOOLS:
            continue
        result = obs["result"]
        passages = result.get("passages") if "passages" in result else [result]
        for p in passages if isinstance(passages, list) else []:
            if isinstance(p, dict) and p.get("doc_id"):
                ref = f"{p['doc_id']}@{p.get('version', '?')}#{p.get('chunk_id', '?')}"
                if ref not in refs:
                    refs.append(_text(ref))
    return refs


def evidence(state: Mapping[str, Any]) -> dict[str, Any]:
    """Everything the approval card (and the task page) shows: the refund workflow's ledger
    facts, order and passages; for any declared agent, its facts and plan of effects."""
    return {
        "facts": ledger_evidence(state),
        "order": order_context(state),
        "policy_passages": policy_passages(state),
        "agent": agent_evidence(state),
    }
