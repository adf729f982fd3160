"""An MCP effect whose call times out after it was sent is reconciled by key, through the executor
and the declared lookup tool, by the real orchestrator over a real store: the intent is recorded
before the call leaves, the task enters EXEC_UNKNOWN, the lookup finds the order under the key,
and the order is never placed twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.core.contracts import Action, TaskRequest
from agent_jobs.core.hashing import action_hash, derive_idempotency_key
from agent_jobs.core.states import Status
from agent_jobs.ops.switches import StaticSwitches
from agent_jobs.orchestrator import workflow as wf
from agent_jobs.orchestrator.registry import WorkflowRegistry
from agent_jobs.testing import Harness
from agent_jobs.tools import (
    ExecContext,
    Ok,
    PolicyStamp,
    Rejected,
    Throttled,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
)
from agent_jobs.tools.mcp import McpToolSource
from agent_jobs.tools.mcp_config import HttpServer, McpSourceConfig, McpToolConfig
from agent_jobs.tools.testing import FakeCredentialProvider, InMemoryAuditSink
from tests.support.mcp_server import HttpServerProcess, calls, set_flag

CREATE = "shop.create_order"
LOOKUP = "shop.get_order_by_key"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    state = tmp_path_factory.mktemp("mcp_reconcile")
    proc = HttpServerProcess(state)
    try:
        yield state, proc.url
    finally:
        proc.stop()


def executor(url: str) -> ToolExecutor:
    tools = (
        McpToolConfig(
            "create_order",
            "effect",
            frozenset({"execute"}),
            timeout_s=1.0,
            key="order:{tenant_id}:{request_id}:{sku}",
            key_arg="idempotency_key",
            lookup=LOOKUP,
        ),
        McpToolConfig("get_order_by_key", "read", frozenset({"reconcile"})),
    )
    source = McpToolSource(McpSourceConfig("shop", HttpServer(url), tools))
    registry = ToolRegistry(source.descriptors())
    registry.check()
    return ToolExecutor(
        registry, FakeCredentialProvider(), InMemoryAuditSink(), switches=StaticSwitches()
    )


class McpOrder:
    """Places one order through the MCP effect; reconciles through the MCP lookup."""

    name = "mcp_order"
    version = 1

    def __init__(self, ex: ToolExecutor, store: Any) -> None:
        self.ex = ex
        self.store = store
        self.effect_status_at_send: list[str | None] = []

    def _ctx(self, inp: wf.StepInput, scope: str) -> ExecContext:
        return ExecContext(
            tenant_id=inp.tenant_id,
            task_id=inp.task_id,
            trace_id=inp.trace_id,
            step_scope=scope,
            request_id=inp.idempotency_key,
        )

    def pinned(self) -> dict[str, Any]:
        return {}

    def start(self, inp: wf.StepInput) -> dict[str, Any]:
        return {}

    def decide(self, inp: wf.StepInput) -> wf.StepDecision:
        if inp.state.get("order"):
            return wf.ToVerify(dict(inp.state))
        if inp.resumed is not None and inp.resumed.kind == "effect_rejected":
            return wf.Fail("the order was refused", dict(inp.state))
        d = self.ex.registry.get(CREATE)
        assert d is not None and d.idempotency_key_template is not None
        args = {"sku": inp.input["sku"], "quantity": inp.input["quantity"]}
        trusted = {"tenant_id": inp.tenant_id, "request_id": inp.idempotency_key}
        key = derive_idempotency_key(d.idempotency_key_template, {**args, **trusted})
        action = Action(tool=CREATE, tool_version=d.version, args=args, idempotency_key=key)
        return wf.Act(action, dict(inp.state))

    def authorize(self, inp: wf.StepInput, action: Action) -> wf.Authorization:
        return wf.Authorization("allow", "SHOP@1")

    def execute(self, inp: wf.StepInput, action: Action) -> wf.EffectOutcome:
        effect = self.store.effect(inp.task_id, action.idempotency_key)
        self.effect_status_at_send.append(None if effect is None else effect.status)
        stamp = PolicyStamp(
            decision="allow",
            action_hash=action_hash(action.tool, action.tool_version, action.args),
            policy_version="SHOP@1",
        )
        call = ToolCall(
            tool=action.tool,
            args=action.args,
            idempotency_key=action.idempotency_key,
            policy_decision=stamp,
        )
        out = self.ex.execute(call, self._ctx(inp, "execute"))
        if isinstance(out, Ok):
            return wf.EffectApplied(out.result["structured"])
        if isinstance(out, Rejected):
            return wf.EffectRejected(out.code, out.message)
        if isinstance(out, Throttled):
            return wf.EffectThrottled(out.retry_after_s, out.code)
        return wf.EffectUnknown(out.reason)

    def reconcile(self, inp: wf.StepInput, action: Action) -> wf.ReconcileResult:
        call = ToolCall(tool=LOOKUP, args={"idempotency_key": action.idempotency_key})
        out = self.ex.execute(call, self._ctx(inp, "reconcile"))
        if not isinstance(out, Ok):
            return wf.LookupFailed(getattr(out, "code", out.kind))
        found = out.result["structured"]
        if not found.get("found"):
            return wf.NoEffect()
        if (found["sku"], found["quantity"]) != (action.args["sku"], action.args["quantity"]):
            return wf.Different(f"another order under the key: {found}")
        return wf.Found(found)

    def after_effect(
        self, inp: wf.StepInput, action: Action, result: dict[str, Any]
    ) -> wf.AfterEffect:
        return wf.AfterEffect({**inp.state, "order": result}, verify=True)

    def verify(self, inp: wf.StepInput) -> wf.Verdict:
        return wf.Complete({"order_id": inp.state["order"]["order_id"]})


def test_an_effect_timing_out_after_send_is_reconciled_by_key(
    store: Any, tenant: str, server: tuple[Path, str]
) -> None:
    state, url = server
    set_flag(state, "slow_create_s", "3")  # applied at once, answered after the 1 s timeout
    try:
        workflow = McpOrder(executor(url), store)
        registry = WorkflowRegistry()
        registry.register(workflow)
        h = Harness(store, registry)
        sku = f"sku-{tenant}"
        task = h.submit(
            tenant, "req-1", TaskRequest(workflow="mcp_order@1", input={"sku": sku, "quantity": 3})
        )
        final = h.settle(task.id)
    finally:
        set_flag(state, "slow_create_s", "")
    assert final.status is Status.COMPLETED, final
    names = [e.type for e in store.events(task.id)]
    assert names.index("intent_recorded") < names.index("effect_unknown")
    assert names.index("effect_unknown") < names.index("reconciled_found")
    # The intent was in the store before the call left, and the call left once.
    assert workflow.effect_status_at_send == ["intent"]
    key = f"order:{tenant}:req-1:{sku}"
    sent = [(t, a["key"]) for t, a in calls(state) if a.get("key") == key]
    assert sent == [("create_order", key), ("get_order_by_key", key)]
    (effect,) = store.effects(task.id)
    assert effect.status == "committed" and effect.idempotency_key == key
    assert effect.result is not None and effect.result["sku"] == sku
    assert final.outcome is not None
    assert final.outcome["order_id"] == effect.result["order_id"]
