"""Whether the database and the broker answer when a process starts: one line naming the
setting when one does not (`agent-jobs worker: cannot reach the database at
postgresql://u:***@h:5432/db (AGENT_JOBS_DATABASE_URL): connection refused`), instead of a
traceback, or a warning repeated by every part of the process that tried.

Worker and beat exit on it (a supervisor retries; a person at a terminal reads the line); the
API keeps serving `/readyz` 503 until both answer.
"""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING

from agent_jobs.config import env_name
from agent_jobs.queue.broker_redis import broker_redis, is_sentinel
from agent_jobs.store.engine import database_error_line, make_engine, shown_url

if TYPE_CHECKING:
    from agent_jobs.config import Settings

# The exit status of a worker or beat that cannot start for want of its database or broker (the
# same as for an unmigrated database: nothing it does can succeed until someone acts).
EXIT_UNREACHABLE = 3


def short_reason(text: str) -> str:
    """`connection to server at "h", port 1 failed: Connection refused` -> `connection refused`;
    Redis's `Error 111 connecting to h:1. Connection refused.` -> `connection refused`."""
    first = (text.strip().splitlines() or [""])[0].strip()
    for marker in ("failed: ", ". "):
        if marker in first:
            first = first.rsplit(marker, 1)[1]
            break
    first = re.sub(r"^(?:FATAL|ERROR):\s+|^\[Errno \d+\]\s*", "", first.strip())
    first = first.rstrip(".").strip()
    return (first[:1].lower() + first[1:]) if first else "no answer"


def database_problem(cfg: Settings) -> str | None:
    """None when the database answers a trivial query within the connect timeout; otherwise
    one line: where (password hidden), which setting names it, and why."""
    url = cfg.database_url
    engine = make_engine(url, cfg=cfg)
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except Exception as exc:
        reason = short_reason(database_error_line(exc))
        return (
            f"cannot reach the database at {shown_url(url)} ({env_name('database_url')}): {reason}"
        )
    finally:
        engine.dispose()
    return None


def broker_problem(cfg: Settings) -> str | None:
    """None when the broker accepts a connection (Redis: answers PING; AMQP: a connection
    opens); the in-process broker always does. Otherwise one line, as `database_problem`."""
    url = cfg.broker_url
    if url.startswith("memory://"):
        return None
    timeout = cfg.db_connect_timeout_s
    try:
        if url.startswith(("redis://", "rediss://")) or is_sentinel(url):
            client = broker_redis(url, cfg.sentinel_master, timeout_s=timeout)
            try:
                client.ping()
            finally:
                client.close()
        else:
            from kombu.connection import Connection  # noqa: PLC0415

            with Connection(url, connect_timeout=timeout) as conn:  # type: ignore[no-untyped-call]
                conn.ensure_connection(max_retries=1)
    except Exception as exc:
        reason = short_reason(str(exc) or type(exc).__name__)
        return f"cannot reach the broker at {shown_url(url)} ({env_name('broker_url')}): {reason}"
    return None


def first_problem(cfg: Settings) -> str | None:
    """The database's problem, else the broker's, else None."""
    return database_problem(cfg) or broker_problem(cfg)


def exit_if_unreachable(who: str, cfg: Settings) -> None:
    """Print `who: <problem>` on the process's real stderr (Celery may have redirected
    `sys.stderr` into its logger by now) and exit `EXIT_UNREACHABLE`, if either service does not
    answer."""
    problem = first_problem(cfg)
    if problem is not None:
        stream = sys.__stderr__ or sys.stderr
        print(f"{who}: {problem}", file=stream, flush=True)
        raise SystemExit(EXIT_UNREACHABLE)
