"""pytest fixtures for testing an agent, registered as a pytest plugin (the `pytest11` entry
point of the `agent-jobs` distribution): a project that installs agent_jobs has them in every
test without a conftest.

- `store`: the real store on SQLite, in the test's `tmp_path`, migrated; disposed after.
- `fake_system`: a fresh `agent_jobs.testing.FakeSystem` (records, effects once per key, a
  lookup by key, faults on cue).

A conftest fixture of the same name wins over these (pytest's order), so a project with its own
`store` (Postgres, say) keeps it. Nothing heavy is imported until a fixture is used: pytest
loads plugins before any conftest has set the environment up.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from agent_jobs.store import Store
    from agent_jobs.testing import FakeSystem


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """The real store on a SQLite file of this test's own, migrated to the latest schema."""
    from agent_jobs.store import Store  # noqa: PLC0415 - loaded when used, not with pytest
    from agent_jobs.store.migrate import upgrade  # noqa: PLC0415

    made = Store.from_url(f"sqlite:///{tmp_path / 'agent_jobs.sqlite3'}")
    upgrade(made.engine)
    try:
        yield made
    finally:
        made.dispose()


@pytest.fixture
def fake_system() -> FakeSystem:
    """A fake system of record, empty (`FakeSystem`)."""
    from agent_jobs.testing import FakeSystem  # noqa: PLC0415

    return FakeSystem()
