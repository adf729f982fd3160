"""The row a step message may carry: signed, so that only agent_jobs can have written it.

When a quick step's commit leaves the task ready for another quick step, the orchestrator hands
the new row to the next step's message (`Dispatch.row`), which then starts from it instead of
reading it (`Orchestrator.run_step`). Whoever can write to the broker could otherwise hand a step
a row of their choosing: the compare-and-set would find the version it names and commit a
transition computed from forged state. So the row travels as the exact JSON text that an
HMAC-SHA256 covers, with a key made on first use and kept in Postgres (`signing_keys`), which
every worker reads and the broker never sees. A message whose row is missing, too long,
malformed, forged or for another task simply has its step start from a read, as before.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from typing import Any

from agent_jobs.store import Store, TaskRow
from agent_jobs.store.rows import task_from_json, task_to_json

log = logging.getLogger(__name__)

KEY_NAME = "step_rows"
# What a step message carries instead of a row when the next step needs a lease (`Dispatch.claim`):
# claim at once, no read first. Unsigned: a claim is safe whoever asks for it.
CLAIM_HINT: dict[str, Any] = {"claim": 1}


def is_claim_hint(carried: Any) -> bool:
    return isinstance(carried, dict) and carried.get("claim") == 1


KEY_RETRY_S = 30.0


class CarriedRows:
    """Signs rows into step messages and checks them out again."""

    def __init__(self, store: Store, max_bytes: int) -> None:
        self.store = store
        self.max_bytes = max_bytes
        self._key: bytes | None = None
        self._retry_at = 0.0  # after a failed fetch, when to ask the database again
        self._lock = threading.Lock()

    def _signing_key(self) -> bytes | None:
        if self._key is None and time.monotonic() >= self._retry_at:
            with self._lock:
                if self._key is None and time.monotonic() >= self._retry_at:
                    try:
                        self._key = self.store.signing_key(KEY_NAME)
                    except Exception:
                        # The database is down, or not migrated to 0010: meanwhile every step
                        # reads its row, as before; asked again later, not at every step.
                        self._retry_at = time.monotonic() + KEY_RETRY_S
                        log.warning(
                            "no signing key for carried rows; steps read their rows "
                            "(retried in %.0f s)", KEY_RETRY_S, exc_info=True,
                        )  # fmt: skip
        return self._key

    def _sign(self, key: bytes, text: str) -> str:
        # surrogatepass: a forged text may hold lone surrogates; it must fail the check, not raise.
        return hmac.new(key, text.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()

    def encode(self, row: TaskRow) -> dict[str, str] | None:
        """The message's part for `row`, or None (too long, no key, not encodable)."""
        if self.max_bytes <= 0:
            return None
        key = self._signing_key()
        if key is None:
            return None
        try:
            text = task_to_json(row)
        except (TypeError, ValueError):
            return None
        if len(text.encode("utf-8")) > self.max_bytes:
            return None
        return {"row": text, "sig": self._sign(key, text)}

    def decode(self, carried: Any, task_id: str) -> TaskRow | None:
        """The row a message carried, if agent_jobs signed it for `task_id`; None otherwise."""
        if not isinstance(carried, dict):
            return None
        text, sig = carried.get("row"), carried.get("sig")
        if not isinstance(text, str) or not isinstance(sig, str) or not sig.isascii():
            return None
        if len(text) > max(self.max_bytes, 0) * 4 + 1024:
            return None  # bounded before hashing: a message may be megabytes
        key = self._signing_key()
        if key is None or not hmac.compare_digest(self._sign(key, text), sig):
            return None
        try:
            row = task_from_json(text)
        except (ValueError, KeyError, TypeError):
            return None
        return row if row.id == task_id else None
