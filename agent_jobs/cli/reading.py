"""The store alone, for the commands that only read (`status`, `events`, `approvals`,
`dead-letters`, `trace`): no Celery, broker or operator switches, so each answers about half a
second sooner than one that builds the runtime, and needs the database only."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from agent_jobs.config import settings

if TYPE_CHECKING:
    from agent_jobs.store import Store


@contextmanager
def reading_store() -> Iterator[Store]:
    """The configured database's store, disposed of when the command is done with it."""
    from agent_jobs.store import Store  # noqa: PLC0415 - keep `--help` fast

    store = Store.from_url(settings().database_url)
    try:
        yield store
    finally:
        store.dispose()
