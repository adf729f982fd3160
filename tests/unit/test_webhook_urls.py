"""The SSRF guard and the signatures, without a network: hostile URLs and resolver answers are
refused, the schedule spans about a day, and our signatures verify with `standardwebhooks`."""

from __future__ import annotations

import ipaddress
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from standardwebhooks import Webhook

from agent_jobs.notify import sender, signing
from agent_jobs.notify.retry import MAX_ATTEMPTS, SCHEDULE_S, retry_in_s
from agent_jobs.notify.urls import UnsafeUrl, UrlPolicy, check, forbidden, parse

STRICT = UrlPolicy()


def _resolver(*addrs: str) -> Any:
    def resolve(host: str, port: int, **_: Any) -> list[tuple[Any, ...]]:
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, 1, 6, "", (a, port)) for a in addrs
        ]

    return resolve


@pytest.mark.parametrize(
    "addr",
    [
        "127.0.0.1",
        "10.0.0.5",
        "172.16.3.4",
        "192.168.1.1",
        "169.254.169.254",  # cloud metadata
        "100.64.0.1",  # carrier-grade NAT
        "0.0.0.0",
        "::1",
        "fe80::1",
        "fd00:ec2::254",  # AWS metadata over IPv6
        "::ffff:127.0.0.1",  # IPv4-mapped
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
        "224.0.0.1",
    ],
)
def test_inside_addresses_are_refused(addr: str) -> None:
    assert forbidden(ipaddress.ip_address(addr), STRICT) is not None
    with pytest.raises(UnsafeUrl):
        check("https://hooks.example.com/x", STRICT, _resolver(addr))


def test_one_inside_answer_among_outside_ones_refuses_the_name() -> None:
    with pytest.raises(UnsafeUrl, match=r"10\.0\.0\.1"):
        check("https://hooks.example.com/x", STRICT, _resolver("93.184.216.34", "10.0.0.1"))


def test_an_operator_allowed_network_is_reachable() -> None:
    allowed = UrlPolicy.of(["10.20.0.0/16"], allow_http=False)
    check("https://hooks.internal/x", allowed, _resolver("10.20.1.2"))
    with pytest.raises(UnsafeUrl):
        check("https://hooks.internal/x", allowed, _resolver("10.21.1.2"))


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://hooks.example.com/", "https required"),
        ("ftp://hooks.example.com/", "scheme"),
        ("https://user:pw@hooks.example.com/", "credentials"),
        ("https:///nohost", "no host"),
        ("https://hooks.example.com/a b", "whitespace"),
        ("https://hooks.example.com:99999/", "not a URL"),
        ("https://" + "a" * 2100 + ".com/", "longer than"),
        ("file:///etc/passwd", "scheme"),
        ("https://127.0.0.1/", "loopback"),
        ("https://[::1]/", "loopback"),
        ("https://2130706433/", "resolve"),  # a decimal IP is a name here, and does not resolve
    ],
)
def test_hostile_urls_are_refused(url: str, why: str) -> None:
    with pytest.raises(UnsafeUrl, match=why):
        check(url, STRICT, _resolver_failing)


def _resolver_failing(host: str, port: int, **_: Any) -> list[tuple[Any, ...]]:
    raise socket.gaierror(f"{host}: not known")


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_refused_or_a_checked_target(url: str) -> None:
    """Whatever the text: `UnsafeUrl`, or a target whose address the guard allowed."""
    try:
        target = check(url, STRICT, _resolver("93.184.216.34"))
    except UnsafeUrl:
        return
    assert target.scheme == "https" and target.host and 0 < target.port < 65536


@settings(max_examples=150, deadline=None)
@given(st.ip_addresses())
def test_every_address_the_guard_allows_is_global(ip: Any) -> None:
    if forbidden(ip, STRICT) is None:
        assert ip.is_global and not ip.is_multicast


def test_http_only_when_allowed() -> None:
    with pytest.raises(UnsafeUrl):
        parse("http://hooks.example.com/", STRICT)
    assert parse("http://hooks.example.com/a?b=1", UrlPolicy(allow_http=True)).path == "/a?b=1"


def test_signature_verifies_with_standardwebhooks_and_either_rotated_secret() -> None:
    old, new = signing.new_secret(), signing.new_secret()
    body = b'{"type":"task.completed","data":{}}'
    import time

    headers = signing.headers("msg_1", int(time.time()), body, [new, old])
    assert Webhook(old).verify(body, headers) == {"type": "task.completed", "data": {}}
    assert Webhook(new).verify(body, headers)
    with pytest.raises(Exception, match="No matching signature"):
        Webhook(signing.new_secret()).verify(body, headers)
    with pytest.raises(Exception, match="No matching signature"):
        Webhook(old).verify(body + b" ", headers)


def test_the_schedule_spans_about_a_day_then_dead_letters() -> None:
    total = sum(SCHEDULE_S)
    assert 20 * 3600 < total < 30 * 3600
    assert retry_in_s(MAX_ATTEMPTS, 0.5) is None
    lows = [retry_in_s(n, 0.0) for n in range(1, MAX_ATTEMPTS)]
    highs = [retry_in_s(n, 0.999) for n in range(1, MAX_ATTEMPTS)]
    assert all(lo < hi for lo, hi in zip(lows, highs, strict=True))  # jittered


class _Hostile(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path == "/redirect":
            self.send_response(307)
            self.send_header("location", "http://169.254.169.254/latest/meta-data/")
            self.end_headers()
        elif self.path == "/huge":
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"x" * (sender.MAX_RESPONSE_BYTES * 4))
        elif self.path == "/slow":
            threading.Event().wait(1.0)
            self.send_response(200)
            self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def hostile() -> Any:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


LOCAL = UrlPolicy.of(["127.0.0.1/32"], allow_http=True)


def test_hostile_answers_are_bounded(hostile: str) -> None:
    redirect = sender.post(hostile + "/redirect", {}, b"{}", LOCAL, 2.0)
    assert (redirect.status, redirect.ok) == (307, False)
    assert "not followed" in (redirect.error or "")
    huge = sender.post(hostile + "/huge", {}, b"{}", LOCAL, 2.0)
    assert huge.ok  # read up to the bound, not whole
    slow = sender.post(hostile + "/slow", {}, b"{}", LOCAL, 0.2)
    assert not slow.ok and "timed out" in (slow.error or "")
    refused = sender.post(hostile + "/x", {}, b"{}", UrlPolicy(allow_http=True), 2.0)
    assert refused.error is not None and refused.error.startswith("refused: ")
