"""The order-cancellation agent: read the order, cancel it for its full amount (a person approves
above 100 in its currency), reply with only what the orders system confirms.

Load it into workers and the API with `AGENT_JOBS_WORKFLOWS=examples.order_cancel.agent`, then
submit `{"workflow": "order_cancel@1", "input": {"order_id": "A-200", "reason": "..."}}`.
"""

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
    approval_above,
    deny,
)
from examples.order_cancel.model import scripted_model
from examples.order_cancel.orders import orders


class CancelRequest(BaseModel):
    order_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    reason: str = Field(min_length=1, max_length=500)


PROMPT = """You cancel customer orders. Read the order with orders.get first. If it is open,
cancel it with orders.cancel for its full amount and currency. Then reply to the customer in
one or two sentences, and list as claims exactly what happened: order_cancelled with the
refunded amount, or not_cancelled."""

agent = Agent(
    "order_cancel",
    input=CancelRequest,
    prompt=PROMPT,
    policy=Policy(
        "ORDER-CANCEL@1",
        # Amounts are minor units: above 100.00 in these currencies a person approves; any
        # other currency always asks.
        thresholds=[approval_above({"EUR": 100_00, "USD": 100_00, "GBP": 100_00})],
    ),
    scripted_model=scripted_model,
)


@agent.tool("orders.get")
def get_order(order_id: str) -> dict[str, Any]:
    """Read one order: its status, amount in minor units, and currency."""
    return orders().get(order_id)


def find_cancellation(idempotency_key: str) -> dict[str, Any] | None:
    return orders().find_cancellation(idempotency_key)


@agent.effect("orders.cancel", key="cancel:{tenant_id}:{order_id}", lookup=find_cancellation)
def cancel_order(
    order_id: str, amount_minor: int, currency: str, idempotency_key: str
) -> dict[str, Any]:
    """Cancel an open order and refund its full amount."""
    return orders().cancel(order_id, amount_minor, currency, key=idempotency_key)


@agent.rule
def open_orders_for_their_total(call: Call, facts: Facts) -> Decision | None:
    """Only an order the task has read, still open, for exactly its amount and currency."""
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


workflows = [agent]
