"""Armed faults: scripted failures the next matching requests will suffer.

A fault is armed for one operation and a number of requests (`times`). Each request routed to that
operation consumes one, whatever the request then turns out to be, so a test that arms one fault
knows exactly which request it hits: the next one. Faults for one operation are used oldest first.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from agent_jobs.sim.models import FaultKind, FaultRequest, Json


@dataclass
class Fault:
    fault_id: str
    operation: str
    kind: FaultKind
    times: int
    remaining: int
    delay_s: float | None
    retry_after: str | None = None

    def to_json(self) -> Json:
        return {
            "fault_id": self.fault_id,
            "operation": self.operation,
            "fault": self.kind,
            "times": self.times,
            "remaining": self.remaining,
            "delay_s": self.delay_s,
            "retry_after": self.retry_after,
        }


class FaultBoard:
    """The armed faults, thread-safe. `take` is the only consumer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._seq = 0

    def arm(self, request: FaultRequest) -> Fault:
        with self._lock:
            self._seq += 1
            fault = Fault(
                fault_id=f"flt_{self._seq}",
                operation=request.operation,
                kind=request.fault,
                times=request.times,
                remaining=request.times,
                delay_s=request.delay_s,
                retry_after=request.retry_after,
            )
            self._faults.append(fault)
            return _copy(fault)

    def take(self, operation: str) -> Fault | None:
        """Consume one armed fault for `operation`, if any, and return it (a copy) to apply."""
        with self._lock:
            for fault in self._faults:
                if fault.operation == operation:
                    fault.remaining -= 1
                    if fault.remaining == 0:
                        self._faults.remove(fault)
                    return _copy(fault)
            return None

    def armed(self) -> list[Fault]:
        with self._lock:
            return [_copy(f) for f in self._faults]

    def clear(self) -> int:
        """Disarm everything; returns how many faults were still armed."""
        with self._lock:
            n = len(self._faults)
            self._faults.clear()
            return n


def _copy(fault: Fault) -> Fault:
    # Callers get snapshots so they never read a `remaining` another thread is decrementing.
    return replace(fault)
