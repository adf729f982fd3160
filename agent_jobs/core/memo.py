"""Results of a costly pure function of a JSON-like value, remembered per object.

The gateway canonicalises the same few schemas (the route's output schema, each tool's argument
schema) several times per model call, to key its validator cache and to estimate tokens: tens of
microseconds each, a millisecond per call in all. Those are long-lived objects, so the result is
kept against the object itself. A hit needs the very same object (held here, so its id cannot be
reused) and one still equal to the deep copy taken when the result was kept: an object changed in
place since is computed afresh. Equality is Python's (`1 == 1.0 == True`): fit for schemas and
token estimates, not for anything a hash must bind exactly (approvals use `canonical_json`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from agent_jobs.core.copies import deep_copy

T = TypeVar("T")


class SameObjectMemo(Generic[T]):
    """`memo(value)` is `compute(value)`, remembered for `value`'s object (see the module)."""

    def __init__(self, compute: Callable[[Any], T], *, size: int = 256) -> None:
        self._compute = compute
        self._size = size
        self._kept: dict[int, tuple[Any, Any, T]] = {}
        self._lock = threading.Lock()

    def __call__(self, value: Any) -> T:
        hit = self._kept.get(id(value))
        if hit is not None and hit[0] is value and hit[1] == value:
            return hit[2]
        result = self._compute(value)  # raises as `compute` does; nothing is kept then
        snapshot = deep_copy(value)
        with self._lock:
            if len(self._kept) >= self._size:
                self._kept.clear()  # bounded: a caller inventing values per call must not grow it
            self._kept[id(value)] = (value, snapshot, result)
        return result
