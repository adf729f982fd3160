"""A live runtime on the test Postgres database and the test Redis broker."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from agent_jobs.core.polling import poll


def wait_until(
    what: str, check: Callable[[], Any], timeout_s: float = 60.0, every_s: float = 0.05
) -> Any:
    try:
        return poll(check, timeout_s=timeout_s, every_s=every_s, what=what)
    except TimeoutError as exc:
        raise AssertionError(str(exc)) from None


@contextmanager
def live_env(**env: str) -> Iterator[None]:
    """Point this process's settings (and a fresh runtime) at the given AGENT_JOBS_* values."""
    from agent_jobs.config import settings
    from agent_jobs.queue.runtime import set_runtime

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    settings.cache_clear()
    set_runtime(None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        settings.cache_clear()
        set_runtime(None)


@contextmanager
def live_runtime(**env: str) -> Iterator[tuple[Any, dict[str, str]]]:
    """A fresh runtime on an emptied database, and the environment that worker processes need to
    join it (the given settings plus this test's broker and queue prefix)."""
    from agent_jobs.queue.runtime import get_runtime
    from tests.conftest import _truncate

    with live_env(**env):
        rt = get_runtime()
        _truncate(rt.store)
        try:
            yield (
                rt,
                {
                    **env,
                    "AGENT_JOBS_BROKER_URL": os.environ["AGENT_JOBS_BROKER_URL"],
                    "AGENT_JOBS_QUEUE_PREFIX": os.environ["AGENT_JOBS_QUEUE_PREFIX"],
                },
            )
        finally:
            rt.store.dispose()
