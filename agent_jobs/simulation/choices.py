"""Every decision of a schedule, drawn from one seed and recorded, so that a schedule replays
and shrinks.

A schedule asks `draw(n)` for a number in [0, n) whenever it chooses (which action next, which
fault, the jitter of a backoff). The numbers come from `random.Random(seed)` and are recorded;
a replay feeds a recorded (or shrunk) sequence back instead, and asks past its end answer 0.
The draws are written so that 0 is always the plain choice (no fault, the first message, the
smallest delay): a shorter or smaller sequence is a simpler schedule — the approach of
Hypothesis's choice sequences, which is what lets `shrink` work on any schedule.
"""

from __future__ import annotations

import random
from collections.abc import Sequence


class Choices:
    def __init__(self, seed: int, replay: Sequence[int] | None = None) -> None:
        self._rng = random.Random(seed)
        self._replay = list(replay) if replay is not None else None
        self.drawn: list[int] = []

    def draw(self, n: int) -> int:
        """A number in [0, n)."""
        if n <= 1:
            return 0
        if self._replay is None:
            value = self._rng.randrange(n)
        else:
            i = len(self.drawn)
            value = self._replay[i] % n if i < len(self._replay) else 0
        self.drawn.append(value)
        return value

    def chance(self, percent: int) -> bool:
        """True about `percent` times in 100; a 0 draw (the plain choice) is False."""
        return percent > 0 and self.draw(100) >= 100 - percent

    def pick(self, items: Sequence[str]) -> str:
        return items[self.draw(len(items))]

    def unit(self) -> float:
        """A float in [0, 1), for jitter."""
        return self.draw(1000) / 1000.0

    def weighted(self, weights: dict[str, int]) -> str:
        """One key of `weights`, each as likely as its weight; 0 draws the first key."""
        total = sum(weights.values())
        at = self.draw(total)
        for key, weight in weights.items():
            if at < weight:
                return key
            at -= weight
        raise AssertionError("unreachable")
