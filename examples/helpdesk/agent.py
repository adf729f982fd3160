"""The IT helpdesk agent: an employee reports a lost laptop; the agent reads the device from
device management (an OpenAPI service), gets a quote from procurement (an MCP server), disables
the device, then orders its replacement (a person approves above EUR 1,500), and replies with
only what the two systems confirm. Two effects in one task, each with its own key and lookup.

Load it with `AGENT_JOBS_WORKFLOWS=examples.helpdesk.agent` (and `HELPDESK_MDM_URL`), then
submit `{"workflow": "lost_laptop@1", "input": {"device_id": "LT-200", "employee": "a.okafor",
"reason": "left on a train"}}`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from pydantic import BaseModel, Field

from agent_jobs.agents import Agent, Call, Claim, Decision, Facts, Policy, approval_above, deny
from agent_jobs.agents.openapi import effect, lookup, openapi_tools, read
from agent_jobs.tools.mcp import McpToolSource
from agent_jobs.tools.mcp_config import HttpServer, McpSourceConfig, McpToolConfig, StdioServer
from examples.helpdesk import mdm, procurement
from examples.helpdesk.model import scripted_model

DISABLE, ORDER = "mdm.disableDevice", "procurement.order_replacement"


class LostLaptop(BaseModel):
    device_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    employee: str = Field(pattern=r"^[a-z0-9._-]{1,64}$")
    reason: str = Field(min_length=1, max_length=200)


PROMPT = """You are an IT helpdesk agent. An employee reports a lost laptop. Read the device with
mdm.getDevice and get a quote for its model with procurement.quote. If the device is assigned to
the employee and active, disable it with mdm.disableDevice, then order its replacement with
procurement.order_replacement at the quoted price. Reply in two sentences and claim exactly
what happened: device_disabled or not_disabled, replacement_ordered or not_ordered."""

agent = Agent(
    "lost_laptop",
    input=LostLaptop,
    prompt=PROMPT,
    # Amounts in minor units: a replacement above EUR 1,500.00 waits for a person.
    policy=Policy("LOST-LAPTOP@1", thresholds=[approval_above(
        {"EUR": 1500_00}, amount="price_minor", tools=[ORDER])]),
    scripted_model=scripted_model,
    max_effects=2,  # disable, then order
)  # fmt: skip

# Device management: three operations of its OpenAPI document, at the URL in HELPDESK_MDM_URL.
agent.openapi(openapi_tools(mdm.SPEC, prefix="mdm", base_url_setting=mdm.URL_ENV, operations={
    "getDevice": read(),
    "disableDevice": effect(key="disable:{tenant_id}:{device_id}", lookup="getDisable",
                            timeout_s=2.0),
    "getDisable": lookup(),
}))  # fmt: skip

# Procurement: an MCP server at HELPDESK_PROCUREMENT_URL, else spawned over stdio, given only
# the variables named here.
db = os.path.abspath(os.environ.get(procurement.DB_ENV, procurement.DEFAULT_DB))
url = os.environ.get(procurement.URL_ENV)
server = HttpServer(url) if url else StdioServer(sys.executable, (str(procurement.SCRIPT),),
                                                 env={procurement.DB_ENV: db})  # fmt: skip
agent.mcp(McpToolSource(McpSourceConfig("procurement", server, (
    McpToolConfig("quote", "read", frozenset({"work", "reply"})),
    McpToolConfig("order_replacement", "effect", frozenset({"execute"}), timeout_s=15.0,
                  key="replace:{tenant_id}:{device_id}", key_arg="idempotency_key",
                  lookup="procurement.order_by_key"),
    McpToolConfig("order_by_key", "read", frozenset({"reconcile"})),
))))  # fmt: skip


@agent.rule
def their_active_device_then_its_quoted_replacement(call: Call, facts: Facts) -> Decision | None:
    """Only the requester's device, read and active; a replacement only once it is disabled
    in this task, of its model, at the quoted price."""
    device = facts.read("mdm.getDevice", device_id=call.args["device_id"])
    if device is None or device["assigned_to"] != facts.input["employee"]:
        return deny("not_the_requesters_device")
    if call.tool == DISABLE:
        return None if device["status"] == "active" else deny("device_not_active")
    if facts.effect(DISABLE, device_id=call.args["device_id"]) is None:
        return deny("device_not_disabled")
    quote = facts.read("procurement.quote", model=device["model"])
    wanted = (device["model"], quote and quote.get("price_minor"), quote and quote.get("currency"))
    if (call.args["model"], call.args["price_minor"], call.args["currency"]) != wanted:
        return deny("not_the_quoted_replacement")
    return None


@agent.claim
class DeviceDisabled(Claim):
    """The device is disabled."""

    device_id: str

    def holds(self, facts: Facts) -> bool:
        return facts.effect(DISABLE, device_id=self.device_id) is not None


@agent.claim
class NotDisabled(Claim):
    """The device was not disabled."""

    device_id: str

    def holds(self, facts: Facts) -> bool:
        asked = facts.input["device_id"] == self.device_id
        return asked and facts.effect(DISABLE, device_id=self.device_id) is None


@agent.claim
class ReplacementOrdered(Claim):
    """A replacement is ordered: this purchase order, at this price."""

    device_id: str
    order_id: str
    price_minor: int

    def holds(self, facts: Facts) -> bool:
        done: dict[str, Any] | None = facts.effect(ORDER, device_id=self.device_id)
        return done is not None and (done["order_id"], done["price_minor"]) == (
            self.order_id, self.price_minor)  # fmt: skip


@agent.claim
class NotOrdered(Claim):
    """No replacement was ordered."""

    device_id: str

    def holds(self, facts: Facts) -> bool:
        asked = facts.input["device_id"] == self.device_id
        return asked and facts.effect(ORDER, device_id=self.device_id) is None


workflows = [agent]
