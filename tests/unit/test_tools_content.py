"""Content is data at the tool boundary: what an HTTP business system answers is bounded in size
and time, must be a JSON object, and is cleaned of what storage cannot hold, and whatever it
sends ends as a classified outcome, never an exception out of the executor.

Over real sockets, against a stdlib server that sends exactly the status, headers and bytes a
test gives it (hypothesis generates many of them).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_jobs.core.text import clean_json, is_clean
from agent_jobs.tools import (
    Credential,
    HttpAdapter,
    Invocation,
    Ok,
    Rejected,
    ServiceFailed,
    ServiceThrottled,
    SystemsConfig,
    Throttled,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    TransportFailed,
    Unknown,
)
from agent_jobs.tools.http import MAX_RESPONSE_BYTES
from agent_jobs.tools.refund_tools import ORDERS_URL, PAYMENTS_URL, refund_tools
from agent_jobs.tools.testing import FakeCredentialProvider, InMemoryAuditSink
from tests.unit.test_tools_executor import CTX, READ_CTX, refund_call

# The server fixture is module-scoped and reset by each example, so sharing it is safe.
FIXTURE_OK = [HealthCheck.function_scoped_fixture]
CRED = Credential(token="tok", expires_at=datetime(2030, 1, 1, tzinfo=UTC), scope="s")


@dataclass
class Canned:
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})
    body: bytes = b"{}"
    trickle_s: float = 0.0  # pause between bytes of the body
    chunked: bool = False  # send the body chunked, without Content-Length
    posts: int = 0


@pytest.fixture(scope="module")
def canned() -> Iterator[tuple[Canned, str]]:
    state = Canned()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            if self.command == "POST":
                state.posts += 1
            self.send_response(state.status)
            for k, v in state.headers.items():
                self.send_header(k, v)
            if state.chunked:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Content-Length", str(len(state.body)))
            self.end_headers()
            try:
                if state.chunked:
                    for i in range(0, len(state.body), 65536):
                        part = state.body[i : i + 65536]
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    self.wfile.write(b"0\r\n\r\n")
                elif state.trickle_s:
                    for i in range(len(state.body)):
                        self.wfile.write(state.body[i : i + 1])
                        self.wfile.flush()
                        time.sleep(state.trickle_s)
                else:
                    self.wfile.write(state.body)
            except OSError:
                self.close_connection = True

        do_GET = do_POST = _serve

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def answer(
    canned: tuple[Canned, str],
    body: bytes,
    *,
    status: int = 200,
    headers: dict[str, str] | None = None,
    trickle_s: float = 0.0,
    chunked: bool = False,
) -> str:
    state, url = canned
    state.status, state.body, state.trickle_s, state.chunked = status, body, trickle_s, chunked
    state.headers = {"Content-Type": "application/json"} if headers is None else headers
    return url


def get(url: str, timeout_s: float = 2.0) -> Any:
    a = HttpAdapter("GET", "/orders/{order_id}", "U", config=SystemsConfig(environ={"U": url}))
    inv = Invocation(tool="t", tool_version="1", args={"order_id": "1"}, timeout_s=timeout_s,
                     credential=CRED)  # fmt: skip
    return a.invoke(inv).value


def executor(url: str) -> ToolExecutor:
    config = SystemsConfig(environ={ORDERS_URL: url, PAYMENTS_URL: url})
    return ToolExecutor(
        ToolRegistry(refund_tools(config)),
        FakeCredentialProvider(),
        InMemoryAuditSink(),
        sleep=lambda s: None,
    )


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURE_OK)
@given(st.dictionaries(st.text(), json_values, max_size=5))
def test_any_json_object_arrives_cleaned_and_otherwise_unchanged(
    canned: tuple[Canned, str], value: dict[str, Any]
) -> None:
    # json.dumps spells NUL and lone surrogates as escapes: what a service may well send.
    got = get(answer(canned, json.dumps(value).encode()))
    assert got == clean_json(value) and is_clean(got)


@settings(max_examples=80, deadline=None, suppress_health_check=FIXTURE_OK)
@given(st.binary(max_size=300), st.sampled_from([200, 201, 404, 429, 500, 503]))
def test_any_bytes_end_as_a_classified_outcome(
    canned: tuple[Canned, str], body: bytes, status: int
) -> None:
    url = answer(canned, body, status=status)
    out = executor(url).execute(ToolCall(tool="orders.get", args={"order_id": "1"}), READ_CTX)
    assert isinstance(out, (Ok, Rejected, Throttled))
    if isinstance(out, Ok):
        assert out.result is None or isinstance(out.result, dict)  # empty body: nothing to read
        assert is_clean(out.result)
    assert is_clean(out.model_dump())


@pytest.mark.parametrize(
    ("body", "headers", "code"),
    [
        (b"[1, 2]", None, "invalid_response"),
        (b'"a string"', None, "invalid_response"),
        (b"42", None, "invalid_response"),
        (b'{"total": NaN}', None, "invalid_response"),
        (b'{"total": Infinity}', None, "invalid_response"),
        (b'{"a": "\xff\xfe"}', None, "invalid_response"),
        (b"[" * 100_000 + b"]" * 100_000, None, "invalid_response"),
        (b'{"order_id": "1"}', {"Content-Type": "text/html"}, "invalid_response"),
        (b"<html>hi</html>", {"Content-Type": "text/html; charset=utf-8"}, "invalid_response"),
    ],
)
def test_unusable_2xx_bodies_are_clean_failures(
    canned: tuple[Canned, str], body: bytes, headers: dict[str, str] | None, code: str
) -> None:
    url = answer(canned, body, headers=headers)
    with pytest.raises(ServiceFailed) as e:
        get(url)
    assert e.value.code == code and not e.value.transient


def test_json_media_types_and_a_missing_content_type_are_accepted(
    canned: tuple[Canned, str],
) -> None:
    for headers in ({"Content-Type": "application/problem+json"}, {}):
        assert get(answer(canned, b'{"a": 1}', headers=headers)) == {"a": 1}


def test_a_body_over_the_limit_is_refused_declared_or_not(canned: tuple[Canned, str]) -> None:
    big = json.dumps({"note": "x" * MAX_RESPONSE_BYTES}).encode()
    with pytest.raises(ServiceFailed) as e:
        get(answer(canned, big))
    assert e.value.code == "response_too_large"
    # chunked, no Content-Length: counted while reading
    with pytest.raises(ServiceFailed) as e:
        get(answer(canned, big, chunked=True))
    assert e.value.code == "response_too_large"
    assert get(answer(canned, b'{"small": true}', chunked=True)) == {"small": True}


def test_a_trickled_body_is_cut_at_the_tool_timeout_not_its_length(
    canned: tuple[Canned, str],
) -> None:
    # Each byte comes well within the read timeout; the whole body would take 4 s.
    url = answer(canned, b'{"a": "' + b"x" * 200 + b'"}', trickle_s=0.02)
    started = time.monotonic()
    with pytest.raises(TransportFailed) as e:
        get(url, timeout_s=0.5)
    assert e.value.reason == "timeout" and e.value.sent
    assert time.monotonic() - started < 1.5


def test_a_2xx_too_large_for_a_write_is_unknown_not_ok(canned: tuple[Canned, str]) -> None:
    state, _ = canned
    posts = state.posts
    url = answer(canned, json.dumps({"x": "y" * MAX_RESPONSE_BYTES}).encode(), status=201)
    out = executor(url).execute(refund_call(), CTX)
    assert isinstance(out, Unknown) and "response_too_large" in out.message
    assert state.posts == posts + 1


def test_error_bodies_are_bounded_and_cleaned(canned: tuple[Canned, str]) -> None:
    err = {"error": {"code": "bad\x00" + "c" * 500, "message": "m\ud800" * 1000}}
    url = answer(canned, json.dumps(err).encode(), status=404)
    out = executor(url).execute(ToolCall(tool="orders.get", args={"order_id": "1"}), READ_CTX)
    assert isinstance(out, Rejected)
    assert out.code.startswith("bad\ufffd") and len(out.code) <= 100
    assert len(out.message) <= 500 and is_clean(out.model_dump())


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (429, {"Retry-After": "3"}, 3.0),
        (429, {}, None),
        (429, {"Retry-After": "whenever"}, None),
        (503, {"Retry-After": "2"}, 2.0),
        (503, {"Retry-After": "-1"}, 0.0),
    ],
)
def test_429_and_503_with_retry_after_are_throttles(
    canned: tuple[Canned, str], status: int, headers: dict[str, str], expected: float | None
) -> None:
    body = json.dumps({"error": {"code": "rate_limited", "message": "later"}}).encode()
    url = answer(
        canned, body, status=status, headers={"Content-Type": "application/json", **headers}
    )
    with pytest.raises(ServiceThrottled) as e:
        get(url)
    assert e.value.retry_after_s == expected and e.value.status == status


def test_a_retry_after_date_is_read_against_the_servers_date(canned: tuple[Canned, str]) -> None:
    # The stdlib server stamps its own `Date`; thirty seconds after it is about thirty seconds.
    when = formatdate(time.time() + 30, usegmt=True)
    url = answer(canned, b"{}", status=429, headers={"Retry-After": when})
    with pytest.raises(ServiceThrottled) as e:
        get(url)
    assert e.value.retry_after_s is not None and 27.0 <= e.value.retry_after_s <= 31.0


def test_a_503_without_retry_after_says_nothing_about_a_write(canned: tuple[Canned, str]) -> None:
    url = answer(canned, b'{"error": {"code": "unavailable", "message": ""}}', status=503)
    out = executor(url).execute(refund_call(), CTX)
    assert isinstance(out, Unknown)
    url = answer(canned, b"{}", status=503, headers={"Retry-After": "1"})
    out = executor(url).execute(refund_call(), CTX)
    assert out == Throttled(retry_after_s=1.0, code="http_503", message="Service Unavailable",
                            status=503)  # fmt: skip
