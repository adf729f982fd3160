"""The example agent on an OpenAI-compatible model over HTTP (the fake server of
`agent_jobs.gateway.testing`) instead of its stub: its tools go out as functions (dotted names
mapped to the wire and back), its own output schema as the response format, a tool call comes
back as its proposal, and the task completes as with the stub (SQLite and Postgres)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.core.states import Status
from agent_jobs.gateway import ModelGateway, OpenAICompatProvider, load_routes
from agent_jobs.gateway.routes import DEFAULT_ROUTE_CONFIG
from agent_jobs.gateway.testing import FakeOpenAIServer, FakeReply
from agent_jobs.testing import AgentHarness, ScriptedModel, final_draft, tool_calls
from agent_jobs.tools import HmacCredentialProvider
from examples.order_cancel.agent import agent
from examples.order_cancel.orders import DB_ENV, Orders, orders

MODEL = "fake-model-2026-03"


@pytest.fixture
def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Orders]:
    monkeypatch.setenv(DB_ENV, str(tmp_path / "orders.sqlite3"))
    yield orders()


def test_the_agent_runs_on_an_openai_compatible_model(store: Any, shop: Orders) -> None:
    price = DEFAULT_ROUTE_CONFIG["prices"]["scripted-refund-2026-03"]
    route = {**DEFAULT_ROUTE_CONFIG, "primary": {"provider": "openai", "model": MODEL},
             "fallback": None, "prices": {MODEL: price}}  # fmt: skip
    claim = {"type": "order_cancelled", "order_id": "A-100", "refunded_minor": 4900}
    with FakeOpenAIServer() as server:
        server.enqueue(
            FakeReply.proposal(tool_calls("orders.get", order_id="A-100")),
            FakeReply.proposal(
                tool_calls("orders.cancel", order_id="A-100", amount_minor=4900, currency="EUR")
            ),
            FakeReply.proposal(final_draft("Order A-100 is cancelled.", claim)),
        )
        provider = OpenAICompatProvider(server.base_url, api_key_env=None)
        h = AgentHarness(store, agent, ScriptedModel([final_draft("unused")]))
        agent.use(
            gateway=ModelGateway(load_routes(route), {"openai": provider}),
            credentials=HmacCredentialProvider("agent-test-" * 4),
        )
        done = h.settle(h.submit_input({"order_id": "A-100", "reason": "twice"}).id)
        sent = server.requests
    assert done.status is Status.COMPLETED, done.outcome
    assert shop.cancel_calls() == 1
    assert len(sent) == 3 and all(not r.problems for r in sent), [r.problems for r in sent]
    first = sent[0].json
    assert first["model"] == MODEL
    assert {t["function"]["name"] for t in first["tools"]} == {"orders_get", "orders_cancel"}
    assert first["response_format"]["json_schema"]["schema"] == agent.output_schema
    # The reply step offers reads only.
    assert {t["function"]["name"] for t in sent[2].json["tools"]} == {"orders_get"}
