"""The helpdesk example's procurement system, as an MCP server: a quote for a device model, an
order of its replacement (once per idempotency key), and the order made under a key. Not part of
the agent's code: it stands for a vendor's MCP server.

    python examples/helpdesk/procurement.py             # over stdio (a worker spawns it per call)
    python examples/helpdesk/procurement.py http 8092   # over streamable HTTP, /mcp

Embedded, the agent's worker spawns it for each call, with only the variables it is given; with
`HELPDESK_PROCUREMENT_URL` set (`http://127.0.0.1:8092/mcp`), the agent calls that server.

Its orders live in an SQLite file named by `HELPDESK_PROCUREMENT_DB` (default
`helpdesk_procurement.sqlite3`). A fault can be armed (`arm`): `lost_answer` places the next
order, then answers only after the caller gave up. Runs on the MCP SDK alone (no agent_jobs).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

DB_ENV = "HELPDESK_PROCUREMENT_DB"
URL_ENV = "HELPDESK_PROCUREMENT_URL"
DEFAULT_DB = "helpdesk_procurement.sqlite3"
SCRIPT = Path(__file__).resolve()
LOST_ANSWER_S = 30.0  # longer than the agent's timeout for an order (15 s)
PRICES = {"ThinkPad T14 Gen 5": 1_290_00, "MacBook Pro 16 M4": 2_899_00}


@contextmanager
def _db() -> Iterator[sqlite3.Connection]:
    path = os.environ.get(DB_ENV, DEFAULT_DB)
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute(
            "CREATE TABLE IF NOT EXISTS orders (key TEXT PRIMARY KEY, order_id TEXT,"
            " device_id TEXT, model TEXT, price_minor INTEGER, currency TEXT)"
        )
        db.execute("CREATE TABLE IF NOT EXISTS faults (seq INTEGER PRIMARY KEY, fault TEXT)")
        db.execute("CREATE TABLE IF NOT EXISTS calls (tool TEXT, key TEXT)")
        yield db
        db.execute("COMMIT")
    finally:
        db.close()


def arm(fault: str) -> None:
    with _db() as db:
        db.execute("INSERT INTO faults (fault) VALUES (?)", (fault,))


def orders(within: str = "") -> list[dict[str, Any]]:
    """Every order placed (under a key containing `within`), oldest first: the demo's check."""
    keys = ("order_id", "device_id", "model", "price_minor", "currency")
    with _db() as db:
        found = f"SELECT {', '.join(keys)} FROM orders WHERE instr(key, ?) ORDER BY rowid"
        rows = db.execute(found, (within,)).fetchall()
    return [dict(zip(keys, r, strict=True)) for r in rows]


def order_calls(within: str = "") -> int:
    """How many orders were asked for (under a key containing `within`), replays included."""
    with _db() as db:
        found = "SELECT count(*) FROM calls WHERE tool = 'order' AND instr(key, ?)"
        return int(db.execute(found, (within,)).fetchone()[0])


def _order(key: str) -> dict[str, Any] | None:
    with _db() as db:
        row = db.execute("SELECT order_id, device_id, model, price_minor, currency FROM orders"
                         " WHERE key = ?", (key,)).fetchone()  # fmt: skip
    keys = ("order_id", "device_id", "model", "price_minor", "currency")
    return None if row is None else dict(zip(keys, row, strict=True))


def main(argv: list[str]) -> None:
    from mcp.server.mcpserver import MCPServer  # noqa: PLC0415 - the server's process only

    server = MCPServer("helpdesk-procurement")

    @server.tool()
    def quote(model: str) -> dict[str, Any]:
        """The price of a new device of this model, in minor units of its currency."""
        price = PRICES.get(model)
        if price is None:
            return {"model": model, "available": False}
        return {"model": model, "available": True, "price_minor": price, "currency": "EUR"}

    @server.tool()
    async def order_replacement(device_id: str, model: str, price_minor: int, currency: str,
                                idempotency_key: str) -> dict[str, Any]:  # fmt: skip
        """Order a new device to replace `device_id`, at the quoted price (once per key)."""
        with _db() as db:
            db.execute("INSERT INTO calls VALUES ('order', ?)", (idempotency_key,))
            fault = db.execute("SELECT seq, fault FROM faults ORDER BY seq LIMIT 1").fetchone()
            if fault:
                db.execute("DELETE FROM faults WHERE seq = ?", (fault[0],))
            number = db.execute("SELECT count(*) FROM orders").fetchone()[0] + 1
            db.execute("INSERT OR IGNORE INTO orders VALUES (?, ?, ?, ?, ?, ?)",
                       (idempotency_key, f"PO-{number:04d}", device_id, model, price_minor,
                        currency))  # fmt: skip
        if fault and fault[1] == "lost_answer":
            await anyio.sleep(LOST_ANSWER_S)  # placed; the caller times out first
        return _order(idempotency_key) or {}

    @server.tool()
    def order_by_key(idempotency_key: str) -> dict[str, Any]:
        """The order placed under an idempotency key ({"found": null}: none)."""
        return {"found": _order(idempotency_key)}

    if argv[1:2] != ["http"]:
        server.run("stdio")
        return
    import uvicorn  # noqa: PLC0415

    logging.getLogger("mcp").setLevel(logging.WARNING)  # not a line per session

    uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=int(argv[2]),
                log_level="warning", timeout_graceful_shutdown=1)  # fmt: skip


if __name__ == "__main__":
    main(sys.argv)
