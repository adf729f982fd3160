"""Waiting for a condition: the one polling loop of demos, benchmarks and tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def poll(
    check: Callable[[], Any], *, timeout_s: float, every_s: float = 0.05, what: str = ""
) -> Any:
    """Call `check` until it returns something truthy, and return that. A bound on waiting, not a
    measure of how long the work took: TimeoutError after `timeout_s`, naming the last value."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every_s)
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what} (last: {last!r})")
