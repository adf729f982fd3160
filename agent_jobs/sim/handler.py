"""The HTTP edge: bytes in, `Request` to the app, `Response` out, or nothing at all.

`http.server` is used because dropping a response is natural there: the handler returns without
writing and the connection is closed, which the caller sees as a connection error after the work
was committed; exactly the ambiguity the platform's reconcile path exists for.
"""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from agent_jobs.sim.errors import SimError
from agent_jobs.sim.messages import Request, Response
from agent_jobs.sim.request_log import Outcome

if TYPE_CHECKING:
    from agent_jobs.sim.app import SimApp

MAX_BODY_BYTES = 8 * 1024 * 1024


class SimHTTPServer(ThreadingHTTPServer):
    """A threading HTTP server carrying the app its handlers serve."""

    daemon_threads = True
    # socketserver's default backlog of 5 resets a burst of concurrent callers before accept().
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], app: SimApp, *, access_log: bool = False) -> None:
        self.app = app
        self.access_log = access_log
        super().__init__(address, SimRequestHandler)


class SimRequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "agent-jobs-sim/1"
    # An idle keep-alive connection is closed after this long, so its thread does not live forever.
    timeout = 60

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def log_message(self, format: str, *args: object) -> None:
        if self._sim_server().access_log:
            sys.stderr.write(f"sim {self.address_string()} {format % args}\n")

    def _sim_server(self) -> SimHTTPServer:
        server = self.server
        assert isinstance(server, SimHTTPServer)
        return server

    def _dispatch(self) -> None:
        app = self._sim_server().app
        split = urlsplit(self.path)
        body, framing_error = self._read_body()
        request = Request(
            method=self.command,
            path=split.path,
            query=parse_qs(split.query, keep_blank_values=True),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            framing_error=framing_error,
        )
        response, entry = app.handle(request)
        outcome: Outcome = "disconnected"
        try:
            outcome = self._write(response)
        finally:
            app.log.finish(
                entry,
                outcome=outcome,
                status=None if response.drop else response.status,
                error_code=response.error_code,
                fault=response.fault,
            )

    def _read_body(self) -> tuple[bytes, SimError | None]:
        encoding = self.headers.get("Transfer-Encoding")
        if encoding is not None:
            if encoding.strip().lower() != "chunked":
                return b"", SimError(
                    400, "invalid_body", f"unsupported Transfer-Encoding {encoding!r}"
                )
            # Read it all even to refuse it: closing on unread bytes makes the kernel reset the
            # connection, and the caller might lose the error response to the reset.
            try:
                return self._read_chunked()
            except (OSError, ValueError) as e:
                return b"", SimError(400, "invalid_body", f"malformed chunked body: {e}")
        raw = self.headers.get("Content-Length")
        if raw is None:
            return b"", None
        if not raw.strip().isdigit():
            return b"", SimError(400, "invalid_body", f"bad Content-Length {raw!r}")
        length = int(raw)
        if length > MAX_BODY_BYTES:
            return b"", SimError(
                413, "body_too_large", f"body of {length} bytes exceeds {MAX_BODY_BYTES}"
            )
        try:
            return self.rfile.read(length), None
        except OSError as e:
            return b"", SimError(400, "invalid_body", f"body could not be read: {e}")

    def _read_chunked(self) -> tuple[bytes, SimError | None]:
        body = bytearray()
        too_large = False
        while True:
            size = int(self.rfile.readline(1024).split(b";")[0].strip(), 16)
            if size == 0:
                break
            chunk = self.rfile.read(size)
            if len(chunk) != size:
                raise ValueError("connection closed inside a chunk")
            too_large = too_large or len(body) + size > MAX_BODY_BYTES
            if not too_large:
                body += chunk
            self.rfile.readline(1024)  # the CRLF that ends the chunk
        while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
            pass  # trailer fields, ignored
        if too_large:
            return b"", SimError(413, "body_too_large", f"body exceeds {MAX_BODY_BYTES} bytes")
        return bytes(body), None

    def _write(self, response: Response) -> Outcome:
        if response.drop:
            # Nothing is written; returning with close_connection set makes the server shut the
            # socket, and the client sees the connection end without a response.
            self.close_connection = True
            return "dropped"
        payload = json.dumps(response.body).encode()
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in response.headers.items():
                self.send_header(name, value)
            if response.close:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
        except OSError:
            # The caller gave up (timed out, closed): the work stands, only the answer is lost.
            self.close_connection = True
            return "disconnected"
        return "responded"
