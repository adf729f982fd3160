"""Worker and beat inside this process, on threads: the embedded mode, the demo, and tests.

With `memory://` the broker lives in this process too, so nothing needs installing. With Redis it
is the same worker as `celery -A agent_jobs worker --pool threads`, just started from Python.
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType
from typing import Any

from celery import beat
from celery.worker import WorkController

from agent_jobs.queue.app import app

log = logging.getLogger(__name__)


class _Worker(WorkController):  # type: ignore[misc]
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.ready = threading.Event()
        super().__init__(*args, **kwargs)

    def on_consumer_ready(self, consumer: Any) -> None:
        self.ready.set()


class EmbeddedWorker:
    """`with EmbeddedWorker(): ...` runs a thread-pool worker (and beat) until the block ends."""

    def __init__(
        self,
        *,
        concurrency: int = 4,
        beat_enabled: bool = True,
        hostname: str | None = None,
        loglevel: str = "WARNING",
        start_timeout_s: float = 30.0,
    ) -> None:
        self.concurrency = concurrency
        self.beat_enabled = beat_enabled
        self.hostname = hostname or f"embedded-{threading.get_ident()}@localhost"
        self.loglevel = loglevel
        self.start_timeout_s = start_timeout_s
        self.worker: _Worker | None = None
        self.beat: beat.Service | None = None
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> EmbeddedWorker:
        app.finalize()
        app.set_current()
        # And the default app, as `celery worker` makes it (celery.app.trace's
        # setup_worker_optimizations, which WorkController alone does not run): the thread pool
        # runs each task with `current_app`, and a pool thread has no current app of its own.
        # Without this it falls back to Celery's default app, which configures itself from a
        # `celeryconfig` module if one is importable, else talks to amqp://localhost; a task's
        # retry (its new message) would be sent through that app, not this one.
        app.set_default()
        self.worker = _Worker(
            app=app,
            concurrency=self.concurrency,
            hostname=self.hostname,
            pool="threads",
            loglevel=self.loglevel,
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
        )
        t = threading.Thread(target=self.worker.start, name="embedded-worker", daemon=True)
        t.start()
        self._threads.append(t)
        if not self.worker.ready.wait(self.start_timeout_s):
            raise RuntimeError("the embedded worker did not start")
        if self.beat_enabled:
            # The in-memory scheduler: no schedule file to leave behind.
            self.beat = beat.Service(app, scheduler_cls=beat.Scheduler)
            b = threading.Thread(target=self.beat.start, name="embedded-beat", daemon=True)
            b.start()
            self._threads.append(b)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        if self.beat is not None:
            self.beat.stop()
            self.beat = None
        if self.worker is not None:
            self.worker.stop(in_sighandler=False)
            self.worker = None
        for t in self._threads:
            t.join(timeout=10)
        self._threads.clear()
