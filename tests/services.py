"""Where the test services are, whether they answer, and the rules keeping tests off real data.

The suite takes its Redis from AGENT_JOBS_TEST_REDIS_URL (default database 9) and its Postgres
server from AGENT_JOBS_TEST_PG_URL; it never reads AGENT_JOBS_BROKER_URL or
AGENT_JOBS_DATABASE_URL, which a shell that followed the README's "Run it for real" has exported
for a real deployment. Tests may flush their own Redis database, so that database must not be 0
(every client's default) nor the one a deployment in this shell uses; in Postgres they create and
drop only databases named `aj_test_*`.
"""

from __future__ import annotations

import functools
import os
import socket
import uuid
from collections.abc import Mapping
from urllib.parse import parse_qs, urlparse

TEST_REDIS_ENV = "AGENT_JOBS_TEST_REDIS_URL"
TEST_PG_ENV = "AGENT_JOBS_TEST_PG_URL"
TEST_DATABASE_PREFIX = "aj_test_"
# The variables of a real deployment whose Redis database the tests must never share.
DEPLOYMENT_REDIS_ENV = ("AGENT_JOBS_BROKER_URL", "AGENT_JOBS_REDIS_URL")

PG_ADMIN_URL = os.environ.get(TEST_PG_ENV, "postgresql://postgres@127.0.0.1:5432/postgres")


class UnsafeTestService(Exception):
    """The test services named would touch data that is not the tests' own."""


def redis_db(url: str) -> int:
    """The database number a Redis URL selects (`redis://h:6379/9` -> 9; none given -> 0)."""
    parsed = urlparse(url)
    path = parsed.path.strip("/")
    if path:
        return int(path)
    db = parse_qs(parsed.query).get("db")
    return int(db[0]) if db else 0


def worker_redis_url(url: str, worker: str) -> str:
    """The Redis URL of one pytest-xdist worker (`gw0`, `gw1`, ...): worker N takes the database
    N after the one named, so that workers flushing "their own" database never flush each
    other's. Outside xdist (`worker` empty) the URL is unchanged."""
    if not worker.startswith("gw"):
        return url
    n = int(worker[2:])
    if n == 0:
        return url
    parsed = urlparse(url)
    query = {k: v for k, v in parse_qs(parsed.query).items() if k != "db"}
    kept = "&".join(f"{k}={v}" for k, vs in query.items() for v in vs)
    return parsed._replace(path=f"/{redis_db(url) + n}", query=kept).geturl()


REDIS_URL = worker_redis_url(
    os.environ.get(TEST_REDIS_ENV, "redis://127.0.0.1:6379/9"),
    os.environ.get("PYTEST_XDIST_WORKER", ""),
)


def check_test_redis(test_url: str, env: Mapping[str, str]) -> None:
    """Refuse a test Redis URL the tests may not flush: database 0, or the database of a
    deployment exported in this shell (AGENT_JOBS_BROKER_URL / AGENT_JOBS_REDIS_URL)."""
    taken: dict[int, str] = {}
    for name in DEPLOYMENT_REDIS_ENV:
        other = env.get(name) or ""
        if other.startswith(("redis://", "rediss://")):
            try:
                taken.setdefault(redis_db(other), name)
            except ValueError:
                continue
    free = next(n for n in range(9, 16) if n not in taken)
    fix = (
        f"set {TEST_REDIS_ENV} to a Redis database of the tests' own, "
        f"e.g. redis://127.0.0.1:6379/{free}"
    )
    try:
        db = redis_db(test_url)
    except ValueError:
        raise UnsafeTestService(f"{TEST_REDIS_ENV}={test_url!r} names no database: {fix}") from None
    if db == 0:
        raise UnsafeTestService(
            f"the tests flush their Redis database, and {TEST_REDIS_ENV}={test_url!r} is database "
            f"0 (every client's default): {fix}"
        )
    if db in taken:
        raise UnsafeTestService(
            f"the tests flush their Redis database, and {TEST_REDIS_ENV}={test_url!r} is "
            f"database {db}, the one {taken[db]} uses: {fix}"
        )


def check_test_database_name(name: str) -> None:
    """The tests create and drop only the Postgres databases they name `aj_test_*`."""
    if not name.startswith(TEST_DATABASE_PREFIX):
        raise UnsafeTestService(
            f"the tests create and drop only databases named {TEST_DATABASE_PREFIX}*, not {name!r}"
        )


def new_test_database_name() -> str:
    return f"{TEST_DATABASE_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:6]}"


def database_url_for(name: str) -> str:
    """The URL of test database `name` on the test server (refused unless `aj_test_*`)."""
    check_test_database_name(name)
    return PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"


def require_services() -> bool:
    return os.environ.get("AGENT_JOBS_REQUIRE_SERVICES") == "1"


def _reachable(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection(
            (parsed.hostname or "127.0.0.1", parsed.port or default_port), timeout=1
        ):
            return True
    except OSError:
        return False


@functools.cache
def postgres_available() -> bool:
    if not _reachable(PG_ADMIN_URL, 5432):
        return False
    try:
        import psycopg2

        psycopg2.connect(PG_ADMIN_URL, connect_timeout=2).close()
        return True
    except Exception:
        return False


@functools.cache
def redis_available() -> bool:
    if not _reachable(REDIS_URL, 6379):
        return False
    try:
        import redis

        return bool(redis.Redis.from_url(REDIS_URL, socket_timeout=2).ping())
    except Exception:
        return False
