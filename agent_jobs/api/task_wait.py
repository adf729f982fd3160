"""The long poll of `GET /v1/tasks/{id}?wait=S`: one watcher per API process.

A waiting request costs no database read of its own: it parks on an asyncio future, and one
thread reads the statuses of every watched task in a single query every `EVERY_S`, waking the
requests whose task's status moved. A thousand callers waiting on a thousand tasks cost one
query per interval; none waiting, none (the thread sleeps on an event).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fastapi import Request

log = logging.getLogger(__name__)

EVERY_S = 0.1
MAX_WAIT_S = 60.0
# A wait ends this long before the API's request deadline (`Deadline`), so it answers 200.
DEADLINE_MARGIN_S = 2.0

Read = Callable[[Sequence[str]], dict[str, str]]


@dataclass(eq=False)
class _Waiter:
    status: str
    future: asyncio.Future[None]
    loop: asyncio.AbstractEventLoop


class StatusWatch:
    def __init__(self, read: Read, every_s: float = EVERY_S) -> None:
        self._read = read
        self._every_s = every_s
        self._waiters: dict[str, list[_Waiter]] = defaultdict(list)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    async def until_changed(self, task_id: str, status: str, timeout_s: float) -> bool:
        """Return when the task's status is no longer `status` (True) or after `timeout_s`
        (False)."""
        loop = asyncio.get_running_loop()
        waiter = _Waiter(status, loop.create_future(), loop)
        with self._lock:
            self._waiters[task_id].append(waiter)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="task-wait", daemon=True)
                self._thread.start()
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                mine = self._waiters.get(task_id, [])
                if waiter in mine:
                    mine.remove(waiter)
                if not mine:
                    self._waiters.pop(task_id, None)

    def _run(self) -> None:
        while True:
            with self._lock:
                watched = list(self._waiters)
            if not watched:
                self._wake.wait()
                self._wake.clear()
                continue
            try:
                now = self._read(watched)
            except Exception:
                # The database away: every waiter keeps waiting (its timeout answers it).
                log.warning("the long poll could not read task statuses", exc_info=True)
                now = {}
            with self._lock:
                due = [
                    w
                    for task_id, waiters in self._waiters.items()
                    if task_id in now
                    for w in waiters
                    if now[task_id] != w.status
                ]
            for w in due:
                w.loop.call_soon_threadsafe(_settle, w.future)
            threading.Event().wait(self._every_s)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def watch_of(request: Request, read: Read) -> StatusWatch:
    """The app's one watcher, made on first use."""
    app_state = request.app.state
    watch: StatusWatch | None = getattr(app_state, "task_wait", None)
    if watch is None:
        watch = app_state.task_wait = StatusWatch(read)
    return watch
