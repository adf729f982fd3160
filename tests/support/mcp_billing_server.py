"""A billing MCP server for the tests of how an agent stores what an MCP tool answered and how a
lookup by key says "not found" (each documented way), over streamable HTTP.

    python tests/support/mcp_billing_server.py PORT STATE_DIR

State (credits by idempotency key, every call, switches) lives in a SQLite file in STATE_DIR.
Switches: `lose_answer_s` (the credit is applied, the answer comes after this many seconds),
`drop_first_s` (the next credit call is received, not applied, and answered after this many
seconds: its outcome is unknown to the caller, and nothing exists under its key), and
`not_found` (how `find_credit` says there is none: `structured` `{"found": null}`, `text`
an `isError` result whose text starts with `not_found`, `code` an `isError` result with
structured content `{"code": "not_found"}`, or `other` an `isError` that is not a not-found).
"""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent

_STATE: dict[str, Path] = {}
server = MCPServer("mcp-test-billing")


def db(state_dir: Path | str) -> sqlite3.Connection:
    conn = sqlite3.connect(Path(state_dir) / "billing.sqlite", timeout=10, isolation_level=None)
    conn.execute("CREATE TABLE IF NOT EXISTS calls (tool TEXT, args TEXT)")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS credits (key TEXT PRIMARY KEY, credit_id TEXT,"
        " account_id TEXT, amount_minor INT)"
    )
    conn.execute("CREATE TABLE IF NOT EXISTS flags (name TEXT PRIMARY KEY, value TEXT)")
    return conn


def calls(state_dir: Path | str) -> list[tuple[str, dict[str, Any]]]:
    conn = db(state_dir)
    try:
        rows = conn.execute("SELECT tool, args FROM calls ORDER BY rowid").fetchall()
    finally:
        conn.close()
    return [(t, json.loads(a)) for t, a in rows]


def credits(state_dir: Path | str, key: str) -> int:
    conn = db(state_dir)
    try:
        return int(conn.execute("SELECT count(*) FROM credits WHERE key = ?", (key,)).fetchone()[0])
    finally:
        conn.close()


def set_flag(state_dir: Path | str, name: str, value: str) -> None:
    conn = db(state_dir)
    try:
        conn.execute("INSERT OR REPLACE INTO flags VALUES (?, ?)", (name, value))
    finally:
        conn.close()


def _flag(conn: sqlite3.Connection, name: str) -> str:
    row = conn.execute("SELECT value FROM flags WHERE name = ?", (name,)).fetchone()
    return "" if row is None else str(row[0])


def _found(conn: sqlite3.Connection, key: str) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT credit_id, account_id, amount_minor FROM credits WHERE key = ?", (key,)
    ).fetchone()
    return None if row is None else {"credit_id": row[0], "account_id": row[1],
                                     "amount_minor": row[2]}  # fmt: skip


@server.tool()
def get_account(account_id: str) -> dict[str, Any]:
    """Read one account."""
    conn = db(_STATE["dir"])
    conn.execute("INSERT INTO calls VALUES ('get_account', ?)", (json.dumps([account_id]),))
    conn.close()
    return {"account_id": account_id, "overcharged_minor": 1500, "currency": "USD"}


@server.tool()
async def create_credit(account_id: str, amount_minor: int, idempotency_key: str) -> dict[str, Any]:
    """Credit an account (once per idempotency key)."""
    conn = db(_STATE["dir"])
    try:
        args = {"account_id": account_id, "amount_minor": amount_minor, "key": idempotency_key}
        conn.execute("INSERT INTO calls VALUES ('create_credit', ?)", (json.dumps(args),))
        drop = _flag(conn, "drop_first_s")
        if drop:
            conn.execute("DELETE FROM flags WHERE name = 'drop_first_s'")
        elif _found(conn, idempotency_key) is None:
            n = conn.execute("SELECT count(*) FROM credits").fetchone()[0] + 1
            conn.execute(
                "INSERT INTO credits VALUES (?, ?, ?, ?)",
                (idempotency_key, f"cr_{n}", account_id, amount_minor),
            )
        done = _found(conn, idempotency_key)
        slow = drop or _flag(conn, "lose_answer_s")
    finally:
        conn.close()
    if slow:
        await anyio.sleep(float(slow))  # on the event loop: stopping the server does not wait
    if done is None:
        raise ToolError("the credit was not made")
    return done


def _answer(value: dict[str, Any], *, error: bool = False) -> CallToolResult:
    text = TextContent(type="text", text=json.dumps(value))
    return CallToolResult(content=[text], structured_content=value, is_error=error)


@server.tool()
def find_credit(idempotency_key: str) -> CallToolResult:
    """Find the credit made under an idempotency key (reconciliation)."""
    conn = db(_STATE["dir"])
    try:
        args = json.dumps({"key": idempotency_key})
        conn.execute("INSERT INTO calls VALUES ('find_credit', ?)", (args,))
        done = _found(conn, idempotency_key)
        way = _flag(conn, "not_found")
    finally:
        conn.close()
    if done is not None:
        return _answer({"found": True, **done})
    if way == "text":
        raise ToolError("not_found: no credit under that key")
    if way == "code":
        return _answer({"code": "not_found", "message": "no credit"}, error=True)
    if way == "other":
        return _answer({"code": "ledger_unavailable"}, error=True)
    return _answer({"found": None})


class BillingServer:
    """This server over streamable HTTP on a free loopback port, stopped by its pid."""

    def __init__(self, state_dir: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._log = open(state_dir / "billing.log", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), str(self.port), str(state_dir)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"billing server exited with {self.proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("billing server did not start listening") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


if __name__ == "__main__":
    import uvicorn

    _STATE["dir"] = Path(sys.argv[2])
    uvicorn.run(
        server.streamable_http_app(),
        host="127.0.0.1",
        port=int(sys.argv[1]),
        log_level="warning",
        timeout_graceful_shutdown=1,
    )
