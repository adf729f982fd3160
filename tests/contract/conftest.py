"""The contract suite through a connection pooler (issue 32.3), when AGENT_JOBS_TEST_PG_POOLER_URL
names one: PgBouncer in transaction mode in front of the test server, with a `*` entry in its
`[databases]` (`python -m agent_jobs.bench.bouncer` writes such a configuration; `.ci/run` runs
this suite through one as a step of its own).

Databases are still created, migrated and dropped straight on the server (`PG_ADMIN_URL`); every
store of the suite then reaches its database only through the pooler, with prepared statements
off as the README configures them behind a transaction-mode pooler (AGENT_JOBS_PG_PREPARE=0).
The tests of the prepared statements themselves are left to the direct run.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

import pytest

POOLER_ENV = "AGENT_JOBS_TEST_PG_POOLER_URL"
POOLER_URL = os.environ.get(POOLER_ENV, "")
# What a transaction-mode pooler cannot carry: a statement prepared on one server connection is
# not there on the next transaction's.
PREPARED_ONLY = ("test_prepared.py", "test_prepared_cursor.py")

if POOLER_URL:
    # tests/conftest.py dropped the caller's AGENT_JOBS_* settings: set again for this run.
    os.environ["AGENT_JOBS_PG_PREPARE"] = "0"


def through_pooler(database_url: str, pooler_url: str) -> str:
    """`database_url` with the pooler's host and port (and user) instead of the server's."""
    db, pooler = urlsplit(database_url), urlsplit(pooler_url)
    return urlunsplit(db._replace(netloc=pooler.netloc))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not POOLER_URL:
        return
    skip = pytest.mark.skip(
        reason=f"prepared statements are off through the pooler ({POOLER_ENV}); "
        "they are tested straight to Postgres"
    )
    for item in items:
        if item.path.name in PREPARED_ONLY:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def pg_database(pg_database: str) -> str:
    """The session's test database (created and migrated on the server by tests/conftest.py):
    its URL through the pooler when one is named, else the server's, as everywhere."""
    return through_pooler(pg_database, POOLER_URL) if POOLER_URL else pg_database
