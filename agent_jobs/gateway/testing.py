"""A fake OpenAI-compatible server for tests: ours and our users'.

`FakeOpenAIServer` is a stdlib `ThreadingHTTPServer` on 127.0.0.1 (a free port) that speaks
`POST /v1/chat/completions`. Each request takes the next queued `FakeReply` (or the default):
a proposal as content or tool calls, 429 with Retry-After, 5xx, a hang past the client's timeout,
a malformed body, or any content at all. It checks requests the way a strict server does (JSON
body, model, message roles, function-name syntax, bearer key) and records every request.

    with FakeOpenAIServer() as server:
        server.enqueue(FakeReply.rate_limited(retry_after=2), FakeReply.proposal({...}))
        provider = OpenAICompatProvider(server.base_url, api_key_env=None)

`scripted_gateway` is the gateway of the embedded demo and of workflow tests: the default route
(`support-tier2@2026-03`) served by a `ScriptedProvider`.
"""

from __future__ import annotations

import json
import re
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent_jobs.core.clock import Clock
from agent_jobs.gateway.chat import chat_completion, proposal_message
from agent_jobs.gateway.gateway import ModelGateway
from agent_jobs.gateway.providers.scripted import ScriptedProvider
from agent_jobs.gateway.routes import DEFAULT_ROUTE

_FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ROLES = {"system", "user", "assistant", "tool", "developer"}


@dataclass(frozen=True)
class FakeReply:
    """One scripted HTTP reply. Build with the class methods."""

    status: int = 200
    message: dict[str, Any] | None = None
    body: bytes | None = None
    headers: tuple[tuple[str, str], ...] = ()
    hang_s: float = 0.0
    stall_body_s: float = 0.0
    prompt_tokens: int = 100
    completion_tokens: int = 20
    cached_tokens: int = 0

    @classmethod
    def proposal(
        cls,
        proposal: dict[str, Any],
        *,
        as_tool_calls: bool | None = None,
        prompt_tokens: int = 100,
        completion_tokens: int = 20,
        cached_tokens: int = 0,
    ) -> FakeReply:
        """200 with `proposal` as a real model sends it: tool calls (for a tool_calls
        proposal, unless `as_tool_calls` is False) or a JSON string in `content`."""
        return cls(
            message=proposal_message(proposal, as_tool_calls=as_tool_calls),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cached_tokens=cached_tokens,
        )

    @classmethod
    def content(
        cls, text: str, *, prompt_tokens: int = 100, completion_tokens: int = 20
    ) -> FakeReply:
        """200 with any text as the assistant's content (wrong-schema or non-JSON output)."""
        return cls(
            message={"role": "assistant", "content": text},
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
        )

    @classmethod
    def rate_limited(cls, retry_after: str | float | None = 1) -> FakeReply:
        """429, with `Retry-After` (seconds or an HTTP date) unless None."""
        headers = () if retry_after is None else (("Retry-After", str(retry_after)),)
        return cls(
            status=429, body=_error("Rate limit reached", "rate_limit_exceeded"), headers=headers
        )

    @classmethod
    def error(cls, status: int, message: str = "error") -> FakeReply:
        """Any status with an OpenAI-style error body (500, 503, 400, 401, ...)."""
        return cls(status=status, body=_error(message, f"http_{status}"))

    @classmethod
    def hang(cls, seconds: float = 30.0) -> FakeReply:
        """Send nothing for `seconds` (released early when the server closes), then a 500."""
        return cls(status=500, body=_error("too late", "hang"), hang_s=seconds)

    @classmethod
    def stall_body(cls, seconds: float = 30.0) -> FakeReply:
        """Send 200 and headers, then stall before the body: a read timeout mid-response."""
        return cls(stall_body_s=seconds, message={"role": "assistant", "content": "{}"})

    @classmethod
    def malformed_body(cls, text: str = '{"choices": [{"message": ') -> FakeReply:
        """200 whose body is not JSON at all."""
        return cls(body=text.encode("utf-8"))


def _error(message: str, code: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "fake", "code": code}}).encode()


@dataclass(frozen=True)
class RecordedRequest:
    """What the server received. `json` is None when the body was not JSON."""

    method: str
    path: str
    headers: dict[str, str]
    json: Any
    reply_status: int = 0
    problems: tuple[str, ...] = field(default=())


def _refusal(
    path: str, headers: dict[str, str], body: Any, api_key: str | None
) -> tuple[int, list[str]] | None:
    """The status and reasons a strict server would refuse this request with, or None."""
    if path != "/v1/chat/completions":
        return 404, [f"no route {path}"]
    if api_key is not None and headers.get("authorization") != f"Bearer {api_key}":
        return 401, ["invalid api key"]
    if not isinstance(body, dict):
        return 400, ["body is not a JSON object"]
    out = []
    if not isinstance(body.get("model"), str) or not body["model"]:
        out.append("model is required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        out.append("messages must be a non-empty list")
    else:
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in _ROLES:
                out.append(f"messages[{i}]: bad role")
            elif m["role"] == "tool" and "tool_call_id" not in m:
                out.append(f"messages[{i}]: tool message without tool_call_id")
            elif "name" in m and not _FUNCTION_NAME.match(str(m["name"])):
                out.append(f"messages[{i}]: invalid name")
    for i, tool in enumerate(body.get("tools") or []):
        name = (tool.get("function") or {}).get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str) or not _FUNCTION_NAME.match(name):
            out.append(f"tools[{i}]: invalid function name {name!r}")
    return (400, out) if out else None


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read `server.requests`, not stderr."""

    def do_POST(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        refusal = _refusal(self.path, headers, body, fake.api_key)
        reply = fake._next_reply() if refusal is None else None
        status, problems = refusal or (reply.status if reply else 0, [])
        fake._record(RecordedRequest("POST", self.path, headers, body, status, tuple(problems)))
        try:
            if reply is None:
                self._send(status, _error("; ".join(problems), "invalid_request"), ())
            else:
                self._reply(reply, body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout): exactly what a hang test wants

    def _reply(self, reply: FakeReply, body: dict[str, Any]) -> None:
        fake = self.server.fake
        if reply.hang_s and fake._closing.wait(reply.hang_s):
            return
        if reply.body is not None:
            payload = reply.body
        else:
            payload = json.dumps(
                chat_completion(
                    str(body.get("model")),
                    reply.message or {"role": "assistant", "content": ""},
                    prompt_tokens=reply.prompt_tokens,
                    completion_tokens=reply.completion_tokens,
                    cached_tokens=reply.cached_tokens,
                    response_id=f"chatcmpl-fake-{len(fake.requests)}",
                )
            ).encode()
        if reply.stall_body_s:
            self._head(reply.status, len(payload), reply.headers)
            if fake._closing.wait(reply.stall_body_s):
                return
            self.wfile.write(payload)
            return
        self._send(reply.status, payload, reply.headers)

    def _head(self, status: int, length: int, headers: tuple[tuple[str, str], ...]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(length))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.flush()

    def _send(self, status: int, payload: bytes, headers: tuple[tuple[str, str], ...]) -> None:
        self._head(status, len(payload), headers)
        self.wfile.write(payload)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeOpenAIServer


class FakeOpenAIServer:
    """An OpenAI-compatible HTTP server on 127.0.0.1 for tests; use as a context manager.

    `api_key`, when set, is required as the bearer token (401 otherwise). `default` answers when
    the queue is empty; without one, an empty queue answers 500 "no reply queued".
    """

    def __init__(self, *, api_key: str | None = None, default: FakeReply | None = None) -> None:
        self.api_key = api_key
        self.default = default
        self._lock = threading.Lock()
        self._queue: deque[FakeReply] = deque()
        self._requests: list[RecordedRequest] = []
        self._closing = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """What to pass as `OpenAICompatProvider(base_url=...)`."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in order."""
        with self._lock:
            return list(self._requests)

    def enqueue(self, *replies: FakeReply) -> None:
        """Replies for the next requests, in order."""
        with self._lock:
            self._queue.extend(replies)

    def close(self) -> None:
        """Release hanging handlers, stop serving and free the port."""
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _next_reply(self) -> FakeReply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return self.default or FakeReply.error(500, "FakeOpenAIServer: no reply queued")

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)


def scripted_gateway(provider: ScriptedProvider, clock: Clock | None = None) -> ModelGateway:
    """A gateway with the default route, every model of it served by `provider` (keep a handle
    on the provider to inject faults or read the requests it received)."""
    return ModelGateway([DEFAULT_ROUTE], {"scripted": provider}, clock)
