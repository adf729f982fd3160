"""When a failed delivery is tried again: the Standard Webhooks reference schedule, jittered.

After the first attempt: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h (about 27 h in all), each
spread by +/-20 % so that an endpoint that comes back is not hit by every retry at once. After
the last one the delivery is dead-lettered (listed, replayable by an operator).
"""

from __future__ import annotations

SCHEDULE_S: tuple[float, ...] = (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)
MAX_ATTEMPTS = len(SCHEDULE_S) + 1
JITTER = 0.2


def retry_in_s(attempts: int, rand: float) -> float | None:
    """Seconds until the next attempt after `attempts` failed ones (`rand` in [0, 1)), or None:
    the schedule is spent, dead-letter it."""
    if attempts < 1:
        raise ValueError("attempts counts the failed attempts, from 1")
    if attempts > len(SCHEDULE_S):
        return None
    base = SCHEDULE_S[attempts - 1]
    return base * (1.0 - JITTER + 2.0 * JITTER * rand)
