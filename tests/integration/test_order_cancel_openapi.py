"""The order-cancellation agent with its tools imported from an OpenAPI document instead of
Python functions: the same orders service behind HTTP, executed by the HTTP adapter, an effect
whose response is lost reconciled through the lookup operation, on SQLite and Postgres."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from agent_jobs.agents import Agent, Claim, Facts, Policy, approval_above, openapi_tools
from agent_jobs.agents.openapi import effect, lookup, read
from agent_jobs.core.errors import ConfigError
from agent_jobs.core.states import Status
from agent_jobs.testing import AgentHarness, ScriptedModel, final_draft, tool_calls

SPEC: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "orders", "version": "1"},
    "paths": {
        "/orders/{order_id}": {
            "parameters": [
                {
                    "name": "order_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "maxLength": 64},
                }
            ],
            "get": {"operationId": "getOrder", "summary": "Read one order."},
        },
        "/orders/{order_id}/cancel": {
            "post": {
                "operationId": "cancelOrder",
                "summary": "Cancel an order and refund it.",
                "parameters": [
                    {
                        "name": "order_id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                    }
                ],
                "requestBody": {
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Refund"}}
                    }
                },
            }
        },
        "/cancellations": {
            "get": {
                "operationId": "getCancellation",
                "parameters": [
                    {
                        "name": "idempotency_key",
                        "in": "query",
                        "required": True,
                        "schema": {"type": "string"},
                    }
                ],
            }
        },
    },
    "components": {
        "schemas": {
            "Refund": {
                "type": "object",
                "required": ["amount_minor", "currency"],
                "properties": {"amount_minor": {"type": "integer"}, "currency": {"type": "string"}},
            }
        }
    },
}


class Shop:
    def __init__(self) -> None:
        self.orders = {
            "A-200": {
                "order_id": "A-200",
                "status": "open",
                "amount_minor": 25000,
                "currency": "EUR",
            }
        }
        self.by_key: dict[str, dict[str, Any]] = {}
        self.cancel_posts = 0
        self.lose_next_answer = False


class Handler(BaseHTTPRequestHandler):
    shop: Shop

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path.startswith("/orders/"):
            order = self.shop.orders.get(url.path.split("/")[2])
            return self._send(200, order) if order else self._send(404, {})
        key = parse_qs(url.query).get("idempotency_key", [""])[0]
        found = self.shop.by_key.get(key)
        return (
            self._send(200, found) if found else self._send(404, {"error": {"code": "not_found"}})
        )

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        order_id = self.path.split("/")[2]
        key = self.headers["Idempotency-Key"]
        self.shop.cancel_posts += 1
        if key not in self.shop.by_key:
            self.shop.orders[order_id]["status"] = "cancelled"
            self.shop.by_key[key] = {
                "order_id": order_id,
                "refunded_minor": body["amount_minor"],
                "currency": body["currency"],
            }
        if self.shop.lose_next_answer:
            self.shop.lose_next_answer = False
            return self._send(502, {"error": {"code": "bad_gateway"}})  # after it committed
        return self._send(201, self.shop.by_key[key])


@pytest.fixture
def shop() -> Iterator[tuple[Shop, str]]:
    state = Shop()
    handler = type("H", (Handler,), {"shop": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class OrderCancelled(Claim):
    order_id: str
    refunded_minor: int

    def holds(self, facts: Facts) -> bool:
        done = facts.effect("orders.cancelOrder", order_id=self.order_id)
        return done is not None and done["refunded_minor"] == self.refunded_minor


def http_agent(base_url: str) -> Agent:
    agent = Agent(
        "order_cancel_http",
        prompt="Cancel the order.",
        policy=Policy("ORDERS-HTTP@1", thresholds=[approval_above({"EUR": 100_00})]),
    )
    agent.openapi(
        openapi_tools(
            SPEC,
            prefix="orders",
            base_url_setting="ORDERS_URL",
            base_url=base_url,
            operations={
                "getOrder": read(),
                "cancelOrder": effect(
                    key="cancel:{tenant_id}:{order_id}", lookup="getCancellation"
                ),
                "getCancellation": lookup(),
            },
        )
    )
    agent.claim(OrderCancelled)
    return agent


def test_openapi_operations_are_tools_and_a_lost_answer_is_reconciled_by_key(
    store: Any, shop: tuple[Shop, str]
) -> None:
    state, url = shop
    state.lose_next_answer = True
    claim = {"type": "order_cancelled", "order_id": "A-200", "refunded_minor": 25000}
    model = ScriptedModel(
        [
            tool_calls("orders.getOrder", order_id="A-200"),
            tool_calls("orders.cancelOrder", order_id="A-200", amount_minor=25000, currency="EUR"),
            final_draft("Cancelled.", claim),
        ]
    )
    h = AgentHarness(store, http_agent(url), model)
    task = h.submit_input({"order_id": "A-200"})
    assert h.settle(task.id).status is Status.APPROVAL_WAIT
    offered = {t.name for t in model.asked[0].tools}
    assert offered == {"orders.getOrder", "orders.cancelOrder"}  # never the lookup
    done = h.approve(task.id)
    assert done.status is Status.COMPLETED, done.outcome
    seen = [e.type for e in store.events(task.id)]
    assert "effect_unknown" in seen and "reconciled_found" in seen
    assert state.cancel_posts == 1 and len(state.by_key) == 1


def test_an_openapi_document_the_executor_cannot_honour_is_refused_at_declaration() -> None:
    header = {
        "paths": {
            "/x": {
                "get": {
                    "operationId": "x",
                    "parameters": [
                        {"name": "X-Token", "in": "header", "schema": {"type": "string"}}
                    ],
                }
            }
        }
    }
    with pytest.raises(ConfigError, match="header"):
        openapi_tools(header, prefix="s", base_url_setting="S", operations={"x": read()})
    remote = {
        "paths": {
            "/x": {
                "post": {
                    "operationId": "x",
                    "requestBody": {
                        "content": {
                            "application/json": {"schema": {"$ref": "http://evil/schema.json"}}
                        }
                    },
                }
            }
        }
    }
    with pytest.raises(ConfigError, match="local"):
        openapi_tools(remote, prefix="s", base_url_setting="S", operations={"x": read()})
    with pytest.raises(ConfigError, match="no operation"):
        openapi_tools(SPEC, prefix="s", base_url_setting="S", operations={"nope": read()})
    no_lookup = {"cancelOrder": effect(key="k:{order_id}", lookup="getOrder"), "getOrder": read()}
    with pytest.raises(ConfigError, match="lookup"):
        openapi_tools(SPEC, prefix="s", base_url_setting="S", operations=no_lookup)
