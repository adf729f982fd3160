"""The one way the runtime makes a Redis client: for the broker's Redis and for
`AGENT_JOBS_REDIS_URL` (the tenant directory, the dispatch gate, model-call slots, rate buckets,
the switches' notifications).

A URL names a server (`redis://host:6379/0`, `rediss://...`, `unix:///path?db=0`) or the
Sentinels that know one (`sentinel://h1:26379;sentinel://h2:26379/0`, the service named by
`AGENT_JOBS_SENTINEL_MASTER`). Under Sentinel the client is redis-py's `master_for`: its pool asks
the Sentinels for the primary at every new connection, and a connection that finds a replica
(a demoted primary answers READONLY) is dropped, so the client follows a failover on its next
command. Lua scripts registered on it reload themselves (`Script` sends EVALSHA, and on
NOSCRIPT, the new primary's empty script cache, loads the script again); pipelines and pub/sub
take their connections from the same pool.

Settings are read from outside, so the URL is parsed strictly: a bad host, port or database, a
control character or a URL past `MAX_URL_CHARS` is a `ConfigError` of one line naming the
setting (the password never shown), not a traceback at the first command.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, unquote, urlsplit

from agent_jobs.core.errors import ConfigError

if TYPE_CHECKING:  # redis is imported where a client is made: the settings parse without it
    import redis

TIMEOUT_S = 5.0
SENTINEL_PORT = 26379
MAX_URL_CHARS = 4096
# How much of a refused URL an error shows.
SHOWN_CHARS = 160
MAX_DB = 2**31 - 1  # Redis's `databases` is an int; anything past it cannot name one
SERVER_SCHEMES = ("redis", "rediss", "unix")
REDIS_URL_SETTING = "AGENT_JOBS_REDIS_URL"
BROKER_URL_SETTING = "AGENT_JOBS_BROKER_URL"
MASTER_SETTING = "AGENT_JOBS_SENTINEL_MASTER"

_HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?$")
_CONTROL = re.compile(r"[\x00-\x20\x7f]")
_USERINFO = re.compile(r"//[^/;]*@")


@dataclass(frozen=True)
class SentinelTarget:
    """What a `sentinel://` URL says: the Sentinels to ask, the database and the data
    servers' credentials (the first URL that gives them, as kombu reads them)."""

    hosts: tuple[tuple[str, int], ...]
    db: int
    username: str | None
    password: str | None


def is_sentinel(url: str) -> bool:
    """Whether `url` names Sentinels: one `sentinel://` URL or a `;`-separated list of them."""
    parts = [p.strip() for p in url.split(";") if p.strip()]
    return bool(parts) and all(p.startswith("sentinel://") for p in parts)


def parse_sentinel(url: str, *, setting: str = REDIS_URL_SETTING) -> SentinelTarget:
    """The Sentinels of a `sentinel://h1:26379;sentinel://h2:26379/0` URL. Each part needs a
    host; the port defaults to 26379; the database (a path of digits, on any one part, or the
    same on several) defaults to 0."""
    _check_text(url, setting)
    parts = [p.strip() for p in url.split(";") if p.strip()]
    if not parts:
        raise _bad(setting, url, "names no Sentinel")
    hosts: list[tuple[str, int]] = []
    dbs: set[int] = set()
    username = password = None
    for part in parts:
        if not part.startswith("sentinel://"):
            raise _bad(setting, url, "every part of a `;` list must be a sentinel:// URL")
        split = _split(part, setting, url)
        if split.query or split.fragment:
            raise _bad(setting, url, "a sentinel:// URL takes no query or fragment")
        hosts.append((_host(split, setting, url), _port(split, setting, url) or SENTINEL_PORT))
        db = _db(split.path, setting, url)
        if db is not None:
            dbs.add(db)
        if password is None and split.password is not None:
            username = unquote(split.username) if split.username else None
            password = unquote(split.password)
    if len(dbs) > 1:
        raise _bad(setting, url, f"the parts name different databases {sorted(dbs)}")
    return SentinelTarget(tuple(hosts), dbs.pop() if dbs else 0, username, password)


def check_url(url: str, *, setting: str = REDIS_URL_SETTING) -> None:
    """Raise `ConfigError` (one line, naming `setting`) unless `url` is one `client` takes."""
    _check_text(url, setting)
    if url.startswith("sentinel://"):
        parse_sentinel(url, setting=setting)
        return
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in SERVER_SCHEMES:
        raise _bad(setting, url, "not a Redis URL (redis://, rediss://, unix:// or sentinel://)")
    split = _split(url, setting, url)
    if scheme == "unix":
        if not split.path or split.path == "/":
            raise _bad(setting, url, "a unix:// URL needs the socket's path")
        return
    _host(split, setting, url)
    _port(split, setting, url)
    _db(split.path, setting, url)


def client(
    url: str,
    *,
    master: str | None,
    timeout_s: float | None = TIMEOUT_S,
    connect_timeout_s: float | None = None,
    setting: str = REDIS_URL_SETTING,
    **options: Any,
) -> redis.Redis:
    """A redis-py client for `url` (see the module). `master` is the Sentinel service name
    (`settings.sentinel_master`), needed only for `sentinel://`. `timeout_s` bounds each
    command (None: a blocking reader such as a pub/sub listener); `connect_timeout_s`, by
    default the same, bounds opening a connection and every question to a Sentinel. Further
    `options` (`health_check_interval`, ...) go to the connections."""
    import redis  # noqa: PLC0415
    from redis.sentinel import Sentinel  # noqa: PLC0415

    check_url(url, setting=setting)
    connect_s = connect_timeout_s if connect_timeout_s is not None else timeout_s
    if not is_sentinel(url):
        try:
            made: redis.Redis = redis.Redis.from_url(
                url, socket_timeout=timeout_s, socket_connect_timeout=connect_s, **options
            )
        except (ValueError, TypeError) as exc:  # what redis-py's parser still refuses
            raise _bad(setting, url, str(exc).splitlines()[0] if str(exc) else "refused") from None
        return made
    if master is None or not master.strip():
        raise ConfigError(
            f"{MASTER_SETTING} is not set: {setting} names Sentinels, which need the name of "
            "the service whose primary they elect"
        )
    target = parse_sentinel(url, setting=setting)
    # A Sentinel that does not answer must not hang the caller: its questions are bounded
    # even when the data connection's commands are not (a pub/sub reader).
    asked = connect_s if connect_s is not None else TIMEOUT_S
    sentinel = Sentinel(
        list(target.hosts),
        sentinel_kwargs={"socket_timeout": asked, "socket_connect_timeout": asked},
    )
    primary: redis.Redis = sentinel.master_for(
        master.strip(),
        db=target.db,
        username=target.username,
        password=target.password,
        socket_timeout=timeout_s,
        socket_connect_timeout=connect_s,
        **options,
    )
    return primary


def _check_text(url: str, setting: str) -> None:
    if not isinstance(url, str):
        raise ConfigError(f"{setting} must be a string, not {type(url).__name__}")
    if len(url) > MAX_URL_CHARS:
        raise _bad(setting, url, f"longer than {MAX_URL_CHARS} characters")
    if _CONTROL.search(url):
        raise _bad(setting, url, "contains a space or a control character")


def _split(part: str, setting: str, url: str) -> SplitResult:
    try:
        return urlsplit(part)
    except ValueError as exc:  # e.g. an unbalanced IPv6 bracket
        raise _bad(setting, url, str(exc)) from None


def _host(split: SplitResult, setting: str, url: str) -> str:
    host = split.hostname
    if not host:
        raise _bad(setting, url, "a host is missing")
    if "[" in split.netloc:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise _bad(setting, url, "the bracketed host is not an IPv6 address") from None
        return host
    if not _HOSTNAME.match(host):
        raise _bad(setting, url, "the host is not a host name or an IPv4 address")
    return host


def _port(split: SplitResult, setting: str, url: str) -> int | None:
    try:
        port = split.port
    except ValueError:
        raise _bad(setting, url, "the port is not a number from 1 to 65535") from None
    if port == 0:
        raise _bad(setting, url, "the port is not a number from 1 to 65535")
    return port


def _db(path: str, setting: str, url: str) -> int | None:
    name = path[1:] if path.startswith("/") else path
    if name == "":
        return None
    if not (name.isascii() and name.isdigit()) or len(name) > 10 or int(name) > MAX_DB:
        raise _bad(setting, url, "the database (the path) is not a number from 0")
    return int(name)


def _bad(setting: str, url: str, why: str) -> ConfigError:
    return ConfigError(f"{setting}={_shown(url)}: {why}")


def _shown(url: str) -> str:
    """The URL in one line, its password hidden, its length bounded (it goes to a log). The
    password is hidden before anything is cut (a cut through it would leave its start shown),
    and the cut is made on the text shown, escapes included (`\U0002ebe1` is ten characters of
    one). A URL past `MAX_URL_CHARS` is shown by its length alone."""
    if len(url) > MAX_URL_CHARS:
        return f"({len(url)} characters)"
    shown = repr(_USERINFO.sub("//***@", url))
    return shown if len(shown) <= SHOWN_CHARS else shown[:SHOWN_CHARS] + "..."
