"""A log of every request the sim received, so tests assert on what the caller actually sent.

Entries are appended when a request arrives (outcome `in_flight`) and completed once its response
was written or dropped. Waiting on the log, rather than sleeping, is how a test learns that a
delayed request has finished its work: `wait_for(1, "refunds.create")` returns when it has.
"""

from __future__ import annotations

import hashlib
import threading
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Literal

from agent_jobs.sim.models import Json

Outcome = Literal["in_flight", "responded", "dropped", "disconnected"]


@dataclass
class LogEntry:
    seq: int
    received_at: str
    method: str
    path: str
    query: dict[str, str]
    operation: str | None
    idempotency_key: str | None
    authorization: bool
    authorization_sha256: str | None
    body: Any
    fault: str | None = None
    status: int | None = None
    error_code: str | None = None
    outcome: Outcome = "in_flight"

    def to_json(self) -> Json:
        return asdict(self)


def fingerprint(authorization: str | None) -> str | None:
    """A short digest of the Authorization header: tells credentials apart, cannot be replayed."""
    if authorization is None:
        return None
    return hashlib.sha256(authorization.encode()).hexdigest()[:16]


class RequestLog:
    """Thread-safe, bounded (oldest entries fall off past `limit`) and waitable."""

    def __init__(self, limit: int = 10_000) -> None:
        self._cond = threading.Condition()
        self._entries: deque[LogEntry] = deque(maxlen=limit)
        self._seq = 0
        self._in_flight = 0

    def begin(
        self,
        *,
        received_at: str,
        method: str,
        path: str,
        query: dict[str, str],
        operation: str | None,
        idempotency_key: str | None,
        authorization: str | None,
        body: Any,
    ) -> LogEntry:
        with self._cond:
            self._seq += 1
            self._in_flight += 1
            entry = LogEntry(
                seq=self._seq,
                received_at=received_at,
                method=method,
                path=path,
                query=query,
                operation=operation,
                idempotency_key=idempotency_key,
                authorization=authorization is not None,
                authorization_sha256=fingerprint(authorization),
                body=body,
            )
            self._entries.append(entry)
            return entry

    def finish(
        self,
        entry: LogEntry,
        *,
        outcome: Outcome,
        status: int | None,
        error_code: str | None,
        fault: str | None,
    ) -> None:
        with self._cond:
            entry.outcome = outcome
            entry.status = status
            entry.error_code = error_code
            entry.fault = fault
            self._in_flight -= 1
            self._cond.notify_all()

    def entries(self, operation: str | None = None) -> list[Json]:
        with self._cond:
            return [e.to_json() for e in self._entries if operation in (None, e.operation)]

    def wait_for(self, count: int, operation: str | None = None, timeout: float = 10.0) -> bool:
        """Block until `count` requests (for `operation`) have completed; False on timeout."""

        def done() -> bool:
            n = sum(
                1
                for e in self._entries
                if e.outcome != "in_flight" and operation in (None, e.operation)
            )
            return n >= count

        with self._cond:
            return self._cond.wait_for(done, timeout)

    def wait_idle(self, timeout: float) -> bool:
        """Block until no request is in flight; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._in_flight == 0, timeout)

    def clear(self) -> None:
        # In-flight requests keep their entry objects and still finish; they just are not listed.
        with self._cond:
            self._entries.clear()
            self._cond.notify_all()
