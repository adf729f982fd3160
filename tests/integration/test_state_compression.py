"""Migration 0011: a task's state is compressed with lz4 where the server has it (issue 14: every
step rewrites the whole state; lz4 costs the server about half pglz's time), and a downgrade
puts pglz back. On a database of its own: migrating down and up must not touch the session's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

from tests.conftest import _need
from tests.services import (
    PG_ADMIN_URL,
    check_test_database_name,
    database_url_for,
    new_test_database_name,
    postgres_available,
)

COMPRESSION = text(
    "SELECT attcompression FROM pg_attribute "
    "WHERE attrelid = 'tasks'::regclass AND attname = 'state'"
)


@pytest.fixture
def own_database() -> Iterator[str]:
    _need(postgres_available(), "PostgreSQL")
    from agent_jobs.store.engine import make_engine

    name = new_test_database_name()
    admin = make_engine(PG_ADMIN_URL)
    with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    yield database_url_for(name)
    check_test_database_name(name)
    with admin.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.dispose()


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
