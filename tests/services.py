"""Where the test services are, and whether they answer."""

from __future__ import annotations

import functools
import os
import socket
from urllib.parse import urlparse

PG_ADMIN_URL = os.environ.get(
    "AGENT_JOBS_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("AGENT_JOBS_TEST_REDIS_URL", "redis://127.0.0.1:6379/9")


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
