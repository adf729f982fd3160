"""Identifiers: a prefix, then time-ordered hex so new rows land at the right edge of indexes.

The time and the random bytes come from one source a process may replace (`use`): the
deterministic simulator draws both from its seed, so a schedule's ids, and so the order of
every query that sorts by id, replay exactly.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class IdSource:
    millis: Callable[[], int]
    random_bytes: Callable[[int], bytes]


SYSTEM = IdSource(lambda: int(time.time() * 1000), os.urandom)
_source = SYSTEM


def use(source: IdSource) -> IdSource:
    """Draw ids from `source` from now on; returns the source it replaces (to put back)."""
    global _source
    previous, _source = _source, source
    return previous


def new_id(prefix: str) -> str:
    """`tsk_0195f3c2a1b4e0c8d2f1a9b3c4d5e6f7`: 12 hex digits of milliseconds, 20 random."""
    return f"{prefix}_{_source.millis():012x}{_source.random_bytes(10).hex()}"


def new_trace_id() -> str:
    """A W3C trace id: 32 lowercase hex digits, never all zero."""
    raw = _source.random_bytes(16)
    return raw.hex() if any(raw) else "0" * 31 + "1"
