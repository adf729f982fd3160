"""The simulator's clock: the one "now" of the database (leases, timers, approval expiry), of
the business systems (lag) and of the switch cache. It moves only when the schedule moves it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

START = datetime(2026, 3, 14, 10, 0, tzinfo=UTC)


class VirtualClock:
    def __init__(self, start: datetime = START) -> None:
        self._now = start
        self._mono = 1_000.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("the simulated clock does not go back")
        self._now += timedelta(seconds=seconds)
        self._mono += seconds

    def millis(self) -> int:
        return int(self._now.timestamp() * 1000)
