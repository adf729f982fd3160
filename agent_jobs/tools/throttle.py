"""`Retry-After`, read defensively: what a throttled service asks us to wait, bounded.

RFC 9110 section 10.2.3 allows delta-seconds (`120`) or an HTTP-date
(`Wed, 21 Oct 2026 07:28:00 GMT`). Services also send decimals (`1.5`), negative numbers, dates
in the past, absurd values and garbage. The rule here: a number or a date becomes seconds from
now, clamped to `[0, MAX_RETRY_AFTER_S]`; anything unreadable is None ("no hint"), and the
caller falls back to its own backoff. The value is never trusted to be small: the orchestrator
bounds the total wait separately.

An HTTP-date is measured against the response's own `Date` header when it has a readable one,
so a skewed clock on either side does not turn "in 5 s" into "an hour ago" or "in an hour".

Pure: the caller passes `now`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

# An hour: longer than any sane throttle, short enough that a parked task is not forgotten.
MAX_RETRY_AFTER_S = 3600.0
# Longer than any date or number a real service sends; a longer value is garbage.
_MAX_VALUE_CHARS = 64
_DELTA = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?")


def clamp_delay(seconds: float) -> float:
    """`seconds` bounded to `[0, MAX_RETRY_AFTER_S]` (NaN counts as no wait)."""
    if math.isnan(seconds):
        return 0.0
    return min(MAX_RETRY_AFTER_S, max(0.0, seconds))


def _http_date(value: str) -> datetime | None:
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from one `Retry-After` value, clamped; None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if not text or len(text) > _MAX_VALUE_CHARS:
        return None
    if _DELTA.fullmatch(text):
        return clamp_delay(float(text))  # float("9" * 60) is 9e59, not an error: clamped
    when = _http_date(text)
    if when is None:
        return None
    return clamp_delay((when - now).total_seconds())


def retry_after_of(headers: Mapping[str, str], now: datetime) -> float | None:
    """`Retry-After` of a response (headers looked up case-insensitively by the caller's
    mapping, as `requests` does), with a date measured against the response's `Date`."""
    value = headers.get("Retry-After")
    date = headers.get("Date")
    served_at = _http_date(date) if date and len(date) <= _MAX_VALUE_CHARS else None
    return parse_retry_after(value, served_at or now)
