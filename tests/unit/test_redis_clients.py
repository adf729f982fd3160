"""`agent_jobs.redis_clients`: the one way the runtime makes a Redis client. A URL comes from the
environment, so whatever it holds ends in a client or in one `ConfigError` line naming the
setting; never another exception, never a password in the message. Nothing here connects:
redis-py builds clients lazily."""

from __future__ import annotations

import pytest
import redis
from hypothesis import example, given, settings
from hypothesis import strategies as st
from redis.sentinel import SentinelConnectionPool

from agent_jobs.config import Settings
from agent_jobs.core.errors import ConfigError
from agent_jobs.queue.gate import RedisGate
from agent_jobs.queue.runtime import gate_and_slots
from agent_jobs.redis_clients import (
    MAX_URL_CHARS,
    SentinelTarget,
    check_url,
    client,
    parse_sentinel,
)

SETTING = "AGENT_JOBS_REDIS_URL"


def _refused(url: str, *, setting: str = SETTING) -> str:
    with pytest.raises(ConfigError) as caught:
        check_url(url, setting=setting)
    message = str(caught.value)
    assert message.startswith(f"{setting}="), message
    assert "\n" not in message and len(message) < 400
    return message


def test_a_sentinel_list_gives_every_sentinel_the_database_and_the_password() -> None:
    got = parse_sentinel("sentinel://:s%40cret@h1:26380;sentinel://h2;sentinel://[::1]:5/3")
    assert got == SentinelTarget((("h1", 26380), ("h2", 26379), ("::1", 5)), 3, None, "s@cret")
    # The README's form: the database on the last part.
    assert parse_sentinel("sentinel://h1:26379;sentinel://h2:26379/0").db == 0
    assert parse_sentinel("sentinel://h1;").hosts == (("h1", 26379),)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("sentinel://h:0/0", "port"),
        ("sentinel://h:65536/0", "port"),
        ("sentinel://h:-1/0", "port"),
        ("sentinel://h:26x79/0", "port"),
        ("sentinel://h:" + "9" * 40 + "/0", "port"),
        ("sentinel://:26379/0", "host is missing"),
        ("sentinel:///0", "host is missing"),
        ("sentinel://h1;sentinel://:1", "host is missing"),
        ("sentinel://h/zero", "database"),
        ("sentinel://h/-1", "database"),
        ("sentinel://h/" + "1" * 30, "database"),
        ("sentinel://h/\u0661", "database"),  # an Arabic-Indic one: a digit, not a number here
        ("sentinel://h/1;sentinel://g/2", "different databases"),
        ("sentinel://h\x00ost/0", "control character"),
        ("sentinel://h/0\n", "control character"),
        ("sentinel://h;redis://g", "every part"),
        ("sentinel://h/0?socket_timeout=1", "no query"),
        ("sentinel://[zz]:1", "address"),
        ("sentinel://[::1/0", "IPv6"),
        ("sentinel://bad host/0", "control character"),
        ("sentinel://h*st/0", "host name"),
        ("sentinel://" + "h" * MAX_URL_CHARS, "longer than"),
        ("http://h:6379/0", "not a Redis URL"),
        ("h:6379", "not a Redis URL"),
        ("", "not a Redis URL"),
        ("redis://h:70000/0", "port"),
        ("redis:///0", "host is missing"),
        ("redis://h/db1", "database"),
        ("unix://", "socket's path"),
    ],
)
def test_a_bad_url_is_one_line_naming_the_setting(url: str, why: str) -> None:
    assert why in _refused(url)


def test_the_password_never_reaches_the_message() -> None:
    for url in ("redis://:hunter2@h:99999/0", "sentinel://user:hunter2@h:0/0;sentinel://g"):
        message = _refused(url, setting="AGENT_JOBS_BROKER_URL")
        assert "hunter2" not in message
        assert message.startswith("AGENT_JOBS_BROKER_URL=")


def test_sentinels_without_a_service_name_are_refused_naming_the_setting() -> None:
    for master in (None, "", "  "):
        with pytest.raises(ConfigError, match=r"^AGENT_JOBS_SENTINEL_MASTER is not set"):
            client("sentinel://h1:26379/0", master=master)
    # A server URL needs none.
    assert isinstance(client("redis://127.0.0.1:6379/4", master=None), redis.Redis)


def test_a_sentinel_url_makes_a_client_of_the_service_primary() -> None:
    made = client(
        "sentinel://:pw@h1:26380;sentinel://h2/4", master="svc", timeout_s=None, connect_timeout_s=2
    )
    pool = made.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "svc" and pool.is_master
    assert pool.connection_kwargs["db"] == 4
    assert pool.connection_kwargs["password"] == "pw"
    assert pool.connection_kwargs["socket_timeout"] is None  # a pub/sub reader blocks
    asked = pool.sentinel_manager.sentinels
    where = [s.connection_pool.connection_kwargs for s in asked]
    assert [(w["host"], w["port"]) for w in where] == [("h1", 26380), ("h2", 26379)]
    # Questions to the Sentinels are bounded even when the data connection's are not.
    assert all(s.connection_pool.connection_kwargs["socket_timeout"] == 2 for s in asked)


def test_server_urls_keep_redis_py_semantics() -> None:
    made = client("redis://h:6390/7", master=None, timeout_s=2)
    kwargs = made.connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"], kwargs["socket_timeout"]) == (
        "h", 6390, 7, 2,
    )  # fmt: skip
    unix = client("unix:///run/redis.sock?db=2", master=None)
    assert unix.connection_pool.connection_kwargs["path"] == "/run/redis.sock"


def test_under_sentinel_the_broker_serves_the_directory_and_caps_can_be_on() -> None:
    url = "sentinel://127.0.0.1:1;sentinel://127.0.0.1:2/0"
    cfg = Settings(broker_url=url, sentinel_master="svc", tenant_cap=2, fair_share=True)
    assert cfg.directory_redis_url == url
    gate, _ = gate_and_slots(cfg)  # refused before: caps needed AGENT_JOBS_REDIS_URL
    assert isinstance(gate, RedisGate)
    assert gate._redis.connection_pool.service_name == "svc"  # type: ignore[attr-defined]


_HOST = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?(\.[a-z0-9]{1,10}){0,3}\Z")


@settings(max_examples=200, deadline=None)
@given(
    hosts=st.lists(
        st.tuples(_HOST, st.one_of(st.none(), st.integers(1, 65535))), min_size=1, max_size=5
    ),
    db=st.one_of(st.none(), st.integers(0, 2**31 - 1)),
)
def test_any_well_formed_list_parses_back(
    hosts: list[tuple[str, int | None]], db: int | None
) -> None:
    parts = [f"sentinel://{h}" + (f":{p}" if p is not None else "") for h, p in hosts]
    url = ";".join(parts) + (f"/{db}" if db is not None else "")
    got = parse_sentinel(url)
    assert got.hosts == tuple((h, p if p is not None else 26379) for h, p in hosts)
    assert got.db == (db or 0)


_HOSTILE = st.one_of(
    st.text(max_size=300),
    st.text(max_size=300).map(lambda s: "sentinel://" + s),
    st.text(max_size=300).map(lambda s: "redis://" + s),
    st.lists(st.text(max_size=40), max_size=6).map(
        lambda xs: ";".join("sentinel://" + x for x in xs)
    ),
    st.builds(
        lambda h, p, d: f"sentinel://{h}:{p}/{d}",
        st.text(max_size=20),
        st.text(max_size=12),
        st.text(max_size=12),
    ),
    st.integers(min_value=-(10**30), max_value=10**30).map(lambda p: f"sentinel://h:{p}/0"),
    st.integers(min_value=1, max_value=3 * MAX_URL_CHARS).map(lambda n: "sentinel://" + "a" * n),
)


# Found by CI: the URL was cut to 120 characters before its repr, and escapes (`\U0002ebe1` is
# ten characters of one) made the message 400 characters long.
_ESCAPED = "0" * 79 + "\x1f" * 22 + "\U00018cd6" * 8 + "\U0002ebe1" * 40


@settings(max_examples=600, deadline=None)
@given(url=_HOSTILE)
@example(url=_ESCAPED)
@example(url="redis://" + "\U0002ebe1" * 400)
def test_any_text_is_a_client_or_one_config_error_line(url: str) -> None:
    try:
        made = client(url, master="svc", setting="AGENT_JOBS_BROKER_URL")
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith("AGENT_JOBS_BROKER_URL=")
        assert "\n" not in message and "\x00" not in message and len(message) < 400
        return
    assert isinstance(made, redis.Redis)
    made.close()


def test_a_long_password_is_hidden_before_the_url_is_cut() -> None:
    """A cut through the user info would have left the password's start in the message."""
    secret = "s3cr3t" * 40
    with pytest.raises(ConfigError) as raised:
        client(f"redis://user:{secret}@host:6379/0 ", master="svc", setting="AGENT_JOBS_BROKER_URL")
    assert "s3cr3t" not in str(raised.value) and "//***@host" in str(raised.value)
