"""`openapi_tools(..., base_url_setting=NAME)` calls the service at the URL the setting `NAME`
holds (an environment variable, read at each call), `base_url=` being only its default."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agent_jobs.agents.openapi import openapi_tools, read
from agent_jobs.tools.adapter import Invocation, ServiceRejected, TransportFailed
from agent_jobs.tools.credentials import Credential

SPEC: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "billing", "version": "1"},
    "paths": {
        "/invoices/{invoice_id}": {
            "get": {
                "operationId": "getInvoice",
                "parameters": [{"name": "invoice_id", "in": "path", "required": True}],
            }
        }
    },
}


@pytest.fixture
def billing() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"path": self.path}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def get_invoice(**kw: Any) -> Any:
    tools = openapi_tools(SPEC, prefix="billing", operations={"getInvoice": read()}, **kw)
    (d,) = tools.descriptors
    cred = Credential("t" * 32, datetime.now(UTC) + timedelta(minutes=5), "billing")
    inv = Invocation(d.name, d.version, {"invoice_id": "in_1"}, 5.0, cred)
    return d.adapter.invoke(inv).value


def test_the_base_url_setting_is_read(billing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BILLING_URL", billing + "/")
    assert get_invoice(base_url_setting="BILLING_URL") == {"path": "/invoices/in_1"}


def test_the_setting_wins_over_the_default_and_is_read_at_each_call(
    billing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BILLING_URL", billing)
    kw = {"base_url_setting": "BILLING_URL", "base_url": "http://127.0.0.1:9/nowhere"}
    assert get_invoice(**kw) == {"path": "/invoices/in_1"}
    monkeypatch.delenv("BILLING_URL")
    with pytest.raises(TransportFailed) as refused:  # now the default: nothing listens there
        get_invoice(**kw)
    assert refused.value.sent is False


def test_an_unset_setting_without_a_default_names_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("BILLING_URL", raising=False)
    with pytest.raises(ServiceRejected) as refused:
        get_invoice(base_url_setting="BILLING_URL")
    assert refused.value.code == "tool_misconfigured" and "BILLING_URL" in str(refused.value)
