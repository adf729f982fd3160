"""Heartbeats: one thread per process renews every lease a step holds while it waits on I/O.

A thread per step would cost more than a no-op step itself; one keeper thread renewing the few
leases in flight costs nothing on the fast path (a dict insert and delete).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass

from agent_jobs.core.errors import StaleTransition
from agent_jobs.store import Lease, Store

log = logging.getLogger(__name__)


@dataclass
class _Held:
    lease: Lease
    renewed_at: float
    lost: bool = False


class LeaseKeeper:
    """Renews registered leases every `ttl_s / 3`. A lease that cannot be renewed is marked lost;
    the step's commit will then fail on the epoch anyway, which is what fences it."""

    def __init__(self, store: Store, ttl_s: float) -> None:
        self._store = store
        self._ttl = ttl_s
        self._interval = max(0.05, ttl_s / 3)
        self._held: dict[tuple[str, int], _Held] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0

    def hold(self, lease: Lease) -> None:
        with self._lock:
            self._held[(lease.task_id, lease.epoch)] = _Held(lease, time.monotonic())
            self._ensure_thread()

    def drop(self, lease: Lease) -> None:
        with self._lock:
            self._held.pop((lease.task_id, lease.epoch), None)

    def lost(self, lease: Lease) -> bool:
        with self._lock:
            held = self._held.get((lease.task_id, lease.epoch))
            return held is not None and held.lost

    def _ensure_thread(self) -> None:
        # Threads do not survive fork: a prefork child starts its own on first use.
        if self._thread is not None and self._thread.is_alive() and self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait(self._interval / 2)
            now = time.monotonic()
            with self._lock:
                due = [
                    h
                    for h in self._held.values()
                    if not h.lost and now - h.renewed_at >= self._interval
                ]
            for held in due:
                try:
                    self._store.renew(held.lease, self._ttl)
                    held.renewed_at = time.monotonic()
                except StaleTransition:
                    held.lost = True
                    log.warning("lease on %s lost (epoch %s)", held.lease.task_id, held.lease.epoch)
                except Exception:  # the database may be briefly away; try again next tick
                    log.exception("lease renewal failed for %s", held.lease.task_id)
