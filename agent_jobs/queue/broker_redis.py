"""A `redis.Redis` client for the broker's Redis, whether the broker URL names the server
(`redis://host:6379/0`) or the Sentinels that know it (`sentinel://h1:26379;sentinel://h2:26379/0`,
the service named by `AGENT_JOBS_SENTINEL_MASTER`). Under Sentinel the client asks the Sentinels
for the current primary at each connection, so it follows a failover as the worker's own
transport does."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import redis
from redis.sentinel import Sentinel

TIMEOUT_S = 5.0


def is_sentinel(url: str) -> bool:
    """Whether `url` names Sentinels: one `sentinel://` URL or a `;`-separated list of them."""
    parts = [p.strip() for p in url.split(";") if p.strip()]
    return bool(parts) and all(p.startswith("sentinel://") for p in parts)


def sentinels_of(url: str) -> tuple[list[tuple[str, int]], int, str | None]:
    """The Sentinels' (host, port) pairs, the database number (the first URL's path, default 0)
    and the password (the first URL's, for the data servers, as kombu reads it)."""
    parts = [urlsplit(p.strip()) for p in url.split(";") if p.strip()]
    hosts = [(p.hostname or "127.0.0.1", p.port or 26379) for p in parts]
    path = parts[0].path.strip("/")
    return hosts, int(path) if path.isdigit() else 0, parts[0].password


def broker_redis(url: str, master: str, *, timeout_s: float = TIMEOUT_S) -> Any:
    """A client of the broker's Redis (see the module)."""
    if not is_sentinel(url):
        return redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
    hosts, db, password = sentinels_of(url)
    sentinel = Sentinel(
        hosts,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        sentinel_kwargs={"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s},
    )
    return sentinel.master_for(
        master,
        db=db,
        password=password,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
    )
