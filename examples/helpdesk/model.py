"""A stand-in for the model, so the example runs without one: from what the task has seen (the
request's `facts`: input, reads, effects, notes) to the proposal a good model would make. Point
`AGENT_JOBS_MODEL_ROUTES` at a real route and this is not used."""

from __future__ import annotations

from typing import Any

from agent_jobs.gateway import ModelRequest

DISABLE, ORDER = "mdm.disableDevice", "procurement.order_replacement"


def scripted_model(request: ModelRequest) -> dict[str, Any]:
    facts = request.facts
    device_id, employee = facts["input"]["device_id"], facts["input"]["employee"]
    done = {e["tool"]: e["result"] for e in facts["effects"]}
    # Every note but "... applied (1 of at most 2 effects ...)" says a proposal was refused.
    refused = [n for n in facts["notes"] if " applied (" not in str(n)]
    device = _read(facts, "mdm.getDevice")
    if device is None and not refused:
        return _calls("mdm.getDevice", device_id=device_id)
    quote = _read(facts, "procurement.quote")
    if device is not None and quote is None and not refused:
        return _calls("procurement.quote", model=device["model"])
    ours = device is not None and device.get("assigned_to") == employee
    if ORDER in done or refused or not ours or not (quote or {}).get("available"):
        return _draft(device_id, done)
    if DISABLE not in done:
        if device is not None and device["status"] != "active":
            return _draft(device_id, done)
        return _calls(DISABLE, device_id=device_id, reason=facts["input"]["reason"])
    assert device is not None and quote is not None
    return _calls(ORDER, device_id=device_id, model=device["model"],
                  price_minor=quote["price_minor"], currency=quote["currency"])  # fmt: skip


def _read(facts: dict[str, Any], tool: str) -> dict[str, Any] | None:
    found = [r["result"] for r in facts["reads"] if r["tool"] == tool]
    return found[-1] if found else None


def _draft(device_id: str, done: dict[str, Any]) -> dict[str, Any]:
    claims: list[dict[str, Any]] = [
        {"type": "device_disabled" if DISABLE in done else "not_disabled", "device_id": device_id}
    ]
    order = done.get(ORDER)
    if order is not None:
        fields = {"order_id": order["order_id"], "price_minor": order["price_minor"]}
        claims.append({"type": "replacement_ordered", "device_id": device_id, **fields})
        text = f"{device_id} is disabled and its replacement ordered ({order['order_id']})."
    else:
        claims.append({"type": "not_ordered", "device_id": device_id})
        text = f"{device_id}: " + ("disabled; no replacement ordered." if DISABLE in done
                                   else "not disabled and nothing ordered.")  # fmt: skip
    return {"kind": "final_draft", "draft": {"text": text, "claims": claims}}


def _calls(tool: str, **args: Any) -> dict[str, Any]:
    return {"kind": "tool_calls", "calls": [{"tool": tool, "args": args}], "rationale": ""}
