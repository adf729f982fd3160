"""A real HTTP receiver on 127.0.0.1 for the webhook tests: it records what arrived, answers
with the status the test sets, and verifies each message with `standardwebhooks` unchanged."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def msg_id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def payload(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed


@dataclass
class Receiver:
    url: str
    status: int = 204
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def verified(self, secret: str) -> list[dict[str, Any]]:
        """Every message that arrived (answered 2xx or not), verified with `secret`."""
        wh = Webhook(secret)
        with self.lock:
            return [wh.verify(r.body, r.headers) for r in self.received]

    def accepted(self) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.headers.get("x-answered") == "ok"]


@contextmanager
def receiver(path: str = "/hooks") -> Iterator[Receiver]:
    rec = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            size = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(size)
            headers = {k.lower(): v for k, v in self.headers.items()}
            status = rec.status
            headers["x-answered"] = "ok" if 200 <= status < 300 else str(status)
            with rec.lock:
                rec.received.append(Received(headers, body))
            self.send_response(status)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    rec.url = f"http://127.0.0.1:{server.server_address[1]}{path}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()
