"""`agent-jobs submit` answers within `BUDGET_S`, whatever Postgres or the broker do.

A person (or a script) that runs `submit` must learn within seconds whether the task is
recorded, and what to do when it is not. Every wait of the command is bounded so that together
they fit the budget: the database's connect, pool, lock and statement timeouts are lowered for
this process to `DB_BOUNDS` (never raised), and a watchdog says what the command waits on every
`PROGRESS_EVERY_S` and, at `DEADLINE_S`, ends it with what is known (a broker publish has no
timeout of its own that this command could lower).

What each failure means for the task, as the command says it:
- the database does not answer the first query: nothing was written, the task is not recorded;
- a statement fails or times out while recording: the transaction did not commit as far as
  this process knows; the same command again (same `--key`) finds the task if it was recorded
  and records it if not;
- the broker does not take the first step: the task is recorded (its dispatch is in its row)
  and beat's dispatch sweeper sends it once the broker answers; nothing to redo.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from agent_jobs.cli.database_errors import database_problem as explained
from agent_jobs.config import env_name, settings

# Imported with this module, before the command's stages are timed: on a busy machine loading
# Celery and the store takes seconds, which are not a wait for anyone but this process.
from agent_jobs.queue.reach import database_problem
from agent_jobs.queue.runtime import get_runtime
from agent_jobs.store.engine import database_error_line, shown_url
from agent_jobs.store.store import UNAVAILABLE

# The promise: an answer within this long.
BUDGET_S = 10.0
# The watchdog ends the command here, counted from the process's start (imports included):
# under the budget by more than a process takes to exit. Only while it waits for a service, and
# only once that wait has had `MIN_WAIT_S`: a machine so busy that starting took the budget does
# not get a healthy submit killed for it (it answers late instead).
DEADLINE_S = 8.5
MIN_WAIT_S = 1.0
PROGRESS_EVERY_S = 3.0
_TICK_S = 0.25  # how often the watchdog looks
# Each database wait of the command, in seconds, at most (a lower setting stays lower). The
# connect timeout is libpq's, which counts at least 2.
DB_BOUNDS = {
    "db_connect_timeout_s": 2,
    "db_pool_timeout_s": 2.0,
    "db_statement_timeout_s": 3.0,
    "db_lock_timeout_s": 2.0,
}
# Where a failed publish is reported (`CeleryPublisher.send` logs it and lets the sweeper
# repeat the dispatch): one warning line with the broker's reason.
PUBLISHER_LOGGER = "agent_jobs.queue.publisher"
EXIT_UNANSWERED = 3  # as a worker that cannot reach the database or the broker

AGAIN = (
    "run the same command again (the same --key finds the task if it was recorded, and "
    "records it if not)"
)


NOT_RECORDED = (
    "The task was not recorded (nothing was written): run the same command again once the "
    "database answers (the same --key never makes a second task)."
)


class Unanswered(Exception):
    """The command could not record the task; `str` is what to print (several lines)."""


@contextmanager
def bounded_waits() -> Iterator[None]:
    """Lower this process's database waits to `DB_BOUNDS` for the command (the settings are
    read from the environment by everything the runtime builds, so they are set there)."""
    current = settings()
    saved: dict[str, str | None] = {}
    for name, bound in DB_BOUNDS.items():
        value = float(getattr(current, name))
        if value == 0 or value > bound:  # 0: no timeout at all
            var = env_name(name)
            saved[var] = os.environ.get(var)
            os.environ[var] = str(bound)
    settings.cache_clear()
    try:
        yield
    finally:
        for var, old in saved.items():
            if old is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = old
        settings.cache_clear()


@dataclass
class Watch:
    """What the command waits on now, said every `PROGRESS_EVERY_S`; past `DEADLINE_S`, in a
    wait for a service that has lasted `MIN_WAIT_S`, `on_deadline` gets the watch and how long
    the command has run (the CLI ends the process)."""

    say: Callable[[str], None]
    on_deadline: Callable[[Watch, float], None]
    deadline_s: float = DEADLINE_S
    stage: str = "this process to start"
    started: float = field(default_factory=lambda: time.monotonic() - process_age_s())
    task_id: str | None = None  # known once the task's row is committed (its first publish)
    writing: bool = False  # the task's transaction may have been sent
    _stage_at: float = field(default_factory=time.monotonic)
    _quiet: bool = True  # starting: this process's own work
    _done: threading.Event = field(default_factory=threading.Event)

    def enter(self, stage: str, *, quiet: bool = False, writing: bool = False) -> None:
        """Now waiting for `stage`; `quiet`: CPU work of this process, not a wait worth a line
        (the deadline still names it); `writing`: from here the task may be recorded."""
        self.stage, self._stage_at, self._quiet = stage, time.monotonic(), quiet
        self.writing = self.writing or writing

    def __enter__(self) -> Watch:
        threading.Thread(target=self._run, name="submit-watch", daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()

    def _run(self) -> None:
        end = self.started + self.deadline_s
        said_at = 0.0
        while not self._done.wait(timeout=_TICK_S):
            now = time.monotonic()
            if now >= end and not self._quiet and now - self._stage_at >= MIN_WAIT_S:
                self.on_deadline(self, now - self.started)
                return
            # Only a real wait is worth a line: this stage has taken PROGRESS_EVERY_S, and so
            # has the time since the last line.
            if not self._quiet and now - max(self._stage_at, said_at) >= PROGRESS_EVERY_S:
                self.say(f"waiting for {self.stage} ({now - self._stage_at:.0f} s)")
                said_at = now


def process_age_s() -> float:
    """Seconds since this process started (Linux's /proc; elsewhere 0: counted from the
    command's start instead). Imports on a busy machine take seconds of the budget too."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            # Field 22, after the parenthesised command name (which may hold spaces).
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


class _FailedPublishes(logging.Handler):
    """The publisher's warning for a publish that failed: kept for the command's own message
    instead of printed beside it."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        # "publishing a step for %s failed (%s); ...": the reason is the last argument.
        args = record.args
        reason = args[-1] if isinstance(args, tuple) and len(args) > 1 else None
        self.lines.append(str(reason) if reason is not None else record.getMessage())


class _Staged:
    """The orchestrator's publisher, telling the watch when the row is committed and the
    first step goes to the broker."""

    def __init__(self, inner: Any, watch: Watch, broker: str) -> None:
        self.inner, self.watch, self.broker = inner, watch, broker

    def publish(self, dispatch: Any) -> None:
        self.watch.task_id = dispatch.task_id
        self.watch.enter(f"the broker at {self.broker} to take its first step")
        self.inner.publish(dispatch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def where_database() -> str:
    return f"the database at {shown_url(settings().database_url)} ({env_name('database_url')})"


def where_broker() -> str:
    return f"{shown_url(settings().broker_url)} ({env_name('broker_url')})"


def deadline_message(watch: Watch, waited_s: float) -> str:
    """What the watchdog prints when it ends the command."""
    head = f"no answer after {waited_s:.0f} s: still waiting for {watch.stage}"
    task_id = watch.task_id
    if task_id is not None:
        return (
            f"{head}.\n{task_id} is recorded; its first step is not sent yet: beat's dispatch "
            f"sweeper sends it once the broker answers (nothing to redo; `agent-jobs status "
            f"{task_id}` shows it)."
        )
    if watch.writing:
        return f"{head}.\nThe task may not be recorded: {AGAIN}."
    return f"{head}.\n{NOT_RECORDED}"


def submit(run: Callable[[], Any], watch: Watch) -> tuple[Any, str | None]:
    """Record the task (`run`, the orchestrator's submit) within bounded waits; the result and,
    when its first step could not be sent, why (the task is recorded all the same)."""
    watch.enter(f"{where_database()} to answer")
    problem = database_problem(settings())
    if problem is not None:
        raise Unanswered(f"{problem}.\n{NOT_RECORDED}")
    # Building the runtime reads the operator switches (bounded like every database wait).
    watch.enter("this process to start (its runtime and the operator switches)", quiet=True)
    rt = get_runtime()
    watch.enter(f"{where_database()} to record the task", writing=True)
    orchestrator = rt.orchestrator
    inner = orchestrator.publisher
    orchestrator.publisher = _Staged(inner, watch, where_broker())
    failed = _FailedPublishes()
    log = logging.getLogger(PUBLISHER_LOGGER)
    log.addHandler(failed)
    propagate, log.propagate = log.propagate, False
    try:
        result = run()
    except UNAVAILABLE as exc:
        if watch.task_id is not None or explained(exc, settings().database_url):
            # After the commit (not about recording it), or a database the CLI's handler has
            # one line for (not migrated): that handler says it.
            raise
        raise Unanswered(
            f"{where_database()} did not record the task: {database_error_line(exc)}.\n"
            f"The task may not be recorded: {AGAIN}."
        ) from exc
    finally:
        orchestrator.publisher = inner
        log.removeHandler(failed)
        log.propagate = propagate
    return result, (failed.lines[0] if failed.lines else None)


def unsent_message(task_id: str, why: str) -> str:
    return (
        f"{task_id} is recorded, but its first step was not sent: the broker at "
        f"{where_broker()} did not take it ({why}).\nNothing to redo: beat's dispatch sweeper "
        f"sends it once the broker answers (`agent-jobs status {task_id}` shows it)."
    )


def end_now(watch: Watch, waited_s: float) -> None:
    """The CLI's deadline: say what is known and exit at once (a thread blocked in a socket
    read cannot be interrupted; the process can end)."""
    task_id = watch.task_id
    if task_id is not None:
        print(task_id, flush=True)
    print(f"agent-jobs submit: {deadline_message(watch, waited_s)}", file=sys.stderr)
    sys.stderr.flush()
    os._exit(0 if task_id is not None else EXIT_UNANSWERED)
