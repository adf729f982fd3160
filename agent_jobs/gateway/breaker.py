"""A circuit breaker per model target, on an injected clock.

closed --(N failures within window_s)--> open --(half_open_after_s)--> half-open: one probe
call is let through while every other call fails fast; the probe's success closes the breaker,
its failure re-opens it for another half_open_after_s.

Failures are counted in a sliding window regardless of successes in between, as the route
config reads ("5 failures in 30 s"). Each permit carries the breaker's generation: a result
that arrives after the state changed (a slow call started while closed finishing during the
probe) is ignored, so only the probe decides whether a half-open breaker closes.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass
from enum import StrEnum

from agent_jobs.core.clock import Clock
from agent_jobs.gateway.errors import ModelUnavailable
from agent_jobs.gateway.routes import BreakerConfig

log = logging.getLogger(__name__)


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True)
class Permit:
    """Leave to make one call; hand it back with `record_success` / `record_failure`."""

    generation: int
    probe: bool


class CircuitBreaker:
    """Thread-safe breaker. `acquire()` raises `ModelUnavailable("breaker_open")` when the call
    must not be made; otherwise the caller must report the outcome with the returned permit."""

    def __init__(self, config: BreakerConfig, clock: Clock, name: str = "") -> None:
        self._cfg = config
        self._clock = clock
        self.name = name
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._generation = 0
        self._failures: deque[float] = deque()
        self._opened_at = 0.0
        self._probe_out = False

    @property
    def state(self) -> BreakerState:
        """The state as of now (an open breaker whose wait has elapsed reads as half-open)."""
        with self._lock:
            if self._state is BreakerState.OPEN and self._probe_due():
                return BreakerState.HALF_OPEN
            return self._state

    def acquire(self) -> Permit:
        """A permit for one call, or `ModelUnavailable` (breaker_open) to fail fast."""
        with self._lock:
            if self._state is BreakerState.CLOSED:
                return Permit(self._generation, probe=False)
            if self._state is BreakerState.OPEN and self._probe_due():
                self._enter(BreakerState.HALF_OPEN)
            if self._state is BreakerState.HALF_OPEN and not self._probe_out:
                self._probe_out = True
                return Permit(self._generation, probe=True)
            retry_after = None
            if self._state is BreakerState.OPEN:
                elapsed = self._clock.monotonic() - self._opened_at
                retry_after = max(0.0, self._cfg.half_open_after_s - elapsed)
        what = "probe in flight" if retry_after is None else "open"
        raise ModelUnavailable(
            "breaker_open", f"{self.name} breaker {what}", retry_after_s=retry_after
        )

    def record_success(self, permit: Permit) -> None:
        with self._lock:
            if permit.generation != self._generation:
                return
            if permit.probe:
                self._enter(BreakerState.CLOSED)

    def record_failure(self, permit: Permit) -> None:
        with self._lock:
            if permit.generation != self._generation:
                return
            if permit.probe:
                self._open()
                return
            now = self._clock.monotonic()
            self._failures.append(now)
            while self._failures and now - self._failures[0] >= self._cfg.window_s:
                self._failures.popleft()
            if len(self._failures) >= self._cfg.open_after_failures:
                self._open()

    def _probe_due(self) -> bool:
        return self._clock.monotonic() - self._opened_at >= self._cfg.half_open_after_s

    def _open(self) -> None:
        self._opened_at = self._clock.monotonic()
        self._enter(BreakerState.OPEN)

    def _enter(self, state: BreakerState) -> None:
        # Every change starts a new generation, so results of calls permitted before it are stale.
        if state is not self._state:
            log.warning("breaker %s: %s -> %s", self.name, self._state.value, state.value)
        self._state = state
        self._generation += 1
        self._failures.clear()
        self._probe_out = False
