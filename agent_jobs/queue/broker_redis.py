"""A `redis.Redis` client for the broker's Redis, whether the broker URL names the server
(`redis://host:6379/0`) or the Sentinels that know it (`sentinel://h1:26379;sentinel://h2:26379/0`,
the service named by `AGENT_JOBS_SENTINEL_MASTER`): `redis_clients.client`, its errors naming
`AGENT_JOBS_BROKER_URL`. Under Sentinel the client asks the Sentinels for the current primary
at each connection, so it follows a failover as the worker's own transport does."""

from __future__ import annotations

import redis

from agent_jobs.redis_clients import BROKER_URL_SETTING, TIMEOUT_S, client
from agent_jobs.redis_clients import is_sentinel as is_sentinel  # noqa: PLC0414

REDIS_BROKER_SCHEMES = ("redis://", "rediss://")


def is_redis_broker(url: str) -> bool:
    """Whether the broker is a Redis this process can read (a server or Sentinels)."""
    return url.startswith(REDIS_BROKER_SCHEMES) or is_sentinel(url)


def broker_redis(url: str, master: str | None, *, timeout_s: float = TIMEOUT_S) -> redis.Redis:
    """A client of the broker's Redis (see the module)."""
    return client(url, master=master, timeout_s=timeout_s, setting=BROKER_URL_SETTING)
