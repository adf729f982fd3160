"""MCP tool sources: a Model Context Protocol server's tools behind the tool executor.

A source (`McpSourceConfig`) is one server, over stdio (a process we spawn) or streamable HTTP,
and our declaration of the tools of it we expose. `McpToolSource.descriptors()` lists the
server's tools (`tools/list`) into ordinary `ToolDescriptor`s, so every check of the executor
applies to them unchanged: the step scope, the operator switches, the policy stamp, the
idempotency key, intent before effect, and reconciliation of an unknown outcome by key.

What comes from the server is data (`core.text`, the content rule; `tools.mcp_content`):

- Names are ours: `<source>.<server tool>`, for declared tools only.
- The argument schema is the server's, checked as a JSON schema, bounded in size, with local
  references only, and closed (`additionalProperties: false`) by us: we send only what we
  validated. An effect's key argument is removed from it: the executor fills it, not the model.
- The description is cleaned and cut, unless our declaration gives one.
- The annotations (`readOnlyHint`, ...) are ignored; read or effect is our declaration.
- A result is cleaned (NUL, lone surrogates), bounded (`MAX_RESULT_CHARS`; non-text blocks are
  summarised, never passed on), and scrubbed of every credential value this call sent. An
  `isError` result is a definitive rejection, whose text is cleaned, cut and scrubbed too;
  its code is `not_found` when the result says so (`tools.mcp_content.NOT_FOUND`: how a lookup
  by key answers that nothing exists under the key), `tool_error` otherwise.

Each call is one connection, made and closed inside the call (`anyio.run` on a thread of its
own, bounded by the tool's timeout and a short grace for the SDK's own cleanup): a Celery worker
holds no event loop and no session between calls, a crashed server costs one call, and a failure
is known to have happened before or after the `tools/call` left, the distinction the executor's
classification turns on:

- before it left (spawn failed, connection refused, handshake failed or timed out):
  `TransportFailed(sent=False)`: a read may retry; a write goes to reconcile, finds nothing and
  is sent again under the same key (as with the HTTP adapter); a handshake the server refuses
  (a JSON-RPC refusal, as the SDK reports a 404 at the endpoint) is `ServiceRejected`;
- after it left (timeout, connection lost, server exited): `TransportFailed(sent=True)`: a
  write's outcome is unknown and is reconciled by key through the declared lookup;
- a JSON-RPC error answering the call: a refusal of the request itself (parse, invalid request,
  unknown method, invalid params) is `ServiceRejected`; any other is `ServiceFailed`;
- an answer the SDK cannot parse: `ServiceFailed(transient=False)`.

Every answer is bounded before it is read (`tools.mcp_transport`: an HTTP body, JSON or event
stream, and a stdio line, each at most `MAX_MESSAGE_BYTES`): a larger one is
`ServiceFailed("response_too_large")`, whatever the stopped read made the SDK report.

Every failure is counted by code in `McpToolSource.failures` (and, through the executor's
audit, in the tool-call metrics).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx2
import mcp_types
from mcp import ClientSession, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from agent_jobs.core.errors import AgentJobsError, ConfigError
from agent_jobs.core.text import clean_text, cut
from agent_jobs.tools.adapter import (
    AdapterResult,
    AdapterSignal,
    Invocation,
    ServiceFailed,
    ServiceRejected,
    TransportFailed,
)
from agent_jobs.tools.descriptors import ToolDescriptor
from agent_jobs.tools.mcp_config import HttpServer, McpSourceConfig, McpToolConfig, StdioServer
from agent_jobs.tools.mcp_content import (
    MAX_BLOCKS,
    MAX_DESCRIPTION_CHARS,
    MAX_ERROR_CHARS,
    MAX_RESULT_CHARS,
    MAX_SCHEMA_CHARS,
    MIN_SCRUB_CHARS,
    REDACTED,
    Secrets,
    check_schema_source,
    result_value,
    scrub,
)
from agent_jobs.tools.mcp_transport import McpTransport, bounded_stdio_client, capped_http_client

__all__ = [
    "CLEANUP_GRACE_S",
    "MAX_BLOCKS",
    "MAX_DESCRIPTION_CHARS",
    "MAX_ERROR_CHARS",
    "MAX_LIST_PAGES",
    "MAX_MESSAGE_BYTES",
    "MAX_RESULT_CHARS",
    "MAX_SCHEMA_CHARS",
    "MIN_SCRUB_CHARS",
    "REDACTED",
    "McpToolAdapter",
    "McpToolSource",
    "McpUnavailable",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

# One answer from a server, bounded before it is read (`tools.mcp_transport`): an HTTP response
# body (one JSON body or an event stream), an SSE event, a stdio line. A larger one fails the
# call as `response_too_large`, as the HTTP adapter's limit does.
MAX_MESSAGE_BYTES = 1024 * 1024
# Pages of `tools/list` read before giving up on a server that never stops paginating.
MAX_LIST_PAGES = 20
# Beyond the tool's timeout, how long the SDK may take to stop a server and close its streams
# before the call is reported and the cleanup left to finish on its own thread.
CLEANUP_GRACE_S = 3.0

# JSON-RPC errors that say the request itself was refused, so nothing was done.
_REFUSED = frozenset(
    {
        mcp_types.PARSE_ERROR,
        mcp_types.INVALID_REQUEST,
        mcp_types.METHOD_NOT_FOUND,
        mcp_types.INVALID_PARAMS,
    }
)


# How the SDK words the error it makes up for a JSON answer body it cannot parse.
_UNREADABLE = "Failed to parse JSON response"


class McpUnavailable(AgentJobsError):
    """The server could not be listed (unreachable, failing, or answering nonsense)."""

    code = "mcp_unavailable"


@dataclass
class _Phase:
    """Where a call is: whether the `tools/call` request has left (set just before it does),
    and why the transport stopped reading an answer, if it did (`tools.mcp_transport`)."""

    sent: bool = False
    refused: str = ""

    def refuse(self, why: str) -> None:
        self.refused = self.refused or why


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, as anyio's task groups raise them."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _too_large(phase: _Phase) -> ServiceFailed | None:
    """The failure of a call whose answer the transport stopped reading: whatever the stopped
    read caused (a closed stream, a parse error, a timeout), the cause was the answer's size,
    which is neither a clean refusal nor something to resend blindly."""
    if not phase.refused:
        return None
    return ServiceFailed("response_too_large", phase.refused, transient=False)


def _mcp_error(e: MCPError, sent: bool, secrets: Sequence[str]) -> AdapterSignal:
    """A JSON-RPC error answering the call: the server's own, or one the SDK made up for an
    answer it could not read (told apart by the SDK's words, held by the hostile-server tests)."""
    if e.code == mcp_types.REQUEST_TIMEOUT:
        return TransportFailed("timeout", "the request timed out", sent=sent)
    message = cut(scrub(clean_text(str(e.message)), secrets), MAX_ERROR_CHARS)
    if sent and e.code == mcp_types.CONNECTION_CLOSED and "byte limit" in message:
        # The SDK's words for an SSE event over `max_sse_event_size` (httpx2's SSEError).
        return ServiceFailed("response_too_large", message, transient=False)
    if sent and e.code == mcp_types.PARSE_ERROR and message.startswith(_UNREADABLE):
        # Not the server refusing our request: an answer we could not read, after the call
        # left. For an effect that is an unknown outcome (reconciled by key), not a rejection.
        return ServiceFailed("invalid_response", message, transient=False)
    if not sent and e.code in _REFUSED:
        # The handshake itself was refused (the SDK's reading of a 404 at the endpoint, an
        # unknown method): a configuration to fix, like a 4xx, not a blip to retry.
        return ServiceRejected("mcp_handshake_refused", message)
    if e.code == mcp_types.CONNECTION_CLOSED or not sent:
        return TransportFailed("connection_error", f"mcp error {e.code}", sent=sent)
    if e.code in _REFUSED:
        return ServiceRejected(f"mcp_error_{abs(e.code)}", message)
    return ServiceFailed(f"mcp_error_{abs(e.code)}", message)


def _signal(
    exc: BaseException, phase: _Phase, timeout_s: float, secrets: Sequence[str] = ()
) -> AdapterSignal:
    """One failed connection or call, as the adapter port describes failures (a server's error
    text cleaned, cut and scrubbed of the credentials the call sent)."""
    leaves = _leaves(exc)
    # The most telling leaf: a timeout or the server's own error over the cancellations and
    # closed streams it caused.
    ranked = sorted(leaves, key=lambda e: 0 if isinstance(e, TimeoutError | MCPError) else 1)
    e = ranked[0]
    sent = phase.sent
    if isinstance(e, AdapterSignal):
        return e
    if isinstance(e, TimeoutError | httpx2.TimeoutException):
        return TransportFailed("timeout", f"no answer within {timeout_s}s", sent=sent)
    if isinstance(e, MCPError):
        return _mcp_error(e, sent, secrets)
    if isinstance(e, ValidationError | ValueError | json.JSONDecodeError) and sent:
        return ServiceFailed("invalid_response", type(e).__name__, transient=False)
    if isinstance(e, httpx2.HTTPStatusError) and not sent:
        status = e.response.status_code
        if 400 <= status < 500 and status not in (408, 429):
            return ServiceRejected(f"mcp_http_{status}", "the server refused the connection")
    # Spawn failures, refused connections, broken pipes, closed streams, a dead process.
    return TransportFailed("connection_error", type(e).__name__, sent=sent)


class McpToolSource:
    """One MCP server, as the tools we declared of it.

    `secrets` resolves the names in the server's `secret_headers` / `secret_env` (the process
    environment, a vault client's view, the settings); it is read at each connection, so a
    rotated secret is used from the next call on.
    """

    def __init__(
        self,
        config: McpSourceConfig,
        *,
        secrets: Mapping[str, str] | None = None,
        list_timeout_s: float = 10.0,
        transport: McpTransport | None = None,
    ) -> None:
        self.config = config
        # None: the configured server (stdio or HTTP); else an in-process one (a simulator's).
        self._transport = transport
        self._secrets = secrets if secrets is not None else {}
        self._list_timeout_s = list_timeout_s
        self._lock = threading.Lock()
        self.failures: Counter[str] = Counter()

    @property
    def name(self) -> str:
        return self.config.name

    # -- descriptors -----------------------------------------------------------------------

    def descriptors(self) -> list[ToolDescriptor]:
        """Our descriptors for the declared tools, from the server's tool list. Raises
        `McpUnavailable` when the server cannot be listed and `ConfigError` when a declared
        tool is missing or unusable (a bad descriptor fails at startup, not at a call). The
        listing sends the server's secret headers or environment, not a minted credential:
        there is no tenant to mint one for."""
        try:
            listed = self._run(self._list_tools, self._list_timeout_s, _Phase(), None)
        except AdapterSignal as e:
            self._count(e)
            raise McpUnavailable(f"mcp source {self.name}: tools/list failed: {e}") from None
        out = []
        for decl in self.config.tools:
            tool = listed.get(decl.tool)
            if tool is None:
                raise ConfigError(f"mcp source {self.name}: the server lists no tool {decl.tool}")
            out.append(self._descriptor(decl, tool))
        return out

    async def _list_tools(self, secrets: Secrets, phase: _Phase) -> dict[str, mcp_types.Tool]:
        listed: dict[str, mcp_types.Tool] = {}
        async with self._session(secrets, phase) as session:
            cursor: str | None = None
            for _ in range(MAX_LIST_PAGES):
                params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
                page = await session.list_tools(params=params)
                for tool in page.tools:
                    # Only what we declared is kept; the rest of a listing is not read further.
                    if self.config.declared(tool.name) is not None:
                        listed.setdefault(tool.name, tool)
                cursor = page.next_cursor
                if not cursor:
                    break
        return listed

    def _descriptor(self, decl: McpToolConfig, tool: mcp_types.Tool) -> ToolDescriptor:
        name = self.config.qualified(decl.tool)
        schema = check_schema_source(name, tool.input_schema)
        if decl.kind == "effect":
            assert decl.key_arg is not None  # guaranteed by McpToolConfig
            props = schema.get("properties")
            if not isinstance(props, dict) or decl.key_arg not in props:
                raise ConfigError(f"mcp tool {name}: the server takes no argument {decl.key_arg}")
            # The key is the executor's to fill: the model neither sees nor sets it.
            del props[decl.key_arg]
            required = schema.get("required")
            if isinstance(required, list):
                schema["required"] = [r for r in required if r != decl.key_arg]
        description = decl.description
        if description is None:
            description = cut(clean_text(tool.description or ""), MAX_DESCRIPTION_CHARS)
        # The version names the schema too: an approval bound to one schema does not carry
        # over to a server that changed the tool's arguments.
        digest = hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()[:12]
        return ToolDescriptor(
            name=name,
            version=f"{decl.version}+{digest}",
            description=description,
            args_schema=schema,
            side_effect="keyed" if decl.kind == "effect" else "none",
            permission=decl.permission,
            step_scopes=decl.scopes,
            timeout_s=decl.timeout_s,
            adapter=McpToolAdapter(self, decl),
            retry=decl.retry,
            idempotency_key_template=decl.key,
            reconcile_tool=decl.lookup,
        )

    # -- calls -----------------------------------------------------------------------------

    def call(self, decl: McpToolConfig, inv: Invocation) -> AdapterResult:
        """One `tools/call` of `decl.tool` with `inv`'s (already validated) arguments."""
        args = dict(inv.args)
        if decl.kind == "effect":
            assert decl.key_arg is not None
            if not inv.idempotency_key:
                raise ServiceRejected("idempotency_key_required", f"{inv.tool} is keyed")
            args[decl.key_arg] = inv.idempotency_key
        phase = _Phase()
        try:
            secrets = self._resolve(inv)
        except ConfigError as e:
            self._count(ServiceRejected("tool_misconfigured"))
            raise ServiceRejected("tool_misconfigured", str(e)) from None

        async def go(secrets: Secrets, phase: _Phase) -> mcp_types.CallToolResult:
            async with self._session(secrets, phase) as session:
                phase.sent = True
                return await session.call_tool(decl.tool, args)

        try:
            result = self._run(go, inv.timeout_s, phase, secrets)
            return AdapterResult(value=result_value(result, secrets.values()))
        except AdapterSignal as e:
            self._count(e)
            raise

    def _resolve(self, inv: Invocation | None) -> Secrets:
        server = self.config.server

        def secret(name: str) -> str:
            value = self._secrets.get(name)
            if not value:
                raise ConfigError(f"mcp source {self.name}: secret {name} is not set")
            return value

        if isinstance(server, HttpServer):
            headers = {h: secret(n) for h, n in server.secret_headers.items()}
            if server.send_credential and inv is not None:
                headers["Authorization"] = f"Bearer {inv.credential.token}"
                return Secrets(headers=headers, token=inv.credential.token)
            return Secrets(headers=headers)
        env = {k: secret(n) for k, n in server.secret_env.items()}
        if server.credential_env and inv is not None:
            env[server.credential_env] = inv.credential.token
            return Secrets(env=env, token=inv.credential.token)
        return Secrets(env=env)

    @contextlib.asynccontextmanager
    async def _session(self, secrets: Secrets, phase: _Phase) -> AsyncIterator[ClientSession]:
        server = self.config.server
        async with contextlib.AsyncExitStack() as stack:
            if self._transport is not None:
                streams = await stack.enter_async_context(self._transport.streams(phase.refuse))
            elif isinstance(server, StdioServer):
                params = StdioServerParameters(
                    command=server.command,
                    args=list(server.args),
                    env={**server.env, **secrets.env},
                    cwd=server.cwd,
                    encoding_error_handler="replace",
                )
                # The server's stderr is its own business (and unbounded): not the worker's log.
                errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115
                streams = await stack.enter_async_context(
                    bounded_stdio_client(params, errlog, MAX_MESSAGE_BYTES, phase.refuse)
                )
            else:
                headers = {**server.headers, **secrets.headers}
                client = capped_http_client(headers, MAX_MESSAGE_BYTES, phase.refuse)
                await stack.enter_async_context(client)
                streams = await stack.enter_async_context(
                    streamable_http_client(
                        server.url, http_client=client, max_sse_event_size=MAX_MESSAGE_BYTES
                    )
                )
            session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
            await session.initialize()
            yield session

    def _run(
        self,
        fn: Callable[[Secrets, _Phase], Awaitable[T]],
        timeout_s: float,
        phase: _Phase,
        secrets: Secrets | None,
    ) -> T:
        """`fn` on an event loop of its own thread, bounded by `timeout_s` (and the grace for
        the SDK's cleanup); any failure comes out as an `AdapterSignal`."""
        if secrets is None:
            try:
                secrets = self._resolve(None)
            except ConfigError as e:
                raise ServiceRejected("tool_misconfigured", str(e)) from None
        box: dict[str, Any] = {}
        done = threading.Event()
        resolved = secrets
        if self._transport is not None:
            try:
                return self._transport.run(lambda: fn(resolved, phase), timeout_s)
            except Exception as e:
                raise _too_large(phase) or _signal(e, phase, timeout_s, resolved.values()) from None

        async def bounded() -> T:
            with anyio.fail_after(timeout_s):
                return await fn(resolved, phase)

        def target() -> None:
            try:
                box["value"] = anyio.run(bounded)
            except BaseException as e:
                box["error"] = e
            finally:
                done.set()

        threading.Thread(target=target, name=f"mcp:{self.name}", daemon=True).start()
        if not done.wait(timeout_s + CLEANUP_GRACE_S):
            late = TransportFailed("timeout", f"no answer within {timeout_s}s", sent=phase.sent)
            raise _too_large(phase) or late
        if "error" in box:
            raise _too_large(phase) or _signal(box["error"], phase, timeout_s, resolved.values())
        value: T = box["value"]
        return value

    def _count(self, signal: AdapterSignal) -> None:
        code = getattr(signal, "code", None) or getattr(signal, "reason", "error")
        with self._lock:
            self.failures[str(code)] += 1


class McpToolAdapter:
    """The adapter port over one declared tool of a source (see `McpToolSource`)."""

    def __init__(self, source: McpToolSource, decl: McpToolConfig) -> None:
        self.source = source
        self.decl = decl

    def invoke(self, inv: Invocation) -> AdapterResult:
        return self.source.call(self.decl, inv)


# The helpers' names from before they moved to `tools.mcp_content`, for the tests that import
# them from here.
_check_schema_source = check_schema_source
_result_value = result_value
