"""An MCP server that applies an effect and answers with a body that is not JSON (a streamable
HTTP server in JSON-response mode; the SDK reports it as a JSON-RPC parse error): the outcome is
unknown and reconciled by key, never taken for the server refusing the request. The agent's
credit is found by its key, the task completes, the credit is applied once (SQLite and
Postgres). A server's own parse error (it could not read our request) stays a refusal."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import mcp_types
import pytest
from mcp.shared.exceptions import MCPError

from agent_jobs.agents import Agent, Claim, Facts, Policy
from agent_jobs.core.states import Status
from agent_jobs.testing import AgentHarness, ScriptedModel, final_draft, tool_calls
from agent_jobs.tools.adapter import ServiceFailed, ServiceRejected
from agent_jobs.tools.mcp import McpToolSource, _Phase, _signal
from agent_jobs.tools.mcp_config import HttpServer, McpSourceConfig, McpToolConfig
from tests.integration.test_mcp_bounded_answers import Hostile

APPLIED: dict[str, dict[str, Any]] = {}
STR = {"type": "string"}
OBJ = {
    "type": "object",
    "properties": {"account_id": STR, "idempotency_key": STR},
    "required": ["account_id", "idempotency_key"],
}
KEY = {"type": "object", "properties": {"idempotency_key": STR}}


class Garbling(Hostile):
    """Applies a credit once per key, then answers with a truncated JSON body."""

    def do_POST(self) -> None:
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        method, req_id, params = msg.get("method"), msg.get("id"), msg.get("params") or {}
        if req_id is None:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if method == "initialize":
            info = {"name": "g", "version": "1"}
            result: dict[str, Any] = {"protocolVersion": params["protocolVersion"]}
            result.update(capabilities={"tools": {}}, serverInfo=info)
        elif method == "tools/list":
            result = {"tools": [{"name": "create_credit", "inputSchema": OBJ},
                                {"name": "find_credit", "inputSchema": KEY}]}  # fmt: skip
        elif params.get("name") == "create_credit":
            args = params["arguments"]
            APPLIED.setdefault(args["idempotency_key"], {"account_id": args["account_id"]})
            self._send(b'{"jsonrpc": "2.0", "id": %d, "result": {"content": [' % req_id)
            return
        else:
            found = APPLIED.get(params["arguments"]["idempotency_key"])
            answer = {"found": found}
            result = {"content": [{"type": "text", "text": json.dumps(answer)}],
                      "structuredContent": answer}  # fmt: skip
        self._send(json.dumps({"jsonrpc": "2.0", "id": req_id, "result": result}).encode())


@pytest.fixture(scope="module")
def garbling() -> Iterator[str]:
    from http.server import ThreadingHTTPServer

    server = ThreadingHTTPServer(("127.0.0.1", 0), Garbling)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()


class Credited(Claim):
    account_id: str

    def holds(self, facts: Facts) -> bool:
        done = facts.effect("bill.create_credit", account_id=self.account_id)
        return done is not None and done["account_id"] == self.account_id


def test_an_unreadable_answer_to_an_effect_is_reconciled_not_refused(
    store: Any, tenant: str, garbling: str
) -> None:
    tools = (
        McpToolConfig("create_credit", "effect", frozenset({"execute"}), timeout_s=5.0,
                      key="credit:{tenant_id}:{account_id}", key_arg="idempotency_key",
                      lookup="bill.find_credit"),
        McpToolConfig("find_credit", "read", frozenset({"reconcile"})),
    )  # fmt: skip
    agent = Agent("garbled", prompt="Credit.", policy=Policy("G@1"))
    agent.mcp(McpToolSource(McpSourceConfig("bill", HttpServer(garbling), tools)))
    agent.claim(Credited)
    credited = {"type": "credited", "account_id": "a1"}
    model = ScriptedModel(
        [tool_calls("bill.create_credit", account_id="a1"), final_draft("Credited.", credited)]
    )
    h = AgentHarness(store, agent, model)
    done = h.settle(h.submit_input({}, tenant=tenant).id)
    assert done.status is Status.COMPLETED, done.outcome
    assert list(APPLIED).count(f"credit:{tenant}:a1") == 1
    seen = [e.type for e in store.events(done.id)]
    assert "effect_unknown" in seen and "reconciled_found" in seen


def test_the_server_s_own_parse_error_is_still_a_refusal() -> None:
    theirs = MCPError(code=mcp_types.PARSE_ERROR, message="Parse error")
    assert isinstance(_signal(theirs, _Phase(sent=True), 5.0), ServiceRejected)
    ours = MCPError(code=mcp_types.PARSE_ERROR, message="Failed to parse JSON response: EOF")
    failed = _signal(ours, _Phase(sent=True), 5.0)
    assert isinstance(failed, ServiceFailed) and failed.code == "invalid_response"
