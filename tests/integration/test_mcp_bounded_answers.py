"""Every MCP answer is bounded before it is read, whatever its framing: hostile servers send a
streamable-HTTP answer as one JSON body (with or without `Content-Length`), compressed, or as an
event stream that never ends, and a stdio server a line that never ends. Each is refused as
`response_too_large` once past `MAX_MESSAGE_BYTES` (promptly: not by the timeout), and an
answer within the limit is read, whatever its size (hypothesis over sizes and framings)."""

from __future__ import annotations

import contextlib
import gzip
import json
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_jobs.tools.adapter import Invocation, ServiceFailed
from agent_jobs.tools.credentials import Credential
from agent_jobs.tools.mcp import MAX_MESSAGE_BYTES, McpToolSource
from agent_jobs.tools.mcp_config import HttpServer, McpSourceConfig, McpToolConfig, StdioServer

TIMEOUT_S = 20.0
# Set by each test: how the server answers `tools/call` (framing, size).
PLAN: dict[str, Any] = {"framing": "length", "size": 10}


def answer(req_id: Any, size: int) -> bytes:
    """A JSON-RPC `tools/call` result of exactly `size` bytes (at least ~70)."""
    head = json.dumps({"jsonrpc": "2.0", "id": req_id, "result": {"content": [
        {"type": "text", "text": ""}]}})  # fmt: skip
    pad = max(0, size - len(head))
    return head.replace('"text": ""', '"text": "' + "x" * pad + '"').encode()


class Hostile(BaseHTTPRequestHandler):
    """Just enough of MCP's streamable HTTP in JSON-response mode, and then a hostile answer."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # no server-initiated stream
        self.send_response(405)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_DELETE = do_GET

    def _send(self, body: bytes, *, chunked: bool = False, headers: dict[str, str] | None = None,
              content_type: str = "application/json") -> None:  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for i in range(0, len(body), 65536):
                    part = body[i : i + 65536]
                    self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass  # the client stopped reading: what we want
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the client stopped reading: what we want
            self.wfile.write(body)

    def do_POST(self) -> None:
        msg = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        method, req_id = msg.get("method"), msg.get("id")
        if req_id is None:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if method == "initialize":
            info = {"name": "h", "version": "1"}
            result = {"protocolVersion": msg["params"]["protocolVersion"],
                      "capabilities": {"tools": {}}, "serverInfo": info}  # fmt: skip
            self._send(json.dumps({"jsonrpc": "2.0", "id": req_id, "result": result}).encode())
            return
        if method == "tools/list":
            tool = {"name": "blob", "inputSchema": {"type": "object", "properties": {}}}
            body = {"jsonrpc": "2.0", "id": req_id, "result": {"tools": [tool]}}
            self._send(json.dumps(body).encode())
            return
        framing, size = PLAN["framing"], PLAN["size"]
        body = answer(req_id, size)
        if framing == "length":
            self._send(body)
        elif framing == "chunked":
            self._send(body, chunked=True)
        elif framing == "gzip":
            self._send(gzip.compress(body), headers={"Content-Encoding": "gzip"})
        elif framing == "sse_forever":  # small events, never the answer, never the end
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            note = b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/message",'
            note += b'"params":{"level":"info","data":"' + b"n" * 4000 + b'"}}\n\n'
            try:
                while True:
                    self.wfile.write(note)
            except OSError:
                pass


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    finally:
        server.shutdown()
        server.server_close()


BLOB = McpToolConfig("blob", "read", frozenset({"work"}), timeout_s=TIMEOUT_S)


def call(source: McpToolSource) -> Any:
    cred = Credential("t" * 32, datetime.now(UTC) + timedelta(minutes=5), "mcp")
    inv = Invocation("h.blob", "1", {}, TIMEOUT_S, cred)
    return source.call(BLOB, inv).value


def refused_promptly(source: McpToolSource) -> ServiceFailed:
    started = time.monotonic()
    with pytest.raises(ServiceFailed) as refused:
        call(source)
    assert time.monotonic() - started < TIMEOUT_S / 2, "refused by the timeout, not the cap"
    assert refused.value.code == "response_too_large" and not refused.value.transient
    return refused.value


@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_a_5_mb_json_body_is_refused_before_it_is_read(hostile: str, framing: str) -> None:
    PLAN.update(framing=framing, size=5 * 1024 * 1024)
    source = McpToolSource(McpSourceConfig("h", HttpServer(hostile), (BLOB,)))
    refused_promptly(source)
    assert source.failures["response_too_large"] == 1


def test_a_compressed_body_is_refused_it_could_expand_past_any_limit(hostile: str) -> None:
    PLAN.update(framing="gzip", size=200)
    refused = refused_promptly(McpToolSource(McpSourceConfig("h", HttpServer(hostile), (BLOB,))))
    assert "compressed" in refused.message


def test_an_event_stream_that_never_ends_is_cut_at_the_limit(hostile: str) -> None:
    PLAN.update(framing="sse_forever", size=0)
    refused_promptly(McpToolSource(McpSourceConfig("h", HttpServer(hostile), (BLOB,))))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from(["length", "chunked"]),
    st.integers(100, 4000) | st.integers(MAX_MESSAGE_BYTES - 300, MAX_MESSAGE_BYTES + 300),
)  # fmt: skip
def test_an_answer_is_read_if_and_only_if_it_is_within_the_limit(
    hostile: str, framing: str, size: int
) -> None:
    PLAN.update(framing=framing, size=size)
    source = McpToolSource(McpSourceConfig("h", HttpServer(hostile), (BLOB,)))
    if size <= MAX_MESSAGE_BYTES:
        assert call(source)["content"][0]["type"] == "text"
    else:
        refused_promptly(source)


# -- stdio -------------------------------------------------------------------------------------

STDIO_SERVER = r"""
import json, sys
size = int(sys.argv[1])
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    m, i = msg["method"], msg["id"]
    if m == "initialize":
        r = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
             "serverInfo": {"name": "h", "version": "1"}}
    elif m == "tools/list":
        r = {"tools": [{"name": "blob", "inputSchema": {"type": "object", "properties": {}}}]}
    elif size < 0:  # a line that never ends
        while True:
            sys.stdout.write("x" * 65536)
            sys.stdout.flush()
    else:
        r = {"content": [{"type": "text", "text": "y" * size}]}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": i, "result": r}) + "\n")
    sys.stdout.flush()
"""


def stdio_source(tmp_path: Path, size: int) -> McpToolSource:
    script = tmp_path / "hostile_stdio.py"
    script.write_text(STDIO_SERVER)
    server = StdioServer(sys.executable, (str(script), str(size)))
    return McpToolSource(McpSourceConfig("h", server, (BLOB,)))


def test_a_stdio_line_that_never_ends_is_cut_at_the_limit(tmp_path: Path) -> None:
    refused_promptly(stdio_source(tmp_path, -1))


@pytest.mark.parametrize("over", [False, True])
def test_a_stdio_answer_is_read_if_and_only_if_its_line_is_within_the_limit(
    tmp_path: Path, over: bool
) -> None:
    size = MAX_MESSAGE_BYTES - 200 + (400 if over else 0)  # the line is ~90 bytes longer
    source = stdio_source(tmp_path, size)
    if over:
        refused_promptly(source)
    else:
        assert call(source)["truncated"] is True  # read, then cut to the result cap


def test_an_answer_through_a_proxy_is_bounded_too(
    hostile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The proxy from the environment is used (the host below does not resolve), and the cap
    # holds on the proxy's transport as on the direct one.
    proxy = hostile.removesuffix("/mcp")
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy)
    monkeypatch.setenv("http_proxy", proxy)
    PLAN.update(framing="chunked", size=5 * 1024 * 1024)
    server = HttpServer("http://mcp.example.invalid/mcp")
    refused_promptly(McpToolSource(McpSourceConfig("h", server, (BLOB,))))
