"""The helpdesk example's device management service (MDM): an HTTP API described by an OpenAPI
document (`SPEC`, also served at `/openapi.json`). Not part of the agent's code: it stands for
the MDM a company already runs. The agent imports its operations from the document.

    python -m examples.helpdesk.mdm 8091     # serves http://127.0.0.1:8091 until stopped

Its devices live in an SQLite file named by `HELPDESK_MDM_DB` (default `helpdesk_mdm.sqlite3`),
so the service, workers and tests see one system. A disable is applied once per
`Idempotency-Key`; `GET /disables?idempotency_key=` finds it (404: none). A fault can be armed:
`lost_answer` applies the next disable, then answers only after the caller gave up.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

DB_ENV = "HELPDESK_MDM_DB"
URL_ENV = "HELPDESK_MDM_URL"
LOST_ANSWER_S = 3.0  # longer than the agent's timeout for a disable
SEED = (("LT-100", "e.lind", "ThinkPad T14 Gen 5"), ("LT-200", "a.okafor", "MacBook Pro 16 M4"))

_ID = {"name": "device_id", "in": "path", "required": True,
       "schema": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}}  # fmt: skip
SPEC: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "Device management", "version": "1"},
    "paths": {
        "/devices/{device_id}": {
            "get": {"operationId": "getDevice", "parameters": [_ID],
                    "summary": "Read a device: its model, who it is assigned to, its status."},
        },
        "/devices/{device_id}/disable": {
            "post": {
                "operationId": "disableDevice", "parameters": [_ID],
                "summary": "Disable a device (locked, wiped at next check-in, sign-in refused).",
                "requestBody": {"content": {"application/json": {"schema": {
                    "type": "object", "required": ["reason"],
                    "properties": {"reason": {"type": "string", "maxLength": 200}}}}}},
            },
        },
        "/disables": {
            "get": {"operationId": "getDisable", "summary": "The disable made under a key.",
                    "parameters": [{"name": "idempotency_key", "in": "query", "required": True,
                                    "schema": {"type": "string"}}]},
        },
    },
}  # fmt: skip


class Mdm:
    """The service's records (one SQLite transaction per call: safe across threads/processes)."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path or os.environ.get(DB_ENV, "helpdesk_mdm.sqlite3")
        with self._db() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS devices (device_id TEXT PRIMARY KEY,"
                " assigned_to TEXT, model TEXT, status TEXT)"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS disables (key TEXT PRIMARY KEY,"
                " device_id TEXT, reason TEXT)"
            )
            db.execute("CREATE TABLE IF NOT EXISTS faults (seq INTEGER PRIMARY KEY, fault TEXT)")
            db.execute("CREATE TABLE IF NOT EXISTS calls (operation TEXT)")
            db.executemany("INSERT OR IGNORE INTO devices VALUES (?, ?, ?, 'active')", SEED)

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        """One transaction (taking the write lock at once), then the connection is closed."""
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            yield db
            db.execute("COMMIT")
        finally:
            db.close()

    def device(self, device_id: str) -> dict[str, Any] | None:
        with self._db() as db:
            row = db.execute("SELECT device_id, assigned_to, model, status FROM devices"
                             " WHERE device_id = ?", (device_id,)).fetchone()  # fmt: skip
        return None if row is None else dict(zip(("device_id", "assigned_to", "model",
                                                  "status"), row, strict=True))  # fmt: skip

    def disable(self, key: str, device_id: str, reason: str) -> tuple[dict[str, Any] | None, str]:
        """The disable under `key` (applied once), and the fault armed for this call."""
        with self._db() as db:
            db.execute("INSERT INTO calls VALUES ('disable')")
            fault = db.execute("SELECT seq, fault FROM faults ORDER BY seq LIMIT 1").fetchone()
            if fault:
                db.execute("DELETE FROM faults WHERE seq = ?", (fault[0],))
            if db.execute("SELECT 1 FROM devices WHERE device_id = ?", (device_id,)).fetchone():
                db.execute(
                    "INSERT OR IGNORE INTO disables VALUES (?, ?, ?)", (key, device_id, reason)
                )
                off = "UPDATE devices SET status = 'disabled' WHERE device_id = ?"
                db.execute(off, (device_id,))
        return self.found(key), fault[1] if fault else ""

    def found(self, key: str) -> dict[str, Any] | None:
        with self._db() as db:
            found = "SELECT device_id, reason FROM disables WHERE key = ?"
            row = db.execute(found, (key,)).fetchone()
        if row is None:
            return None
        return {"device_id": row[0], "reason": row[1], "status": "disabled"}

    def arm(self, fault: str) -> None:
        with self._db() as db:
            db.execute("INSERT INTO faults (fault) VALUES (?)", (fault,))

    def disable_calls(self) -> int:
        with self._db() as db:
            return int(db.execute("SELECT count(*) FROM calls").fetchone()[0])

    def disabled(self) -> list[str]:
        with self._db() as db:
            return [r[0] for r in db.execute("SELECT device_id FROM disables ORDER BY device_id")]


class _Handler(BaseHTTPRequestHandler):
    mdm: Mdm

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/openapi.json":
            return self._answer(200, SPEC)
        if url.path == "/disables":
            key = (parse_qs(url.query).get("idempotency_key") or [""])[0]
            found = self.mdm.found(key)
            return self._answer(200, found) if found else self._answer(404, {"error": "none"})
        parts = url.path.strip("/").split("/")
        found = self.mdm.device(parts[1]) if len(parts) == 2 and parts[0] == "devices" else None
        return self._answer(200, found) if found else self._answer(404, {"error": "no device"})

    def do_POST(self) -> None:
        parts = urlsplit(self.path).path.strip("/").split("/")
        key = self.headers.get("Idempotency-Key") or ""
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if len(parts) != 3 or parts[2] != "disable" or not key:
            return self._answer(400, {"error": "a disable with an Idempotency-Key"})
        done, fault = self.mdm.disable(key, parts[1], str(body.get("reason", "")))
        if fault == "lost_answer":
            time.sleep(LOST_ANSWER_S)  # applied; the caller times out first
        return self._answer(200, done) if done else self._answer(404, {"error": "no device"})

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        # The caller may have given up (a lost answer): a real service shrugs too.
        with suppress(BrokenPipeError):
            self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(port: int = 0, mdm: Mdm | None = None) -> ThreadingHTTPServer:
    """Serve on 127.0.0.1:`port` (0: a free one) in a daemon thread; `shutdown()` ends it."""
    handler = type("Handler", (_Handler,), {"mdm": mdm or Mdm()})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


if __name__ == "__main__":
    served = serve(int(sys.argv[1]) if len(sys.argv) > 1 else 8091)
    print(f"MDM at http://127.0.0.1:{served.server_address[1]} (export {URL_ENV}=that)")
    threading.Event().wait()
