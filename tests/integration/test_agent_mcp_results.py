"""An agent's effect over MCP (a credit on a billing server), answered directly or found by its
key after the answer was lost, is stored in one shape (the credit's own fields, as a Python or
OpenAPI effect is), so the reply's claims verify either way and the credit is applied once
(SQLite and Postgres)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.agents import Agent, Claim, Facts, Policy
from agent_jobs.core.states import Status
from agent_jobs.testing import AgentHarness, ScriptedModel, final_draft, tool_calls
from agent_jobs.tools.mcp import McpToolSource
from agent_jobs.tools.mcp_config import HttpServer, McpSourceConfig, McpToolConfig
from tests.support.mcp_billing_server import BillingServer, calls, credits, set_flag


@pytest.fixture(scope="module")
def billing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    state = tmp_path_factory.mktemp("billing_mcp")
    proc = BillingServer(state)
    try:
        yield state, proc.url
    finally:
        proc.stop()


class Credited(Claim):
    account_id: str
    amount_minor: int

    def holds(self, facts: Facts) -> bool:
        done = facts.effect("billing.create_credit", account_id=self.account_id)
        # Read as the effect's own fields: the shape a Python or OpenAPI effect is stored in.
        return done is not None and done["amount_minor"] == self.amount_minor


def credit_agent(url: str) -> Agent:
    agent = Agent("credit_agent", prompt="Credit the overcharge.", policy=Policy("CREDIT@1"))
    tools = (
        McpToolConfig("get_account", "read", frozenset({"work", "reply"})),
        McpToolConfig(
            "create_credit",
            "effect",
            frozenset({"execute"}),
            timeout_s=1.0,
            key="credit:{tenant_id}:{request_id}:{account_id}",
            key_arg="idempotency_key",
            lookup="billing.find_credit",
        ),
        McpToolConfig("find_credit", "read", frozenset({"reconcile"})),
    )
    agent.mcp(McpToolSource(McpSourceConfig("billing", HttpServer(url), tools)))
    agent.claim(Credited)
    return agent


def run(store: Any, url: str, tenant: str, account: str) -> Any:
    model = ScriptedModel(
        [
            tool_calls("billing.create_credit", account_id=account, amount_minor=1500),
            final_draft(
                "Credited.", {"type": "credited", "account_id": account, "amount_minor": 1500}
            ),
        ]
    )
    h = AgentHarness(store, credit_agent(url), model)
    return h.settle(h.submit_input({"account": account}, tenant=tenant).id)


@pytest.mark.parametrize("lost", [False, True], ids=["answered", "answer_lost"])
def test_an_mcp_effect_is_stored_in_one_shape_answered_or_found_by_its_key(
    store: Any, tenant: str, billing: tuple[Path, str], lost: bool
) -> None:
    state, url = billing
    account = f"acct-{tenant}"
    set_flag(state, "lose_answer_s", "3" if lost else "")
    try:
        done = run(store, url, tenant, account)
    finally:
        set_flag(state, "lose_answer_s", "")
    assert done.status is Status.COMPLETED, done.outcome
    key = f"credit:{tenant}:req-1:{account}"
    assert credits(state, key) == 1
    # One credit call under the key: answered, or lost and found by the lookup (never resent).
    assert [t for t, a in calls(state) if a.get("key") == key].count("create_credit") == 1
    assert ("reconciled_found" in [e.type for e in store.events(done.id)]) is lost
    (effect,) = done.outcome["effects"]
    assert effect["reconciled"] is lost
    # The same object whichever way it was learned: the credit's own fields, nothing else.
    assert effect["result"] == {"credit_id": effect["result"]["credit_id"],
                                "account_id": account, "amount_minor": 1500}  # fmt: skip
