"""Backoff arithmetic (pure: the caller supplies the random fraction)."""

from __future__ import annotations


def backoff_s(attempt: int, base_s: float, cap_s: float, jitter: float) -> float:
    """Exponential backoff with "equal jitter": half fixed, half random, capped.

    `attempt` counts from 1; `jitter` is a number in [0, 1). Equal jitter keeps a floor (a
    retry never fires immediately) while still spreading a thundering herd.
    """
    if attempt < 1:
        raise ValueError("attempt counts from 1")
    if not 0.0 <= jitter < 1.0:
        raise ValueError("jitter must be in [0, 1)")
    # The exponent is capped before the power: 2.0 ** 1100 would overflow a float.
    ceiling = min(cap_s, base_s * 2.0 ** min(attempt - 1, 64))
    return ceiling / 2 + (ceiling / 2) * jitter
