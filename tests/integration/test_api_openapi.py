"""The OpenAPI document is accurate: every response the API gives (successes and each error path)
is documented for its operation with that status, content type, required headers and a body
that validates against the documented schema; and fuzzed submissions never get a 5xx. This is
what `make schemathesis` checks from outside, run here without the tool."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from tests.integration.api_env import HarnessApi, auth, harness_api, token

pytestmark = pytest.mark.postgres


class Conformance:
    def __init__(self, api: HarnessApi) -> None:
        self.api = api
        self.spec = api.client.get("/openapi.json").json()
        self.seen: set[tuple[str, str, int]] = set()

    def call(self, method: str, template: str, path: str | None = None, **kw: Any) -> Any:
        r = self.api.client.request(method, path or template, **kw)
        self.check(method, template, r)
        return r

    def check(self, method: str, template: str, r: Any) -> None:
        op = self.spec["paths"][template][method.lower()]
        doc = op["responses"].get(str(r.status_code))
        assert doc is not None, f"{method} {template}: {r.status_code} is not documented"
        for name, header in doc.get("headers", {}).items():
            if header.get("required"):
                assert name in r.headers, f"{method} {template} {r.status_code}: no {name}"
                if header["schema"].get("type") == "integer":
                    assert int(r.headers[name]) >= header["schema"].get("minimum", 0)
        media = r.headers["content-type"].split(";")[0].strip()
        assert media in doc["content"], f"{method} {template}: {media} not documented"
        if media == "application/json":
            schema = {**doc["content"][media]["schema"], "components": self.spec["components"]}
            errors = list(Draft202012Validator(schema).iter_errors(r.json()))
            assert not errors, f"{method} {template} {r.status_code}: {errors[0].message}"
        self.seen.add((method, template, r.status_code))


@pytest.fixture
def api(pg_store: Any, tmp_path: Path) -> HarnessApi:
    return harness_api(pg_store, tmp_path / "ledger.db")


@pytest.fixture
def conf(api: HarnessApi) -> Iterator[Conformance]:
    yield Conformance(api)


def test_the_document_declares_what_clients_need(conf: Conformance) -> None:
    spec = conf.spec
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert "HTTPValidationError" not in json.dumps(spec)
    create = spec["paths"]["/v1/tasks"]["post"]
    [key] = [p for p in create["parameters"] if p["name"] == "Idempotency-Key"]
    assert key["required"] is True and key["in"] == "header"
    assert set(create["responses"]) == {"202", "400", "401", "413", "422", "429", "503"}
    assert create["responses"]["202"]["headers"]["Location"]["required"] is True
    workflow = spec["components"]["schemas"]["TaskCreate"]["properties"]["workflow"]
    assert workflow["enum"] == ["example@1", "noop@1"]
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            secured = path.startswith("/v1/")
            assert bool(op.get("security")) is secured, (method, path)
            if secured:
                assert "401" in op["responses"], (method, path)


def test_every_operation_and_error_path_conforms(conf: Conformance) -> None:
    api = conf.api
    svc = token(api.cfg, "acme", "svc")
    alice = token(api.cfg, "acme", "alice", roles=("approver",))
    big = {"workflow": "example@1", "input": {"account": "a1", "amount_minor": 150_000}}

    created = conf.call(
        "POST", "/v1/tasks", json=big, headers=auth(svc, **{"Idempotency-Key": "k"})
    )
    task_id = created.json()["task_id"]
    conf.call("POST", "/v1/tasks", json=big, headers=auth(svc, **{"Idempotency-Key": "k"}))
    conf.call("POST", "/v1/tasks", json=big, headers=auth(svc))  # 400
    conf.call("POST", "/v1/tasks", json=big)  # 401
    conf.call(
        "POST", "/v1/tasks", json={"workflow": "x"}, headers=auth(svc, **{"Idempotency-Key": "j"})
    )
    conf.call(
        "POST",
        "/v1/tasks",
        json={"workflow": "noop@1", "input": {"pad": "x" * 300_000}},
        headers=auth(svc, **{"Idempotency-Key": "big"}),
    )  # 413
    api.harness.run_until_idle()

    t = "/v1/tasks/{task_id}"
    conf.call("GET", t, f"/v1/tasks/{task_id}", headers=auth(svc))
    conf.call("GET", t, "/v1/tasks/tsk_nope", headers=auth(svc))  # 404
    conf.call("GET", t, "/v1/tasks/bad%20id", headers=auth(svc))  # 422
    conf.call("GET", t, f"/v1/tasks/{task_id}")  # 401
    e = "/v1/tasks/{task_id}/events"
    conf.call("GET", e, f"/v1/tasks/{task_id}/events", headers=auth(svc))
    conf.call("GET", e, f"/v1/tasks/{task_id}/events?after_seq=-1", headers=auth(svc))  # 422
    conf.call("GET", e, "/v1/tasks/tsk_nope/events", headers=auth(svc))  # 404

    a = "/v1/approvals"
    listed = conf.call("GET", a, headers=auth(alice))
    approval_id = listed.json()["approvals"][0]["approval_id"]
    conf.call("GET", a, "/v1/approvals?status=bogus", headers=auth(alice))  # 422
    conf.call("GET", a, headers=auth(svc))  # 403
    g = "/v1/approvals/{approval_id}/grant"
    d = "/v1/approvals/{approval_id}/deny"
    conf.call("POST", g, f"/v1/approvals/{approval_id}/grant", headers=auth(svc))  # 403
    conf.call("POST", d, "/v1/approvals/apr_nope/deny", headers=auth(alice))  # 404
    conf.call(
        "POST", g, f"/v1/approvals/{approval_id}/grant", json={"note": 1}, headers=auth(alice)
    )  # 422
    r = conf.call(
        "POST",
        g,
        f"/v1/approvals/{approval_id}/grant",
        json={"note": "x" * 201},
        headers=auth(alice),
    )
    assert r.status_code == 422 and r.json()["error"]["field"] == "note"
    r = conf.call(
        "POST",
        g,
        f"/v1/approvals/{approval_id}/grant",
        content=b'{"note": "\xff\xfe"}',
        headers=auth(alice, **{"Content-Type": "application/json"}),
    )
    assert r.status_code == 422 and r.json()["error"]["field"] == "body"
    conf.call("POST", g, f"/v1/approvals/{approval_id}/grant", json=None, headers=auth(alice))
    conf.call("POST", d, f"/v1/approvals/{approval_id}/deny", headers=auth(alice))  # 409
    api.harness.run_until_idle()

    c = "/v1/tasks/{task_id}/cancel"
    conf.call("POST", c, f"/v1/tasks/{task_id}/cancel", headers=auth(svc))  # 409: finished
    other = conf.call(
        "POST",
        "/v1/tasks",
        json={"workflow": "noop@1", "input": {}},
        headers=auth(svc, **{"Idempotency-Key": "c"}),
    ).json()["task_id"]
    conf.call("POST", c, f"/v1/tasks/{other}/cancel", headers=auth(svc))  # 202
    conf.call("POST", c, "/v1/tasks/tsk_nope/cancel", headers=auth(svc))  # 404

    conf.call("GET", "/healthz")
    conf.call("GET", "/readyz")
    by_key = "/v1/tasks"
    found = conf.call("GET", by_key, "/v1/tasks?idempotency_key=k", headers=auth(svc))
    assert found.status_code == 200 and found.json()["task_id"] == task_id
    conf.call("GET", by_key, "/v1/tasks?idempotency_key=unused", headers=auth(svc))  # 404
    conf.call("GET", by_key, "/v1/tasks", headers=auth(svc))  # 422: the key is required
    conf.call("GET", by_key, "/v1/tasks?idempotency_key=k")  # 401
    # Metrics are not on the public port (see test_metrics_port.py).
    assert api.client.get("/metrics").status_code == 404

    expected = (
        {("POST", "/v1/tasks", s) for s in (202, 400, 401, 413, 422)}
        | {("GET", t, s) for s in (200, 401, 404, 422)}
        | {("GET", by_key, s) for s in (200, 401, 404, 422)}
    )
    assert expected <= conf.seen


def test_unsupported_methods_are_405_with_allow(conf: Conformance) -> None:
    r = conf.api.client.request("DELETE", "/v1/tasks/tsk_1")
    assert r.status_code == 405 and "GET" in r.headers["allow"]
    assert r.json()["error"]["code"] == "method_not_allowed"


def test_paths_are_exact(conf: Conformance) -> None:
    tok = token(conf.api.cfg, "acme")
    r = conf.api.client.get("/v1/tasks/", headers=auth(tok), follow_redirects=False)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


_text = st.text(max_size=20)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    workflow=st.sampled_from(["noop@1", "example@1", "nope@1", "", "a@b"]) | _text,
    inp=_json,
    # Header values as a client can send them: latin-1 text without control characters.
    key=st.sampled_from(["fixed-key"])
    | st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), min_size=1, max_size=30),
)
def test_fuzzed_submissions_never_fail_on_the_server(
    conf: Conformance, workflow: str, inp: Any, key: str
) -> None:
    tok = token(conf.api.cfg, "fuzz")  # one tenant: "fixed-key" is reused across examples
    body = json.dumps({"workflow": workflow, "input": inp}, allow_nan=True).encode()
    r = conf.call(
        "POST",
        "/v1/tasks",
        content=body,
        headers={
            "Authorization": f"Bearer {tok}",
            "Idempotency-Key": key.encode("latin-1"),
            "Content-Type": "application/json",
        },
    )
    assert r.status_code < 500
