"""The example workflow's system of record: a tiny transfers ledger that honours idempotency keys
and can be told to misbehave exactly the way real payment APIs do.

It lives in an SQLite file (standard library `sqlite3`), so worker processes, the CLI and tests
share one ledger and can count effects across crashes and broker flushes.

Faults (armed per operation, consumed one per call):
- `drop_after_commit`: the transfer is committed, then the response is lost (ConnectionError);
- `timeout`: the transfer is committed after `delay_s`, and the caller has stopped waiting
  (TimeoutError);
- `slow`: the call takes `delay_s` and then succeeds (long enough to kill a worker mid-call,
  before the ledger commits);
- `hang_after_commit`: the ledger commits, then the call takes `delay_s` to answer (kill the
  worker in that window and the effect exists but nobody recorded it);
- `fail`: a definitive refusal, nothing committed;
- `error`: a transient error before anything is committed;
- `throttle`: refused under load before anything is committed, come back after `delay_s`
  (`BackendThrottled`, the ledger's 429 + Retry-After).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agent_jobs.config import load_settings

Fault = Literal[
    "drop_after_commit", "timeout", "slow", "hang_after_commit", "fail", "error", "throttle"
]
Operation = Literal["transfer", "lookup", "read"]

DEFAULT_PATH_ENV = "AGENT_JOBS_EXAMPLE_BACKEND"


class BackendRejected(Exception):
    """The ledger refused the transfer; nothing was committed."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class BackendUnavailable(Exception):
    """A transient error before anything was committed."""


class BackendThrottled(BackendUnavailable):
    """Refused under load before anything was committed; try again after `retry_after_s`.

    A `BackendUnavailable`, so a caller that does not know throttling still sees "nothing was
    committed"; one that does can wait the delay instead of guessing."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(f"ledger busy; retry after {retry_after_s:g} s")
        self.retry_after_s = retry_after_s


class KeyReused(BackendRejected):
    def __init__(self) -> None:
        super().__init__("idempotency_key_reused")


@dataclass(frozen=True)
class Transfer:
    transfer_id: str
    idempotency_key: str
    account: str
    amount_minor: int
    currency: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "transfer_id": self.transfer_id,
            "idempotency_key": self.idempotency_key,
            "account": self.account,
            "amount_minor": self.amount_minor,
            "currency": self.currency,
        }


def default_path() -> str:
    return load_settings().example_backend  # read now: tests point it at their own file


class ExampleBackend:
    """A transfers ledger in an SQLite file; safe across threads and processes."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = str(path or default_path())
        self._local = threading.local()
        with self._tx() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS transfers (transfer_id TEXT PRIMARY KEY,"
                " idempotency_key TEXT UNIQUE NOT NULL, account TEXT NOT NULL,"
                " amount_minor INTEGER NOT NULL, currency TEXT NOT NULL, calls INTEGER NOT NULL)"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS faults (seq INTEGER PRIMARY KEY AUTOINCREMENT,"
                " operation TEXT NOT NULL, fault TEXT NOT NULL, delay_s REAL NOT NULL)"
            )
            db.execute("CREATE TABLE IF NOT EXISTS calls (operation TEXT, key TEXT, at REAL)")

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None or getattr(self._local, "pid", None) != os.getpid():
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA busy_timeout=30000")
            self._local.db = db
            self._local.pid = os.getpid()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    # -- faults ----------------------------------------------------------------------------

    def arm(
        self, operation: Operation, fault: Fault, *, times: int = 1, delay_s: float = 0.0
    ) -> None:
        with self._tx() as db:
            for _ in range(times):
                db.execute(
                    "INSERT INTO faults (operation, fault, delay_s) VALUES (?, ?, ?)",
                    (operation, fault, delay_s),
                )

    def disarm(self) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM faults")

    def _take_fault(self, operation: Operation, key: str) -> tuple[str, float] | None:
        with self._tx() as db:
            db.execute("INSERT INTO calls VALUES (?, ?, ?)", (operation, key, time.time()))
            row = db.execute(
                "SELECT seq, fault, delay_s FROM faults WHERE operation = ? ORDER BY seq LIMIT 1",
                (operation,),
            ).fetchone()
            if row is None:
                return None
            db.execute("DELETE FROM faults WHERE seq = ?", (row[0],))
            return str(row[1]), float(row[2])

    # -- the API ---------------------------------------------------------------------------

    def transfer(self, key: str, account: str, amount_minor: int, currency: str) -> Transfer:
        """Create a transfer, or return the one this key already created (same arguments only)."""
        fault = self._take_fault("transfer", key)
        if fault is not None:
            kind, delay = fault
            if kind == "fail":
                raise BackendRejected("insufficient_funds")
            if kind == "error":
                raise BackendUnavailable("ledger unavailable")
            if kind == "throttle":
                raise BackendThrottled(delay)
            if kind in ("slow", "timeout"):
                time.sleep(delay)
        result = self._commit_transfer(key, account, amount_minor, currency)
        if fault is not None and fault[0] == "hang_after_commit":
            time.sleep(fault[1])
        if fault is not None and fault[0] == "drop_after_commit":
            raise ConnectionError("connection reset after the ledger committed")
        if fault is not None and fault[0] == "timeout":
            raise TimeoutError("the caller stopped waiting; the ledger committed anyway")
        return result

    def _commit_transfer(
        self, key: str, account: str, amount_minor: int, currency: str
    ) -> Transfer:
        with self._tx() as db:
            row = db.execute(
                "SELECT transfer_id, account, amount_minor, currency FROM transfers"
                " WHERE idempotency_key = ?",
                (key,),
            ).fetchone()
            if row is not None:
                if (row[1], row[2], row[3]) != (account, amount_minor, currency):
                    raise KeyReused()
                db.execute(
                    "UPDATE transfers SET calls = calls + 1 WHERE idempotency_key = ?", (key,)
                )
                return Transfer(row[0], key, row[1], row[2], row[3])
            count = db.execute("SELECT COUNT(*) FROM transfers").fetchone()[0]
            transfer_id = f"tr_{1001 + count}"
            db.execute(
                "INSERT INTO transfers VALUES (?, ?, ?, ?, ?, 1)",
                (transfer_id, key, account, amount_minor, currency),
            )
            return Transfer(transfer_id, key, account, amount_minor, currency)

    def lookup(self, key: str) -> Transfer | None:
        """The reconcile read: the transfer this idempotency key created, if any."""
        fault = self._take_fault("lookup", key)
        if fault is not None:
            if fault[0] == "throttle":
                raise BackendThrottled(fault[1])
            if fault[0] in ("slow", "timeout"):
                time.sleep(fault[1])
            if fault[0] in ("error", "fail", "timeout"):
                raise BackendUnavailable("ledger lookup unavailable")
        with self._tx() as db:
            row = db.execute(
                "SELECT transfer_id, account, amount_minor, currency FROM transfers"
                " WHERE idempotency_key = ?",
                (key,),
            ).fetchone()
        return Transfer(row[0], key, row[1], row[2], row[3]) if row else None

    def read_account(self, account: str) -> dict[str, Any]:
        """A read the workflow makes before acting (can be faulted with `error`)."""
        fault = self._take_fault("read", account)
        if fault is not None:
            if fault[0] == "throttle":
                raise BackendThrottled(fault[1])
            if fault[0] in ("slow", "timeout"):
                time.sleep(fault[1])
            if fault[0] in ("error", "fail"):
                raise BackendUnavailable("account service unavailable")
        with self._tx() as db:
            sent = db.execute(
                "SELECT COALESCE(SUM(amount_minor), 0) FROM transfers WHERE account = ?", (account,)
            ).fetchone()[0]
        return {"account": account, "transferred_minor": int(sent), "status": "open"}

    # -- for checks ------------------------------------------------------------------------

    def transfers(self) -> list[Transfer]:
        with self._tx() as db:
            rows = db.execute(
                "SELECT transfer_id, idempotency_key, account, amount_minor, currency"
                " FROM transfers ORDER BY transfer_id"
            ).fetchall()
        return [Transfer(*r) for r in rows]

    def calls(self, operation: Operation) -> int:
        with self._tx() as db:
            return int(
                db.execute(
                    "SELECT COUNT(*) FROM calls WHERE operation = ?", (operation,)
                ).fetchone()[0]
            )

    def summary(self) -> str:
        return json.dumps([t.as_dict() for t in self.transfers()])
