"""The switch set a process obeys: read from the database, cached, re-read the moment it changes.

`StoreSwitches` keeps the current `SwitchSet` in memory, so a question costs no I/O. A background
thread listens on a Redis pub/sub channel (`core.names.ops_switches_channel`): whoever changes a
switch publishes there after its commit, and every listening process re-reads the table at once
(measured: tens of milliseconds from the change to every process obeying it). Pub/sub delivers
at most once and only to those connected, so the same thread also re-reads the table every
`POLL_INTERVAL_S` whatever it heard: a lost message, a Redis outage or a process started in
between costs at most that long. Without Redis (embedded) `current()` re-reads when its copy is
older than that.

The process's set is installed once (`install`, by `queue.runtime`) and read by the executor, the
dispatch gate and the policy through `installed()`; until then it is empty (no switches).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import redis

from agent_jobs.core.names import ops_switches_channel
from agent_jobs.ops.switches import (
    NO_SWITCHES,
    POLL_INTERVAL_S,
    Kind,
    StaticSwitches,
    Switch,
    Switches,
    SwitchKey,
    SwitchSet,
)
from agent_jobs.redis_clients import client as redis_client

log = logging.getLogger(__name__)

Listener = Callable[[SwitchSet, SwitchSet], None]


class SwitchSource(Protocol):
    """What the cache reads: `Store.switches()`."""

    def switches(self) -> Iterable[Any]: ...


def to_set(rows: Iterable[Any]) -> SwitchSet:
    """`SwitchRow`s (the store's) as a `SwitchSet`; a row of an unknown kind (a newer release
    wrote it) is skipped, not obeyed wrongly."""
    out: list[Switch] = []
    for r in rows:
        try:
            kind = Kind(r.kind)
        except ValueError:
            log.warning("ignoring switch of unknown kind %r", r.kind)
            continue
        key = SwitchKey(kind, r.tenant_id, r.target)
        out.append(Switch(key, r.value, r.actor, r.reason, r.changed_at))
    return SwitchSet.of(out)


def notify(client: redis.Redis, prefix: str) -> int:
    """Tell every listening process that the switches changed; how many heard it."""
    return int(client.publish(ops_switches_channel(prefix), b"changed"))


class StoreSwitches:
    """The `Switches` port over the database, cached in this process (see the module doc)."""

    def __init__(
        self,
        source: SwitchSource,
        *,
        redis_url: str | None = None,
        sentinel_master: str | None = None,
        prefix: str = "aj",
        refresh_s: float = POLL_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._redis_url = redis_url
        self._sentinel_master = sentinel_master
        self._prefix = prefix
        self._refresh_s = refresh_s
        self._clock = clock
        self._lock = threading.Lock()
        self._set = NO_SWITCHES
        self._loaded_at = float("-inf")
        self._listeners: list[Listener] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._pid = os.getpid()
        self.reloads = 0  # how many times the table was read (tests, diagnostics)
        self._failing = False  # the last read failed (its failure was logged once)

    @property
    def listening(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._pid == os.getpid()

    def current(self) -> SwitchSet:
        """The set in force. Costs nothing while the listener keeps it fresh; without one (or
        in a forked child that has not started its own) re-reads when the copy is stale."""
        if not self.listening and self._clock() - self._loaded_at >= self._refresh_s:
            self.reload()
        return self._set

    def on_change(self, listener: Listener) -> None:
        """Call `listener(old, new)` whenever a re-read finds a different set."""
        self._listeners.append(listener)

    def reload(self) -> SwitchSet:
        """Read the table now. A database error keeps the last set (logged) and is retried at
        the next interval: a switch must not flap off because the database blinked."""
        try:
            new = to_set(self._source.switches())
        except Exception as exc:
            # Once per outage, in one line: the reader retries every few seconds, and a
            # database that is down is reported by the process's own start check or readiness.
            if not self._failing:
                # Imported here: the tools import the switches, and they must not load the
                # store's SQLAlchemy (tests/unit/test_policy_imports.py).
                from agent_jobs.store.engine import database_error_line  # noqa: PLC0415

                self._failing = True
                log.warning(
                    "cannot read the operator switches (%s); keeping the last set",
                    database_error_line(exc),
                )
            self._loaded_at = self._clock()
            return self._set
        if self._failing:
            self._failing = False
            log.warning("the operator switches are readable again")
        with self._lock:
            old, self._set = self._set, new
            self._loaded_at = self._clock()
            self.reloads += 1
        _export(old, new)
        if new != old:
            for listener in list(self._listeners):
                try:
                    listener(old, new)
                except Exception:
                    log.exception("a switch-change listener failed")
        return new

    def start(self) -> None:
        """Read the table and, given Redis, start listening (a daemon thread)."""
        self.reload()
        if self._redis_url is None or self.listening:
            return
        self._pid = os.getpid()
        self._stop.clear()
        self._thread = threading.Thread(target=self._listen, name="ops-switches", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._thread = None

    def _listen(self) -> None:
        assert self._redis_url is not None
        channel = ops_switches_channel(self._prefix)
        backoff = 0.1
        while not self._stop.is_set():
            try:
                # No command timeout: the reader blocks in get_message. Under Sentinel a new
                # client asks for the primary again; PUBLISH reaches subscribers on any server
                # of the set, and the table is re-read on every (re)subscribe anyway.
                client = redis_client(
                    self._redis_url,
                    master=self._sentinel_master,
                    timeout_s=None,
                    connect_timeout_s=5,
                    health_check_interval=30,
                )
                pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call,unused-ignore]
                pubsub.subscribe(channel)
                # Subscribed: anything changed before this moment is read now.
                self.reload()
                backoff = 0.1
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=self._refresh_s)
                    if message is None:
                        self.reload()  # the backstop: a lost message costs one interval
                        continue
                    # Several changes at once: drain them, read the table once.
                    while pubsub.get_message(timeout=0) is not None:
                        pass
                    self.reload()
            except Exception as exc:
                log.warning("ops switch listener: %s; reconnecting in %.1fs", exc, backoff)
                self._stop.wait(backoff)
                backoff = min(5.0, backoff * 2)
                self.reload()


def _export(old: SwitchSet, new: SwitchSet) -> None:
    """Mirror the set in the metrics (imported here: prometheus_client loads after a worker
    chose its multiprocess mode)."""
    from agent_jobs.ops.metrics import export  # noqa: PLC0415

    export(old, new)


_installed: Switches = StaticSwitches()
_install_lock = threading.Lock()


def install(switches: Switches) -> Switches:
    """Make `switches` what this process obeys; returns the one it replaces. A replaced
    `StoreSwitches` stops listening."""
    global _installed
    with _install_lock:
        previous, _installed = _installed, switches
    if isinstance(previous, StoreSwitches) and previous is not switches:
        previous.stop()
    return previous


def installed() -> Switches:
    return _installed


def current() -> SwitchSet:
    """This process's switch set now."""
    return _installed.current()


def start_process_switches(
    source: SwitchSource, redis_url: str | None, prefix: str, sentinel_master: str | None = None
) -> StoreSwitches:
    """Build, start and install this process's switches (workers, beat and the API, at start
    and again in every forked child: a thread does not survive a fork)."""
    switches = StoreSwitches(
        source, redis_url=redis_url, sentinel_master=sentinel_master, prefix=prefix
    )
    switches.start()
    install(switches)
    return switches
