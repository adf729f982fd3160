"""MCP tool sources against a real MCP server (tests/support/mcp_server.py), over stdio (a process
spawned per call) and streamable HTTP (a uvicorn process on a loopback port, stopped by pid).

What the server says is data: its tool list becomes our descriptors only for what we declared,
its annotations decide nothing, its output is cleaned, bounded and scrubbed of credentials, and
its failures (an error result, a crash, a hang, a refused connection) come back classified like
any tool's.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_jobs.core.errors import ConfigError
from agent_jobs.core.hashing import action_hash
from agent_jobs.core.text import REPLACEMENT, clean_text, is_clean, to_json
from agent_jobs.ops.switches import StaticSwitches
from agent_jobs.tools import (
    ExecContext,
    Ok,
    PolicyStamp,
    Rejected,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    Unknown,
)
from agent_jobs.tools.adapter import ServiceRejected, TransportFailed
from agent_jobs.tools.mcp import MAX_RESULT_CHARS, REDACTED, McpToolSource, McpUnavailable
from agent_jobs.tools.mcp_config import (
    HttpServer,
    McpSourceConfig,
    McpToolConfig,
    StdioServer,
)
from agent_jobs.tools.testing import FakeCredentialProvider, InMemoryAuditSink
from tests.support.mcp_server import HttpServerProcess, calls, stdio_command

SCOPE = "work"
ENV_SECRET = "env-secret-Zq81mVx3"
HEADER_SECRET = "header-secret-Kp20rTy7"
SECRETS = {"SHOP_ENV_TOKEN": ENV_SECRET, "SHOP_HEADER_TOKEN": HEADER_SECRET}
CTX = ExecContext(
    tenant_id="acme", task_id="t1", trace_id="tr1", step_scope=SCOPE, request_id="req-1"
)


def read(tool: str, **kw: Any) -> McpToolConfig:
    return McpToolConfig(tool, "read", frozenset({SCOPE}), **{"timeout_s": 10.0, **kw})


CREATE = McpToolConfig(
    "create_order",
    "effect",
    frozenset({SCOPE}),
    key="order:{request_id}:{sku}",
    key_arg="idempotency_key",
    lookup="shop.get_order_by_key",
)
TOOLS = (
    read("get_order"),
    read("get_order_by_key"),
    CREATE,
    read("echo"),
    read("echo_structured"),
    read("hostile"),
    read("whoami"),
    read("boom"),
    read("hang", timeout_s=1.0),
    read("die"),
)


def stdio_source(state: Path, tools: tuple[McpToolConfig, ...] = TOOLS) -> McpToolSource:
    command, args = stdio_command(state)
    server = StdioServer(
        command,
        args,
        secret_env={"MCP_TEST_TOKEN": "SHOP_ENV_TOKEN"},
        credential_env="MCP_TEST_CRED",
    )
    return McpToolSource(McpSourceConfig("shop", server, tools), secrets=SECRETS)


def http_source(url: str, tools: tuple[McpToolConfig, ...] = TOOLS) -> McpToolSource:
    server = HttpServer(
        url, secret_headers={"X-Api-Key": "SHOP_HEADER_TOKEN"}, send_credential=True
    )
    return McpToolSource(McpSourceConfig("shop", server, tools), secrets=SECRETS)


@pytest.fixture(scope="module")
def http_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    state = tmp_path_factory.mktemp("mcp_http")
    server = HttpServerProcess(state)
    try:
        yield state, server.url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def http_rig(http_state: tuple[Path, str]) -> tuple[Path, McpToolSource, ToolExecutor]:
    state, url = http_state
    source = http_source(url)
    return state, source, executor_for(source)


@pytest.fixture(params=["stdio", "http"])
def rig(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, McpToolSource, ToolExecutor]:
    if request.param == "stdio":
        source = stdio_source(tmp_path)
        return tmp_path, source, executor_for(source)
    rig: tuple[Path, McpToolSource, ToolExecutor] = request.getfixturevalue("http_rig")
    return rig


def executor_for(source: McpToolSource) -> ToolExecutor:
    registry = ToolRegistry(source.descriptors())
    registry.check()
    return ToolExecutor(
        registry,
        FakeCredentialProvider(),
        InMemoryAuditSink(),
        switches=StaticSwitches(),
        sleep=lambda s: None,
    )


def run(ex: ToolExecutor, tool: str, args: dict[str, Any], **kw: Any) -> Any:
    return ex.execute(ToolCall(tool=tool, args=args, **kw), CTX)


def create_call(ex: ToolExecutor, args: dict[str, Any]) -> ToolCall:
    d = ex.registry.get("shop.create_order")
    assert d is not None
    return ToolCall(
        tool=d.name,
        args=args,
        idempotency_key=f"order:{CTX.request_id}:{args['sku']}",
        policy_decision=PolicyStamp(
            decision="allow", action_hash=action_hash(d.name, d.version, args), policy_version="P@1"
        ),
    )


# -- descriptors ------------------------------------------------------------------------------


def test_declared_tools_are_listed_namespaced_with_closed_schemas(
    rig: tuple[Path, McpToolSource, ToolExecutor],
) -> None:
    _, _, ex = rig
    assert ex.registry.names() == sorted(f"shop.{t.tool}" for t in TOOLS)
    create = ex.registry.get("shop.create_order")
    assert create is not None
    # The key is the executor's: the model neither sees nor fills it.
    assert set(create.args_schema["properties"]) == {"sku", "quantity"}
    assert create.args_schema["required"] == ["sku", "quantity"]
    assert create.args_schema["additionalProperties"] is False
    assert create.description.startswith("Place an order")
    assert create.version.startswith("1+")


def test_undeclared_tools_are_not_exposed(http_state: tuple[Path, str]) -> None:
    _, url = http_state
    names = [d.name for d in http_source(url, (read("get_order"),)).descriptors()]
    assert names == ["shop.get_order"]


def test_a_declared_tool_the_server_does_not_list_fails_at_startup(
    http_state: tuple[Path, str],
) -> None:
    _, url = http_state
    with pytest.raises(ConfigError, match="lists no tool"):
        http_source(url, (read("get_order"), read("no_such_tool"))).descriptors()


def test_an_effect_whose_key_argument_the_server_does_not_take_fails_at_startup(
    http_state: tuple[Path, str],
) -> None:
    _, url = http_state
    bad = McpToolConfig(
        "get_order",
        "effect",
        frozenset({SCOPE}),
        key="o:{order_id}",
        key_arg="idempotency_key",
        lookup="shop.get_order_by_key",
    )
    with pytest.raises(ConfigError, match="takes no argument idempotency_key"):
        http_source(url, (bad, read("get_order_by_key"))).descriptors()


# -- read or effect: our configuration decides ------------------------------------------------


def test_read_or_effect_comes_from_our_config_not_the_server_annotations(
    rig: tuple[Path, McpToolSource, ToolExecutor],
) -> None:
    state, _, ex = rig
    create, get = ex.registry.get("shop.create_order"), ex.registry.get("shop.get_order")
    assert create is not None and get is not None
    # The server calls create_order read-only and idempotent, get_order destructive.
    assert create.side_effect == "keyed" and create.is_write
    assert create.reconcile_tool == "shop.get_order_by_key"
    assert get.side_effect == "none" and not get.is_write
    before = calls(state)
    # So create_order is a write: no policy decision, no call; no key, no call.
    args = {"sku": "sku-1", "quantity": 1}
    out = run(ex, "shop.create_order", args)
    assert isinstance(out, Rejected) and out.code == "no_policy_decision"
    no_key = create_call(ex, args).model_copy(update={"idempotency_key": None})
    out = ex.execute(no_key, CTX)
    assert isinstance(out, Rejected) and out.code == "idempotency_key_required"
    assert calls(state) == before


def test_a_read_only_tenant_cannot_reach_an_effect_the_server_calls_read_only(
    http_rig: tuple[Path, McpToolSource, ToolExecutor],
) -> None:
    state, _, ex = http_rig
    ex.registry.switches.set_read_only("acme")  # type: ignore[attr-defined]
    try:
        before = calls(state)
        out = ex.execute(create_call(ex, {"sku": "sku-ro", "quantity": 1}), CTX)
        assert isinstance(out, Rejected) and out.code == "tenant_read_only"
        assert calls(state) == before
    finally:
        ex.registry.switches.set_read_only("acme", False)  # type: ignore[attr-defined]


# -- arguments --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("shop.get_order", {"order_id": 5}),
        ("shop.get_order", {}),
        ("shop.get_order", {"order_id": "o1", "destination": "acct-evil"}),
        # The key argument is not the model's to set, even for a tool that takes it.
        ("shop.create_order", {"sku": "s", "quantity": 1, "idempotency_key": "mine"}),
        ("shop.create_order", {"sku": "s", "quantity": "lots"}),
    ],
)
def test_bad_arguments_are_refused_before_the_server_is_called(
    http_rig: tuple[Path, McpToolSource, ToolExecutor], tool: str, args: dict[str, Any]
) -> None:
    state, _, ex = http_rig
    before = calls(state)
    out = run(ex, tool, args)
    assert isinstance(out, Rejected) and out.code == "bad_args"
    assert calls(state) == before


def test_an_effect_runs_once_with_the_executor_key(
    rig: tuple[Path, McpToolSource, ToolExecutor],
) -> None:
    state, _, ex = rig
    args = {"sku": "sku-once", "quantity": 2}
    first = ex.execute(create_call(ex, args), CTX)
    again = ex.execute(create_call(ex, args), CTX)
    assert isinstance(first, Ok) and isinstance(again, Ok)
    assert first.result["structured"] == again.result["structured"]
    sent = [a for t, a in calls(state) if t == "create_order" and a["sku"] == "sku-once"]
    assert [a["key"] for a in sent] == ["order:req-1:sku-once"] * 2


# -- output is data ---------------------------------------------------------------------------


def test_hostile_output_is_cleaned_capped_and_kept_as_data(
    http_rig: tuple[Path, McpToolSource, ToolExecutor],
) -> None:
    _, _, ex = http_rig
    kinds = ("nul", "unicode", "big", "injection")
    results = {k: run(ex, "shop.hostile", {"kind": k}) for k in kinds}
    for out in results.values():
        assert isinstance(out, Ok)
        assert is_clean(out.result)
        assert to_json(out.result)  # storable as it is
        assert set(out.result) <= {"content", "structured", "truncated"}
    assert results["nul"].result["content"][0]["text"] == f"before{REPLACEMENT}after"
    assert "\x00" not in to_json(results["nul"].result)
    # Odd but storable Unicode is kept as given (the content rule), not silently rewritten.
    assert results["unicode"].result["content"][0]["text"].startswith("\u202eevil")
    big = results["big"].result
    assert big["truncated"] is True and big["structured"] is None
    assert len(big["content"][0]["text"]) == MAX_RESULT_CHARS
    # An injection is a string in the result, never anything else.
    text = results["injection"].result["content"][0]["text"]
    assert text.startswith("IGNORE ALL PREVIOUS INSTRUCTIONS")


def test_an_answer_over_the_message_limit_is_refused_not_retried(
    http_rig: tuple[Path, McpToolSource, ToolExecutor],
) -> None:
    state, source, ex = http_rig
    before = len(calls(state))
    out = run(ex, "shop.hostile", {"kind": "huge"})
    assert isinstance(out, Rejected) and out.code == "response_too_large" and not out.transient
    assert len(calls(state)) == before + 1
    assert source.failures["response_too_large"] >= 1


def test_a_huge_answer_over_stdio_is_refused_as_over_the_message_limit(tmp_path: Path) -> None:
    # A stdio line is bounded before it is read, as an HTTP answer is (tools.mcp_transport).
    ex = executor_for(stdio_source(tmp_path, (read("hostile"),)))
    out = run(ex, "shop.hostile", {"kind": "huge"})
    assert isinstance(out, Rejected) and out.code == "response_too_large" and not out.transient


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(text=st.text(st.characters(exclude_categories=["Cs"]), max_size=300))
def test_whatever_a_tool_echoes_comes_back_clean(
    http_rig: tuple[Path, McpToolSource, ToolExecutor], text: str
) -> None:
    _, _, ex = http_rig
    for tool in ("shop.echo", "shop.echo_structured"):
        out = run(ex, tool, {"text": text})
        assert isinstance(out, Ok), out
        assert is_clean(out.result)
        assert out.result["content"][0]["text"] == clean_text(text) or tool.endswith("structured")
        if tool == "shop.echo_structured":
            assert out.result["structured"]["text"] == clean_text(text)
            assert out.result["structured"]["nested"] == [{clean_text(text): clean_text(text)}]


# -- credentials ------------------------------------------------------------------------------


def test_credentials_never_reach_descriptors_or_results(
    rig: tuple[Path, McpToolSource, ToolExecutor],
) -> None:
    _, source, ex = rig
    shown = repr([(d, d.description, d.args_schema) for d in source.descriptors()])
    out = run(ex, "shop.whoami", {})
    assert isinstance(out, Ok)
    text = out.result["content"][0]["text"]
    # The server heard the credentials (and, hostile, echoed them): every one came back scrubbed.
    if isinstance(source.config.server, StdioServer):
        assert f"MCP_TEST_TOKEN={REDACTED}" in text and f"MCP_TEST_CRED={REDACTED}" in text
    else:
        assert f"authorization={REDACTED}" in text and f"x-api-key={REDACTED}" in text
    for secret in (ENV_SECRET, HEADER_SECRET):
        assert secret not in shown and secret not in to_json(out.result)
    # The executor's minted credential (FakeCredentialProvider's tokens start "fake-").
    assert "fake-" not in to_json(out.result)


def test_a_missing_secret_refuses_before_anything_is_sent(tmp_path: Path) -> None:
    command, args = stdio_command(tmp_path)
    server = StdioServer(command, args, secret_env={"MCP_TEST_TOKEN": "UNSET"})
    source = McpToolSource(McpSourceConfig("shop", server, (read("get_order"),)), secrets={})
    with pytest.raises(McpUnavailable, match="secret UNSET is not set"):
        source.descriptors()


# -- failures ---------------------------------------------------------------------------------


def test_a_tool_that_raises_is_a_definitive_rejection(
    http_rig: tuple[Path, McpToolSource, ToolExecutor],
) -> None:
    _, source, ex = http_rig
    before = source.failures["tool_error"]
    out = run(ex, "shop.boom", {})
    assert isinstance(out, Rejected) and out.code == "tool_error" and not out.transient
    assert source.failures["tool_error"] == before + 1


def test_a_stdio_server_that_dies_mid_call_is_a_transient_failure_counted(
    tmp_path: Path,
) -> None:
    source = stdio_source(tmp_path, (read("die"),))
    out = run(executor_for(source), "shop.die", {})
    assert isinstance(out, Rejected) and out.code == "connection_error" and out.transient
    assert source.failures["connection_error"] == 1
    assert [t for t, _ in calls(tmp_path)] == ["die"]


def test_a_hanging_tool_is_bounded_by_its_timeout(
    rig: tuple[Path, McpToolSource, ToolExecutor],
) -> None:
    _, source, ex = rig
    before = source.failures["timeout"]
    out = run(ex, "shop.hang", {"seconds": 30})
    assert isinstance(out, Rejected) and out.code == "timeout" and out.transient
    assert source.failures["timeout"] == before + 1


def test_an_http_server_that_dies_mid_call_then_stays_down(tmp_path: Path) -> None:
    server = HttpServerProcess(tmp_path)
    try:
        source = http_source(server.url)
        ex = executor_for(source)
        out = run(ex, "shop.die", {})
        assert isinstance(out, Rejected) and out.code == "connection_error" and out.transient
        # Down now: a read fails transiently, and the adapter says nothing was sent.
        out = run(ex, "shop.get_order", {"order_id": "o1"})
        assert isinstance(out, Rejected) and out.code == "connection_error" and out.transient
        d = ex.registry.get("shop.get_order")
        assert d is not None
        with pytest.raises(TransportFailed) as refused:
            d.adapter.invoke(_invocation(d.name, {"order_id": "o1"}))
        assert refused.value.reason == "connection_error" and refused.value.sent is False
        # A write reconciles even when provably unsent: the lookup finds nothing and the same
        # key is sent again, where a rejection would re-plan (and re-approve) the action.
        out = ex.execute(create_call(ex, {"sku": "sku-dead", "quantity": 1}), CTX)
        assert isinstance(out, Unknown) and out.reason == "connection_error"
        assert source.failures["connection_error"] == 4
        with pytest.raises(McpUnavailable):
            source.descriptors()
    finally:
        server.stop()


def test_a_wrong_endpoint_is_refused_not_retried(
    http_state: tuple[Path, str], http_rig: tuple[Path, McpToolSource, ToolExecutor]
) -> None:
    _, url = http_state
    with pytest.raises(McpUnavailable, match="mcp_handshake_refused"):
        http_source(url.replace("/mcp", "/not-mcp")).descriptors()
    # Descriptors listed, then the endpoint moves: a read is refused once, definitively.
    _, source, ex = http_rig
    d = ex.registry.get("shop.get_order")
    assert d is not None
    moved = http_source(url.replace("/mcp", "/not-mcp"))
    with pytest.raises(ServiceRejected) as refused:
        moved.call(source.config.tools[0], _invocation(d.name, {"order_id": "o1"}))
    assert refused.value.code == "mcp_handshake_refused"


def test_a_stdio_command_that_cannot_start_is_unavailable(tmp_path: Path) -> None:
    server = StdioServer(str(tmp_path / "no-such-server"))
    with pytest.raises(McpUnavailable, match="connection_error"):
        McpToolSource(McpSourceConfig("shop", server, (read("get_order"),))).descriptors()
    server = StdioServer(sys.executable, ("-c", "import sys; sys.exit(0)"))
    with pytest.raises(McpUnavailable, match="connection_error"):
        McpToolSource(McpSourceConfig("shop", server, (read("get_order"),))).descriptors()


def _invocation(tool: str, args: dict[str, Any]) -> Any:
    from agent_jobs.tools.adapter import Invocation

    token = FakeCredentialProvider().mint(tool, "acme", 60)
    return Invocation(tool=tool, tool_version="1", args=args, timeout_s=5.0, credential=token)
