"""HttpAdapter and the executor over real sockets, against a tiny stdlib server on 127.0.0.1:0.

The server counts requests, so "a write is never retried" is asserted as "exactly one request
reached the service", not as "the adapter was called once".
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agent_jobs.core.hashing import action_hash
from agent_jobs.tools import (
    Credential,
    ExecContext,
    HttpAdapter,
    Invocation,
    Ok,
    PolicyStamp,
    Rejected,
    ServiceFailed,
    ServiceRejected,
    ServiceThrottled,
    SystemsConfig,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    TransportFailed,
    Unknown,
)
from agent_jobs.tools.refund_tools import ORDERS_URL, PAYMENTS_URL, refund_tools
from agent_jobs.tools.testing import FakeCredentialProvider, InMemoryAuditSink

HANG = "hang"
DROP = "drop"
REFUND = {
    "refund_id": "rf_3301",
    "payment_id": "pay_8472_b",
    "amount_minor": 200_000,
    "currency": "INR",
    "status": "processing",
    "idempotency_key": "refund:req-8472:pay_8472_b",
}


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class FakeService:
    """Plays a script per (method, path without query); the last step repeats."""

    script: dict[tuple[str, str], list[Any]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    url: str = ""

    def count(self, method: str, path: str) -> int:
        return sum(1 for s in self.seen if s.method == method and s.path.split("?")[0] == path)


def _handler(service: FakeService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            service.seen.append(
                Seen(self.command, self.path, dict(self.headers), json.loads(raw) if raw else None)
            )
            steps = service.script.get((self.command, self.path.split("?")[0]), [(404, {})])
            n = service.count(self.command, self.path.split("?")[0])
            step = steps[min(n, len(steps)) - 1]
            if step == HANG:
                service.release.wait(10)
                return
            if step == DROP:
                # The request was read in full, then the connection dies without an answer.
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            status, body = step
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

    return Handler


@pytest.fixture
def service() -> Iterator[FakeService]:
    svc = FakeService()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(svc))
    server.daemon_threads = True
    svc.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield svc
    svc.release.set()
    server.shutdown()
    server.server_close()


def closed_port_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


CRED = Credential(token="tok-abc", expires_at=datetime(2030, 1, 1, tzinfo=UTC), scope="s")


def inv(args: dict[str, Any], *, key: str | None = None, timeout_s: float = 2.0) -> Invocation:
    return Invocation(
        tool="t",
        tool_version="1",
        args=args,
        timeout_s=timeout_s,
        credential=CRED,
        idempotency_key=key,
        trace_id="trace-1",
    )


def adapter(method: str, path: str, url: str) -> HttpAdapter:
    return HttpAdapter(method, path, "SVC_URL", config=SystemsConfig(environ={"SVC_URL": url}))


def test_post_sends_json_body_key_and_bearer_and_returns_201(service: FakeService) -> None:
    service.script[("POST", "/refunds")] = [(201, REFUND)]
    res = adapter("POST", "/refunds", service.url).invoke(
        inv({"payment_id": "pay_8472_b", "amount_minor": 200_000, "currency": "INR"}, key="k1")
    )
    assert res.status_code == 201 and res.value == REFUND
    seen = service.seen[0]
    assert seen.body == {"payment_id": "pay_8472_b", "amount_minor": 200_000, "currency": "INR"}
    assert seen.headers["Idempotency-Key"] == "k1"
    assert seen.headers["Authorization"] == "Bearer tok-abc"
    assert seen.headers["X-Trace-Id"] == "trace-1"


def test_get_fills_path_and_query_and_quotes(service: FakeService) -> None:
    service.script[("GET", "/orders/84%2F72")] = [(200, {"order_id": "84/72"})]
    service.script[("GET", "/payments")] = [(200, {"payments": []})]
    a = adapter("GET", "/orders/{order_id}", service.url)
    assert a.invoke(inv({"order_id": "84/72"})).value == {"order_id": "84/72"}
    adapter("GET", "/payments", service.url).invoke(inv({"order_id": "8472"}))
    assert service.seen[1].path == "/payments?order_id=8472"
    assert "Idempotency-Key" not in service.seen[1].headers
    with pytest.raises(ServiceRejected):
        a.invoke(inv({"order_id": ".."}))


@pytest.mark.parametrize(
    ("status", "body", "code"),
    [
        (409, {"error": {"code": "already_refunded", "message": "m"}}, "already_refunded"),
        (422, {"error": {"code": "exceeds_refundable", "message": "m"}}, "exceeds_refundable"),
        (404, {"error": {"code": "payment_not_found", "message": "m"}}, "payment_not_found"),
        (
            400,
            {"error": {"code": "idempotency_key_required", "message": "m"}},
            "idempotency_key_required",
        ),
        (400, b"not json", "http_400"),
    ],
)
def test_4xx_is_a_definitive_rejection(
    service: FakeService, status: int, body: Any, code: str
) -> None:
    service.script[("POST", "/refunds")] = [(status, body)]
    with pytest.raises(ServiceRejected) as e:
        adapter("POST", "/refunds", service.url).invoke(inv({}, key="k"))
    assert e.value.code == code and e.value.status == status and not e.value.transient


def test_429_is_throttled_not_rejected(service: FakeService) -> None:
    service.script[("GET", "/x")] = [(429, {"error": {"code": "rate_limited", "message": ""}})]
    with pytest.raises(ServiceThrottled) as e:
        adapter("GET", "/x", service.url).invoke(inv({}))
    assert e.value.code == "rate_limited" and e.value.status == 429
    assert e.value.retry_after_s is None  # no Retry-After header: no hint


def test_5xx_and_unreadable_2xx_are_service_failures(service: FakeService) -> None:
    service.script[("POST", "/refunds")] = [(500, {"error": {"code": "internal", "message": ""}})]
    service.script[("GET", "/x")] = [(200, b"<html>")]
    with pytest.raises(ServiceFailed) as e:
        adapter("POST", "/refunds", service.url).invoke(inv({}, key="k"))
    assert e.value.code == "internal"
    with pytest.raises(ServiceFailed):
        adapter("GET", "/x", service.url).invoke(inv({}))


def test_hang_is_a_timeout_after_sending(service: FakeService) -> None:
    service.script[("POST", "/refunds")] = [HANG]
    with pytest.raises(TransportFailed) as e:
        adapter("POST", "/refunds", service.url).invoke(inv({}, key="k", timeout_s=0.2))
    assert e.value.reason == "timeout" and e.value.sent


def test_dropped_connection_is_a_connection_error_after_sending(service: FakeService) -> None:
    service.script[("POST", "/refunds")] = [DROP]
    with pytest.raises(TransportFailed) as e:
        adapter("POST", "/refunds", service.url).invoke(inv({}, key="k"))
    assert e.value.reason == "connection_error" and e.value.sent


def test_refused_connection_provably_sent_nothing() -> None:
    with pytest.raises(TransportFailed) as e:
        adapter("GET", "/x", closed_port_url()).invoke(inv({}))
    assert e.value.reason == "connection_error" and not e.value.sent


def test_a_missing_base_url_is_refused_before_sending() -> None:
    a = HttpAdapter("POST", "/refunds", "NOWHERE_URL", config=SystemsConfig(environ={}))
    with pytest.raises(ServiceRejected) as e:
        a.invoke(inv({}, key="k"))
    assert e.value.code == "tool_misconfigured" and "NOWHERE_URL" in e.value.message


def test_base_url_comes_from_the_environment_setting_then_the_default() -> None:
    cfg = SystemsConfig(defaults={"A_URL": "http://default/"}, environ={"A_URL": "http://env"})
    assert cfg.base_url("A_URL") == "http://env"
    assert SystemsConfig(defaults={"A_URL": "http://default/"}, environ={}).base_url("A_URL") == (
        "http://default"
    )


# -- the executor over HTTP, with the refund tools ------------------------------------------

CTX = ExecContext(
    tenant_id="ten_41",
    task_id="tsk_8472_a",
    trace_id="t",
    step_scope="execute",
    request_id="req-8472",
)
ARGS = {"payment_id": "pay_8472_b", "amount_minor": 200_000, "currency": "INR"}
CALL = ToolCall(
    tool="refunds.create",
    args=ARGS,
    idempotency_key="refund:req-8472:pay_8472_b",
    policy_decision=PolicyStamp(
        decision="approved",
        action_hash=action_hash("refunds.create", "2", ARGS),
        policy_version="POL-REF-004@4",
        approval_id="apr_5521",
    ),
)


def executor(
    url: str, sleeps: list[float] | None = None, write_timeout_s: float = 5.0
) -> ToolExecutor:
    cfg = SystemsConfig(environ={PAYMENTS_URL: url, ORDERS_URL: url})
    tools = [
        replace(d, timeout_s=write_timeout_s) if d.name == "refunds.create" else d
        for d in refund_tools(cfg)
    ]
    return ToolExecutor(
        ToolRegistry(tools),
        FakeCredentialProvider(),
        InMemoryAuditSink(),
        sleep=(sleeps if sleeps is not None else []).append,
    )


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        (
            (500, {"error": {"code": "internal", "message": "after commit"}}),
            "server_error_after_send",
        ),
        (HANG, "timeout"),
        (DROP, "connection_error"),
    ],
)
def test_a_write_is_sent_exactly_once_and_unknown_on_5xx_timeout_or_drop(
    service: FakeService, step: Any, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    service.script[("POST", "/refunds")] = [step, (201, REFUND)]
    # The refund tool's 5 s timeout, shortened so the hang case takes 0.3 s.
    out = executor(service.url, write_timeout_s=0.3).execute(CALL, CTX)
    assert isinstance(out, Unknown) and out.reason == expected
    assert service.count("POST", "/refunds") == 1


def test_write_replay_200_and_creation_201_are_both_ok(service: FakeService) -> None:
    service.script[("POST", "/refunds")] = [(201, REFUND), (200, REFUND)]
    ex = executor(service.url)
    assert ex.execute(CALL, CTX) == Ok(result=REFUND, status_code=201)
    assert ex.execute(CALL, CTX) == Ok(result=REFUND, status_code=200)


def test_write_409_is_rejected_once(service: FakeService) -> None:
    err = {"error": {"code": "already_refunded", "message": "rf_2950 exists"}}
    service.script[("POST", "/refunds")] = [(409, err)]
    out = executor(service.url).execute(CALL, CTX)
    assert out == Rejected(code="already_refunded", message="rf_2950 exists")
    assert service.count("POST", "/refunds") == 1


def test_a_read_is_retried_until_it_answers(service: FakeService) -> None:
    service.script[("GET", "/orders/8472")] = [
        (503, {"error": {"code": "unavailable", "message": ""}}),
        DROP,
        (200, {"order_id": "8472"}),
    ]
    sleeps: list[float] = []
    out = executor(service.url, sleeps).execute(
        ToolCall(tool="orders.get", args={"order_id": "8472"}),
        CTX.model_copy(update={"step_scope": "investigate"}),
    )
    assert out == Ok(result={"order_id": "8472"}, status_code=200)
    assert service.count("GET", "/orders/8472") == 3
    assert sleeps == [0.2, 0.4]


def test_reconcile_read_by_key(service: FakeService) -> None:
    service.script[("GET", "/refunds")] = [(200, {"refunds": [REFUND]})]
    out = executor(service.url).execute(
        ToolCall(tool="refunds.get_by_key", args={"idempotency_key": CALL.idempotency_key}),
        CTX.model_copy(update={"step_scope": "reconcile"}),
    )
    assert isinstance(out, Ok) and out.result == {"refunds": [REFUND]}
    assert service.seen[0].path == "/refunds?idempotency_key=refund%3Areq-8472%3Apay_8472_b"


def test_a_netrc_entry_never_replaces_the_tools_credential(
    service: FakeService, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """requests' `trust_env` would read `~/.netrc` and send basic auth instead of the bearer
    token for a host it names; the adapter does not read it."""
    netrc = tmp_path / ".netrc"
    netrc.write_text("machine 127.0.0.1 login someone password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setenv("HOME", str(tmp_path))
    service.script[("GET", "/orders/8472")] = [(200, {"order_id": "8472"})]
    adapter("GET", "/orders/{order_id}", service.url).invoke(inv({"order_id": "8472"}))
    assert service.seen[0].headers["Authorization"] == "Bearer tok-abc"


def test_proxies_and_ca_bundle_still_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What `trust_env` gave besides `.netrc` is still read: once per origin."""
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "payments.internal")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/company.pem")
    a = adapter("GET", "/x", "https://orders.internal")
    got = a._settings("https://orders.internal/orders/1?x=1")
    assert got["proxies"].get("https") == "http://proxy.internal:3128"
    assert got["verify"] == "/etc/ssl/company.pem"
    assert a._settings("https://payments.internal/p")["proxies"] == {}
    monkeypatch.setenv("HTTPS_PROXY", "http://other:1")  # read once per origin
    assert (
        a._settings("https://orders.internal/y")["proxies"]["https"] == "http://proxy.internal:3128"
    )
