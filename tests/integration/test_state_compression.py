"""Migration 0011: a task's state is compressed with lz4 where the server has it (issue 14: every
step rewrites the whole state; lz4 costs the server about half pglz's time), and a downgrade
puts pglz back. On a database of its own: migrating down and up must not touch the session's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

from tests.conftest import new_database

COMPRESSION = text(
    "SELECT attcompression FROM pg_attribute "
    "WHERE attrelid = 'tasks'::regclass AND attname = 'state'"
)


@pytest.fixture
def own_database() -> Iterator[str]:
    with new_database() as url:
        yield url


def test_state_is_lz4_after_the_upgrade_and_pglz_after_the_downgrade(own_database: str) -> None:
    from agent_jobs.store.engine import make_engine
    from agent_jobs.store.migrate import downgrade, upgrade

    engine = make_engine(own_database)
    try:
        upgrade(engine)
        with engine.connect() as conn:
            has_lz4 = (
                conn.exec_driver_sql(
                    "SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' "
                    "AND 'lz4' = ANY(enumvals)"
                ).first()
                is not None
            )
            assert conn.execute(COMPRESSION).scalar_one() == ("l" if has_lz4 else "")
        downgrade(engine, "0010")
        with engine.connect() as conn:
            assert conn.execute(COMPRESSION).scalar_one() in ("p", "")
        upgrade(engine)
        with engine.connect() as conn:
            assert conn.execute(COMPRESSION).scalar_one() == ("l" if has_lz4 else "")
    finally:
        engine.dispose()
