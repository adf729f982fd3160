"""The IT helpdesk example (`examples/helpdesk`) under `agent_jobs.testing.AgentHarness`, on
SQLite and Postgres: two effects from two tool sources in one task (device management over its
OpenAPI document, served here over HTTP; procurement, an MCP server spawned over stdio), the
replacement above EUR 1,500 approved by a person, device management's lost answer reconciled by
key. Each test asserts what the two systems recorded: each effect applied once."""

from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agent_jobs.core.contracts import Action
from agent_jobs.core.states import Status
from agent_jobs.testing import AgentHarness, ScriptedModel
from examples.helpdesk import mdm, procurement

S = Status


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The agent module, its procurement MCP server over streamable HTTP in a process of its own
    (spawning one over stdio for each call, as the embedded demo does, costs seconds a call)."""
    db = str(tmp_path_factory.mktemp("helpdesk") / "po.sqlite3")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    proc = subprocess.Popen(
        [sys.executable, str(procurement.SCRIPT), "http", str(port)],
        env={**os.environ, procurement.DB_ENV: db},
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "the procurement server exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the procurement server did not listen"
                time.sleep(0.1)
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(procurement.DB_ENV, db)
            mp.setenv(procurement.URL_ENV, f"http://127.0.0.1:{port}/mcp")
            yield importlib.import_module("examples.helpdesk.agent")
    finally:
        proc.terminate()
        try:
            proc.wait(2)  # an MCP session still open keeps uvicorn waiting: not for long
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture
def devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, example: ModuleType) -> Iterator[Any]:
    """Device management of this test, served over HTTP; procurement's records readable."""
    service = mdm.Mdm(str(tmp_path / "mdm.sqlite3"))
    served = mdm.serve(0, service)
    monkeypatch.setenv(mdm.URL_ENV, f"http://127.0.0.1:{served.server_address[1]}")
    monkeypatch.setenv(procurement.DB_ENV, example.db)
    try:
        yield service
    finally:
        served.shutdown()
        served.server_close()


def harness(store: Any, example: ModuleType) -> AgentHarness:
    return AgentHarness(store, example.agent, ScriptedModel(rules=example.scripted_model))


def lost(device_id: str, employee: str) -> dict[str, str]:
    return {"device_id": device_id, "employee": employee, "reason": "left on a train"}


def test_disable_then_order_under_the_limit_each_applied_once(
    store: Any, tenant: str, example: ModuleType, devices: mdm.Mdm
) -> None:
    h = harness(store, example)
    done = h.settle(h.submit_input(lost("LT-100", "e.lind"), tenant=tenant).id)
    assert done.status is S.COMPLETED, done.outcome
    assert devices.disabled() == ["LT-100"] and devices.disable_calls() == 1
    ordered = procurement.orders(f":{tenant}:")
    assert [(o["device_id"], o["price_minor"]) for o in ordered] == [("LT-100", 1_290_00)]
    assert procurement.order_calls(f":{tenant}:") == 1
    tools = [e.type for e in store.events(done.id) if e.type.startswith("execute_tool")]
    assert tools == [
        "execute_tool mdm.getDevice", "execute_tool procurement.quote",
        "execute_tool mdm.disableDevice", "execute_tool procurement.order_replacement",
    ]  # fmt: skip
    assert done.outcome is not None and [c["type"] for c in done.outcome["claims"]] == [
        "device_disabled", "replacement_ordered"]  # fmt: skip
    assert store.list_approvals(tenant, task_id=done.id) == []


def test_above_the_limit_a_person_approves_and_a_lost_answer_is_reconciled(
    store: Any, tenant: str, example: ModuleType, devices: mdm.Mdm
) -> None:
    h = harness(store, example)
    devices.arm("lost_answer")  # the disable is applied, its answer lost
    task = h.submit_input(lost("LT-200", "a.okafor"), tenant=tenant)
    assert h.settle(task.id).status is S.APPROVAL_WAIT
    assert devices.disabled() == ["LT-200"] and procurement.order_calls(f":{tenant}:") == 0
    (approval,) = store.list_approvals(tenant, task_id=task.id)
    args = {"device_id": "LT-200", "model": "MacBook Pro 16 M4", "price_minor": 2_899_00,
            "currency": "EUR"}  # fmt: skip
    order = Action(tool="procurement.order_replacement", args=args,
                   tool_version=h.agent.tools.get("procurement.order_replacement").version,
                   idempotency_key=f"replace:{tenant}:LT-200")  # fmt: skip
    assert approval.action_hash == order.action_hash
    done = h.approve(task.id, "it-lead")
    assert done.status is S.COMPLETED, done.outcome
    assert devices.disable_calls() == 1 and len(procurement.orders(f":{tenant}:")) == 1
    seen = [e.type for e in store.events(task.id)]
    assert "effect_unknown" in seen and "reconciled_found" in seen
    assert done.outcome is not None and done.outcome["effects"][0]["reconciled"] is True


def test_a_denied_replacement_leaves_the_device_disabled_and_says_so(
    store: Any, tenant: str, example: ModuleType, devices: mdm.Mdm
) -> None:
    h = harness(store, example)
    task = h.submit_input(lost("LT-200", "a.okafor"), tenant=tenant)
    h.settle(task.id)
    done = h.approve(task.id, "it-lead", grant=False)
    assert done.status is S.COMPLETED, done.outcome
    assert devices.disabled() == ["LT-200"] and procurement.orders(f":{tenant}:") == []
    assert done.outcome is not None
    assert [c["type"] for c in done.outcome["claims"]] == ["device_disabled", "not_ordered"]
    assert done.outcome["declined"]["kind"] == "approval_denied"
    assert done.outcome["declined"]["tool"] == "procurement.order_replacement"


def test_another_employee_s_device_is_not_touched(
    store: Any, tenant: str, example: ModuleType, devices: mdm.Mdm
) -> None:
    h = harness(store, example)
    done = h.settle(h.submit_input(lost("LT-200", "e.lind"), tenant=tenant).id)
    assert done.status is S.COMPLETED, done.outcome
    assert devices.disable_calls() == 0 and procurement.order_calls(f":{tenant}:") == 0
    assert done.outcome is not None
    assert [c["type"] for c in done.outcome["claims"]] == ["not_disabled", "not_ordered"]
