"""The transports an MCP source connects over, each bounding what it reads before reading it.

A server's answer must not set a worker's memory. The SDK bounds one SSE event
(`max_sse_event_size`) but reads a streamable-HTTP answer sent as one JSON body whole, and a
stdio server's line whole, however long. Both are read here through a cap instead:

- HTTP: `capped_http_client` is the SDK's client with every response body (JSON or event
  stream, the call's and the session's GET stream alike) counted as it arrives;
  past the limit, or a declared `Content-Length` over it, or a compressed body (which could
  expand past any limit after it is counted; we ask for `identity`), the body stops with
  `AnswerRefused` (an `httpx2.StreamError`, which the SDK turns into an error for the waiting
  request at once) and `over` is told why.
- stdio: `bounded_stdio_client` is a stdio transport of our own (the streams `ClientSession`
  takes are the SDK's seam for transports): it spawns the server as the SDK does (its minimal
  environment, a process group of its own, stopped with the SDK's process-tree termination)
  and reads its stdout as bytes, one line at a time, never holding more than the limit: a
  longer line closes the connection and `over` is told why.

`tools.mcp` records what `over` was told on the call's phase, so the failure is reported as
`response_too_large` rather than as the closed connection or parse error it causes.

`McpTransport` is where a source connects instead of its configured server: an in-process
server (a deterministic simulator's, a test's) on the streams `ClientSession` takes, run on the
caller's thread as the transport chooses rather than on a thread of the source's own.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import IO, Any, Protocol, TypeVar

import anyio
import httpx2
import mcp_types
from anyio.abc import Process
from mcp.client.stdio import StdioServerParameters, get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
from mcp.shared.message import SessionMessage

__all__ = ["AnswerRefused", "McpTransport", "bounded_stdio_client", "capped_http_client"]

Over = Callable[[str], None]
T = TypeVar("T")
# A server that has not exited this long after its stdin closed is stopped (as the SDK does).
STOP_GRACE_S = 2.0
_READ_CHUNK = 64 * 1024


class AnswerRefused(httpx2.StreamError):
    """A body we stopped reading: over the limit, or compressed."""


class McpTransport(Protocol):
    """A connection to a server other than the configured one (see the module docstring)."""

    def streams(self, over: Over) -> AbstractAsyncContextManager[tuple[Any, Any]]:
        """The read and write streams of one connection (`ClientSession` takes them)."""
        ...

    def run(self, call: Callable[[], Awaitable[T]], timeout_s: float) -> T:
        """Run one connection's work (`call`) to its end; a failure is raised as it is, and
        the source classifies it as it does a network transport's."""
        ...


class _CappedBody(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, limit: int, refusal: str, over: Over):
        self._inner = inner
        self._limit = limit
        self._refusal = refusal
        self._over = over

    def _refuse(self, why: str) -> AnswerRefused:
        self._over(why)
        return AnswerRefused(why)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._refusal:
            raise self._refuse(self._refusal)
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise self._refuse(f"an answer of more than {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def capped_http_client(headers: dict[str, str], limit: int, over: Over) -> httpx2.AsyncClient:
    """The SDK's HTTP client (its timeouts, no redirects followed, proxies from the environment)
    reading every response body through a cap of `limit` bytes (see the module docstring). The
    cap is put on each response as it arrives (a response hook, before any byte of the body is
    read), so every transport the client picks, a proxy's included, is bounded."""

    async def cap(response: httpx2.Response) -> None:
        refusal = ""
        declared = response.headers.get("content-length", "").strip()
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if declared.isdigit() and int(declared) > limit:
            refusal = f"an answer of {declared} bytes declared, more than {limit}"
        elif encoding not in ("", "identity"):
            refusal = "a compressed answer (content-encoding), which could expand past any limit"
        stream = response.stream
        assert isinstance(stream, httpx2.AsyncByteStream)
        response.stream = _CappedBody(stream, limit, refusal, over)

    return httpx2.AsyncClient(
        headers={**headers, "Accept-Encoding": "identity"},
        timeout=httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT),
        event_hooks={"response": [cap]},
    )


def _message(line: bytes, encoding: str) -> SessionMessage | Exception:
    try:
        text = line.decode(encoding, errors="replace")
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False))
    except ValueError as exc:  # the session reports it as the server's error
        return exc


@contextlib.asynccontextmanager
async def bounded_stdio_client(
    params: StdioServerParameters, errlog: IO[str], limit: int, over: Over
) -> AsyncIterator[tuple[Any, Any]]:
    """A stdio connection to the server of `params` whose lines are at most `limit` bytes
    (see the module docstring); yields the read and write streams `ClientSession` takes."""
    process: Process = await anyio.open_process(
        [params.command, *params.args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=errlog,
        cwd=params.cwd,
        env={**get_default_environment(), **(params.env or {})},
        start_new_session=True,
    )
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    async def read() -> None:
        pending = bytearray()
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            async with to_session:
                while True:
                    try:
                        chunk = await stdout.receive(_READ_CHUNK)
                    except (anyio.EndOfStream, anyio.ClosedResourceError, OSError):
                        return
                    pending += chunk
                    while (end := pending.find(b"\n")) != -1:
                        if end > limit:
                            break
                        line = bytes(pending[:end])
                        del pending[: end + 1]
                        await to_session.send(_message(line, params.encoding))
                    if len(pending) > limit:
                        # Closing the session's stream fails the waiting request now.
                        over(f"a message of more than {limit} bytes")
                        return

    async def write() -> None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            async with from_session:
                async for message in from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send((data + "\n").encode(params.encoding, errors="replace"))

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            tg.start_soon(write)
            try:
                yield read_stream, write_stream
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process)
            for stream in (read_stream, write_stream):
                await stream.aclose()


async def _stop(process: Process) -> None:
    """Close its stdin, give it `STOP_GRACE_S` to exit, then stop its whole process group."""
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        if process.stdin is not None:
            await process.stdin.aclose()
    with anyio.move_on_after(STOP_GRACE_S):
        while process.returncode is None:
            await anyio.sleep(0.01)
    if process.returncode is None and os.name == "posix":
        await terminate_posix_process_tree(process)
    elif process.returncode is None:
        process.kill()
    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.aclose()
