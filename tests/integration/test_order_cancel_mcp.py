"""An agent whose tools come from an MCP server (`Agent.mcp`): the server's tools as the agent's
reads and effect, our declaration deciding which is which; an effect answered after the call's
timeout is reconciled through the declared lookup by key, and sent once (SQLite and Postgres)."""

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
from tests.support.mcp_server import HttpServerProcess, calls, set_flag


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    state = tmp_path_factory.mktemp("agent_mcp")
    proc = HttpServerProcess(state)
    try:
        yield state, proc.url
    finally:
        proc.stop()


class Ordered(Claim):
    sku: str

    def holds(self, facts: Facts) -> bool:
        return facts.effect("shop.create_order", sku=self.sku) is not None


def mcp_agent(url: str) -> Agent:
    agent = Agent("shop_agent", prompt="Place the order.", policy=Policy("SHOP@1"))
    tools = (
        McpToolConfig("get_order", "read", frozenset({"work", "reply"})),
        McpToolConfig(
            "create_order",
            "effect",
            frozenset({"execute"}),
            timeout_s=1.0,
            key="order:{tenant_id}:{request_id}:{sku}",
            key_arg="idempotency_key",
            lookup="shop.get_order_by_key",
        ),
        McpToolConfig("get_order_by_key", "read", frozenset({"reconcile"})),
    )
    agent.mcp(McpToolSource(McpSourceConfig("shop", HttpServer(url), tools)))
    agent.claim(Ordered)
    return agent


def test_an_mcp_effect_timing_out_after_send_is_reconciled_by_key_and_sent_once(
    store: Any, tenant: str, server: tuple[Path, str]
) -> None:
    state, url = server
    sku = f"sku-{tenant}"
    model = ScriptedModel(
        [
            tool_calls("shop.create_order", sku=sku, quantity=3),
            final_draft("Ordered.", {"type": "ordered", "sku": sku}),
        ]
    )
    h = AgentHarness(store, mcp_agent(url), model)
    set_flag(state, "slow_create_s", "3")  # applied at once, answered after the 1 s timeout
    try:
        task = h.submit_input({"note": "three please"}, tenant=tenant)
        done = h.settle(task.id)
    finally:
        set_flag(state, "slow_create_s", "")
    assert done.status is Status.COMPLETED, done.outcome
    # The model saw the server's read and the effect, never the lookup nor the key argument.
    shown = {t.name: t.parameters for t in model.asked[0].tools}
    assert set(shown) == {"shop.get_order", "shop.create_order"}
    assert "idempotency_key" not in shown["shop.create_order"]["properties"]
    seen = [e.type for e in store.events(task.id)]
    assert seen.index("intent_recorded") < seen.index("effect_unknown")
    assert "reconciled_found" in seen
    key = f"order:{tenant}:req-1:{sku}"
    assert [t for t, a in calls(state) if a.get("key") == key] == [
        "create_order",
        "get_order_by_key",
    ]
