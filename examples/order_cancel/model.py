"""A stand-in for the model, so the example runs without one: a function from what the task has
seen (the request's `facts`: input, reads, effects, notes) to the proposal a good model would
make. Point `AGENT_JOBS_MODEL_ROUTES` at a real route and this is not used."""

from __future__ import annotations

from typing import Any

from agent_jobs.gateway import ModelRequest


def scripted_model(request: ModelRequest) -> dict[str, Any]:
    facts = request.facts
    order_id = facts["input"]["order_id"]
    done = [e["result"] for e in facts["effects"] if e["tool"] == "orders.cancel"]
    if done:
        text = f"Order {order_id} is cancelled and {done[-1]['refunded_minor']} refunded."
        claim = {"type": "order_cancelled", "order_id": order_id,
                 "refunded_minor": done[-1]["refunded_minor"]}  # fmt: skip
        return _draft(text, claim)
    reads = [r["result"] for r in facts["reads"] if r["tool"] == "orders.get"]
    if not reads:
        return _calls("orders.get", order_id=order_id)
    order = reads[-1]
    if order.get("status") != "open" or facts["notes"]:
        return _draft(f"Order {order_id} was not cancelled.", {"type": "not_cancelled",
                                                               "order_id": order_id})  # fmt: skip
    return _calls("orders.cancel", order_id=order_id, amount_minor=order["amount_minor"],
                  currency=order["currency"])  # fmt: skip


def _calls(tool: str, **args: Any) -> dict[str, Any]:
    return {"kind": "tool_calls", "calls": [{"tool": tool, "args": args}], "rationale": ""}


def _draft(text: str, *claims: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "final_draft", "draft": {"text": text, "claims": list(claims)}}
