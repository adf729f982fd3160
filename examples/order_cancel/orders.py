"""The example's business system: an orders service that cancels an order (refunding it) under an
idempotency key, and finds a cancellation by its key. Not part of the agent's code: it stands
for the orders API a team already has.

It lives in an SQLite file named by `ORDER_CANCEL_DB` (default `order_cancel.sqlite3` in the
working directory), so API, workers and tests in different processes see one system. Faults can
be armed to behave as real services do: `timeout_after_commit` cancels, then makes the caller
wait past its timeout (`TimeoutError`: the caller cannot know it happened); `unavailable` refuses
before doing anything.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agent_jobs.agents import ToolRejected

DB_ENV = "ORDER_CANCEL_DB"
SEED = (
    ("A-100", "open", 4900, "EUR"),
    ("A-200", "open", 25000, "EUR"),
    ("A-300", "shipped", 1500, "EUR"),
)


class Orders:
    """The orders API. Safe across threads and processes (one SQLite transaction per call)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._local = threading.local()
        with self._tx() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS orders (order_id TEXT PRIMARY KEY, status TEXT,"
                " amount_minor INTEGER, currency TEXT)"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS cancellations (idempotency_key TEXT PRIMARY KEY,"
                " cancellation_id TEXT, order_id TEXT, refunded_minor INTEGER, currency TEXT)"
            )
            db.execute("CREATE TABLE IF NOT EXISTS faults (seq INTEGER PRIMARY KEY, fault TEXT)")
            db.execute("CREATE TABLE IF NOT EXISTS calls (operation TEXT)")
            db.executemany("INSERT OR IGNORE INTO orders VALUES (?, ?, ?, ?)", SEED)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None or getattr(self._local, "pid", None) != os.getpid():
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            self._local.db, self._local.pid = db, os.getpid()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def arm(self, fault: str, times: int = 1) -> None:
        """Make the next `times` cancels misbehave (`timeout_after_commit`, `unavailable`)."""
        with self._tx() as db:
            db.executemany("INSERT INTO faults (fault) VALUES (?)", [(fault,)] * times)

    def get(self, order_id: str) -> dict[str, Any]:
        with self._tx() as db:
            row = db.execute("SELECT * FROM orders WHERE order_id = ?", (order_id,)).fetchone()
        if row is None:
            raise ToolRejected("order_not_found", f"no order {order_id}")
        return {"order_id": row[0], "status": row[1], "amount_minor": row[2], "currency": row[3]}

    def cancel(
        self, order_id: str, amount_minor: int, currency: str, *, key: str
    ) -> dict[str, Any]:
        """Cancel and refund `order_id`, once per key: the same key again answers the same."""
        with self._tx() as db:
            db.execute("INSERT INTO calls VALUES ('cancel')")
            fault = db.execute("SELECT seq, fault FROM faults ORDER BY seq LIMIT 1").fetchone()
            if fault is not None:
                db.execute("DELETE FROM faults WHERE seq = ?", (fault[0],))
        if fault is not None and fault[1] == "unavailable":
            raise ToolRejected("unavailable", "orders service is down", transient=True)
        with self._tx() as db:
            done = self._by_key(db, key)
            if done is None:
                order = db.execute(
                    "SELECT status, amount_minor, currency FROM orders WHERE order_id = ?",
                    (order_id,),
                ).fetchone()
                if order is None or order[0] != "open":
                    raise ToolRejected("not_cancellable", f"order {order_id} is not open")
                if (order[1], order[2]) != (amount_minor, currency):
                    raise ToolRejected("amount_mismatch", "the refund must be the order's total")
                count = db.execute("SELECT COUNT(*) FROM cancellations").fetchone()[0]
                db.execute("UPDATE orders SET status = 'cancelled' WHERE order_id = ?", (order_id,))
                db.execute(
                    "INSERT INTO cancellations VALUES (?, ?, ?, ?, ?)",
                    (key, f"cx_{101 + count}", order_id, amount_minor, currency),
                )
                done = self._by_key(db, key)
        if fault is not None and fault[1] == "timeout_after_commit":
            raise TimeoutError("the orders service did not answer in time (it had cancelled)")
        assert done is not None
        return done

    def find_cancellation(self, key: str) -> dict[str, Any] | None:
        """The cancellation made under `key`, or None."""
        with self._tx() as db:
            return self._by_key(db, key)

    @staticmethod
    def _by_key(db: sqlite3.Connection, key: str) -> dict[str, Any] | None:
        row = db.execute(
            "SELECT cancellation_id, order_id, refunded_minor, currency FROM cancellations"
            " WHERE idempotency_key = ?",
            (key,),
        ).fetchone()
        if row is None:
            return None
        return {"cancellation_id": row[0], "order_id": row[1], "refunded_minor": row[2],
                "currency": row[3], "status": "cancelled"}  # fmt: skip

    def cancel_calls(self) -> int:
        with self._tx() as db:
            return int(db.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def cancellations(self) -> list[dict[str, Any]]:
        with self._tx() as db:
            keys = [r[0] for r in db.execute("SELECT idempotency_key FROM cancellations")]
            return [c for k in keys if (c := self._by_key(db, k)) is not None]


_services: dict[str, Orders] = {}
_lock = threading.Lock()


def orders() -> Orders:
    """The orders service at `ORDER_CANCEL_DB` (read at each call: tests point it elsewhere)."""
    path = os.environ.get(DB_ENV) or "order_cancel.sqlite3"
    with _lock:
        if path not in _services:
            _services[path] = Orders(path)
        return _services[path]
