"""A declared agent in a simulated world: the order-cancellation agent of `examples/order_cancel`
(the same tools, policy, claims and scripted model), its orders service a simulated system of
record, built afresh for each world. Through it the simulator drives the agent path: the model
gateway, the tool executor with its credentials and levers, the policy with the operator's
autonomy cap, reconcile through the effect's lookup, claims verified against facts."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agent_jobs.agents import (
    Agent,
    Call,
    Claim,
    Decision,
    Facts,
    Policy,
    ToolRejected,
    ToolThrottled,
    approval_above,
    deny,
)
from agent_jobs.gateway import ModelRequest
from agent_jobs.simulation.systems import SystemOfRecord, SystemRefused, SystemTimeout

# The orders a task may be about: under the approval threshold, above it, not open.
KINDS = (("open", 4_900), ("open", 25_000), ("shipped", 1_500))
APPROVAL_ABOVE_MINOR = 10_000


class SimOrders:
    """The orders service: cancels an open order for its total, once per key."""

    def __init__(self, system: SystemOfRecord) -> None:
        self.system = system
        self.orders: dict[str, list[Any]] = {}

    def add(self, order_id: str, status: str, amount_minor: int) -> None:
        self.orders[order_id] = [status, amount_minor, "EUR"]

    def get(self, order_id: str) -> dict[str, Any]:
        try:
            self.system.read(order_id)
        except SystemRefused as exc:
            raise ToolRejected("unavailable", "orders service is down", transient=True) from exc
        found = self.orders.get(order_id)
        if found is None:
            raise ToolRejected("order_not_found", f"no order {order_id}")
        status, amount, currency = found
        return {
            "order_id": order_id,
            "status": status,
            "amount_minor": amount,
            "currency": currency,
        }

    def cancel(self, order_id: str, amount_minor: int, currency: str, key: str) -> dict[str, Any]:
        def apply() -> dict[str, Any]:
            found = self.orders.get(order_id)
            if (
                found is None
                or found[0] != "open"
                or (found[1], found[2]) != (amount_minor, currency)
            ):
                raise SystemRefused("rejected")
            found[0] = "cancelled"
            number = len(self.system.applied) + 101
            return {"cancellation_id": f"cx_{number}", "order_id": order_id,
                    "refunded_minor": amount_minor, "currency": currency,
                    "status": "cancelled"}  # fmt: skip

        args = {"order_id": order_id, "amount_minor": amount_minor, "currency": currency}
        try:
            return self.system.send(key, args, apply)
        except SystemRefused as exc:
            if exc.code == "throttled":
                raise ToolThrottled("busy", retry_after_s=exc.retry_after_s) from exc
            if exc.code == "unavailable":
                raise ToolRejected("unavailable", "orders service is down", transient=True) from exc
            raise ToolRejected("not_cancellable", f"order {order_id} cannot be cancelled") from exc
        except SystemTimeout as exc:
            raise TimeoutError(str(exc)) from exc

    def find(self, key: str) -> dict[str, Any] | None:
        try:
            return self.system.lookup(key)
        except SystemRefused as exc:
            raise ConnectionError("orders service is down") from exc


class CancelRequest(BaseModel):
    order_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    reason: str = Field(min_length=1, max_length=500)


def _calls(tool: str, **args: Any) -> dict[str, Any]:
    return {"kind": "tool_calls", "calls": [{"tool": tool, "args": args}], "rationale": ""}


def _draft(text: str, *claims: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "final_draft", "draft": {"text": text, "claims": list(claims)}}


def scripted_model(request: ModelRequest) -> dict[str, Any]:
    """What a good model proposes, from what the task has seen (as the example's)."""
    facts = request.facts
    order_id = facts["input"]["order_id"]
    done = [e["result"] for e in facts["effects"] if e["tool"] == "orders.cancel"]
    if done:
        claim = {"type": "order_cancelled", "order_id": order_id,
                 "refunded_minor": done[-1]["refunded_minor"]}  # fmt: skip
        return _draft(f"Order {order_id} is cancelled.", claim)
    reads = [r["result"] for r in facts["reads"] if r["tool"] == "orders.get"]
    if not reads:
        return _calls("orders.get", order_id=order_id)
    order = reads[-1]
    if order.get("status") != "open" or facts["notes"]:
        return _draft(f"Order {order_id} was not cancelled.",
                      {"type": "not_cancelled", "order_id": order_id})  # fmt: skip
    return _calls("orders.cancel", order_id=order_id, amount_minor=order["amount_minor"],
                  currency=order["currency"])  # fmt: skip


def order_agent(orders: SimOrders) -> Agent:
    agent = Agent(
        "order_cancel",
        input=CancelRequest,
        prompt="Cancel the customer's order if it is open, for its total; reply with claims.",
        policy=Policy("ORDER-CANCEL@1", thresholds=[approval_above({"EUR": APPROVAL_ABOVE_MINOR})]),
        scripted_model=scripted_model,
    )

    @agent.tool("orders.get")
    def get_order(order_id: str) -> dict[str, Any]:
        """Read one order."""
        return orders.get(order_id)

    @agent.effect("orders.cancel", key="cancel:{tenant_id}:{order_id}", lookup=orders.find)
    def cancel_order(
        order_id: str, amount_minor: int, currency: str, idempotency_key: str
    ) -> dict[str, Any]:
        """Cancel an open order and refund its total."""
        return orders.cancel(order_id, amount_minor, currency, idempotency_key)

    @agent.rule
    def open_orders_for_their_total(call: Call, facts: Facts) -> Decision | None:
        order = facts.read("orders.get", order_id=call.args["order_id"])
        if order is None:
            return deny("order_not_read")
        if order["status"] != "open":
            return deny(f"order_{order['status']}")
        if (call.args["amount_minor"], call.args["currency"]) != (
            order["amount_minor"],
            order["currency"],
        ):
            return deny("amount_is_not_the_order_total")
        return None

    @agent.claim
    class OrderCancelled(Claim):
        """The order is cancelled and this amount refunded."""

        order_id: str
        refunded_minor: int

        def holds(self, facts: Facts) -> bool:
            done = facts.effect("orders.cancel", order_id=self.order_id)
            return done is not None and done["refunded_minor"] == self.refunded_minor

    @agent.claim
    class NotCancelled(Claim):
        """The order was not cancelled."""

        order_id: str

        def holds(self, facts: Facts) -> bool:
            asked = facts.input["order_id"] == self.order_id
            return asked and facts.effect("orders.cancel", order_id=self.order_id) is None

    return agent
