"""Migration 0011: a task's state is compressed with lz4 where the server has it (issue 14: every
step rewrites the whole state; lz4 costs the server about half pglz's time), and a downgrade
puts pglz back. Migration 0012: the state is `json` kept in the row (storage MAIN), still lz4;
its downgrade puts `jsonb` out of line back, and the states already written survive both ways.
On a database of its own: migrating down and up must not touch the session's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import text

from tests.conftest import new_database

COMPRESSION = text(
    "SELECT attcompression FROM pg_attribute "
    "WHERE attrelid = 'tasks'::regclass AND attname = 'state'"
)
STATE_COLUMN = text(
    "SELECT atttypid::regtype::text, attstorage, attcompression FROM pg_attribute "
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


def test_state_is_json_in_the_row_and_survives_the_downgrade(own_database: str) -> None:
    from agent_jobs.core.contracts import TaskRequest
    from agent_jobs.store import Store
    from agent_jobs.store.migrate import downgrade, upgrade

    store = Store.from_url(own_database)
    try:
        upgrade(store.engine, "0011")
        state = {"facts": {"order": "8472", "amount_minor": 200000}, "note": "é\u202e" * 2000}
        task = store.create_or_get(
            "acme", "k-1", TaskRequest(workflow="example@1", input={}), requester="r", state=state
        ).task
        upgrade(store.engine)
        with store.engine.connect() as conn:
            kind, storage, compression = conn.execute(STATE_COLUMN).one()
        assert (kind, storage) == ("json", "m")
        assert compression in ("l", "")  # lz4 kept where 0011 set it
        assert store.get(task.id).state == state
        downgrade(store.engine, "0011")
        with store.engine.connect() as conn:
            kind, storage, _ = conn.execute(STATE_COLUMN).one()
        assert (kind, storage) == ("jsonb", "x")
        assert store.get(task.id).state == state
    finally:
        store.dispose()
