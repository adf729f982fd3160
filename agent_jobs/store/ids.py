"""Identifiers: a prefix, then time-ordered hex so new rows land at the right edge of indexes."""

from __future__ import annotations

import os
import time


def new_id(prefix: str) -> str:
    """`tsk_0195f3c2a1b4e0c8d2f1a9b3c4d5e6f7`: 12 hex digits of milliseconds, 20 random."""
    return f"{prefix}_{int(time.time() * 1000):012x}{os.urandom(10).hex()}"


def new_trace_id() -> str:
    """A W3C trace id: 32 lowercase hex digits, never all zero."""
    return os.urandom(16).hex()
