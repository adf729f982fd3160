"""MCP tool sources, the pure parts: our declarations, the server's schema taken as data, a result
made safe to hand a model, and a failure classed by where it happened (before or after send)."""

from __future__ import annotations

from typing import Any

import httpx2
import mcp_types
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp.shared.exceptions import MCPError

from agent_jobs.core.errors import ConfigError
from agent_jobs.core.text import clean_text, is_clean
from agent_jobs.tools.adapter import ServiceFailed, ServiceRejected, TransportFailed
from agent_jobs.tools.mcp import (
    MAX_BLOCKS,
    MAX_RESULT_CHARS,
    MAX_SCHEMA_CHARS,
    REDACTED,
    _check_schema_source,
    _Phase,
    _result_value,
    _signal,
)
from agent_jobs.tools.mcp_config import HttpServer, McpSourceConfig, McpToolConfig, StdioServer

S = frozenset({"work"})
SECRET = "s3cret-value-0123"


# -- declarations -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        {"kind": "effect"},  # no key, key_arg, lookup
        {"kind": "effect", "key": "k:{sku}", "key_arg": "idempotency_key"},  # no lookup
        {"kind": "effect", "key": "k", "key_arg": "k", "lookup": "shop.get"},  # key names nothing
        {"kind": "effect", "key": "k:{ik}", "key_arg": "ik", "lookup": "shop.get"},  # itself
        {"kind": "read", "lookup": "shop.get"},
        {"kind": "write"},
    ],
)
def test_an_effect_must_be_keyed_and_reconcilable(kw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        McpToolConfig("create_order", scopes=S, **kw)


@pytest.mark.parametrize("name", ["", "a b", "x" * 65, "évil", "a\x00b", "../x"])
def test_tool_names_are_plain(name: str) -> None:
    with pytest.raises(ConfigError):
        McpToolConfig(name, "read", S)


def test_a_lookup_in_the_same_source_must_be_a_declared_read() -> None:
    effect = McpToolConfig(
        "create_order", "effect", S, key="o:{sku}", key_arg="ik", lookup="shop.get_order_by_key"
    )
    server = HttpServer("http://127.0.0.1:1/mcp")
    with pytest.raises(ConfigError, match="not a declared read"):
        McpSourceConfig("shop", server, (effect,))
    McpSourceConfig("shop", server, (effect, McpToolConfig("get_order_by_key", "read", S)))


@pytest.mark.parametrize(
    "server",
    [
        lambda: HttpServer("file:///etc/passwd"),
        lambda: HttpServer("http://h/mcp", headers={"Host": "x"}),
        lambda: HttpServer("http://h/mcp", headers={"Bad Header": "x"}),
        lambda: HttpServer("http://h/mcp", headers={"X-A": "1"}, secret_headers={"x-a": "N"}),
        lambda: HttpServer(
            "http://h/mcp", secret_headers={"Authorization": "N"}, send_credential=True
        ),
        lambda: StdioServer(""),
        lambda: StdioServer("srv", env={"A": "1"}, secret_env={"A": "N"}),
    ],
)
def test_server_configs_refuse_what_cannot_be_meant(server: Any) -> None:
    with pytest.raises(ConfigError):
        server()


def test_secrets_are_named_in_config_never_held() -> None:
    server = HttpServer("http://h/mcp", secret_headers={"X-Api-Key": "SHOP_KEY"})
    assert server.secret_headers == {"X-Api-Key": "SHOP_KEY"}


# -- the server's schema ----------------------------------------------------------------------


def test_a_server_schema_is_closed_by_us() -> None:
    out = _check_schema_source("t", {"type": "object", "properties": {"a": {"type": "string"}}})
    assert out["additionalProperties"] is False


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"$ref": "https://evil.example/s.json"}}},
        {"type": "object", "properties": {"a": {"$id": "https://evil.example/", "type": "string"}}},
        {
            "type": "object",
            "properties": {"a": {"type": "string", "description": "x" * MAX_SCHEMA_CHARS}},
        },
        ["not", "an", "object"],
        {"type": "object", "default": float("nan")},
    ],
)
def test_a_server_schema_that_refers_out_is_too_big_or_not_json_is_refused(schema: Any) -> None:
    with pytest.raises(ConfigError):
        _check_schema_source("t", schema)


def test_local_references_are_kept() -> None:
    schema = {
        "type": "object",
        "$defs": {"Sku": {"type": "string"}},
        "properties": {"sku": {"$ref": "#/$defs/Sku"}},
    }
    assert _check_schema_source("t", schema)["properties"]["sku"] == {"$ref": "#/$defs/Sku"}


# -- results ----------------------------------------------------------------------------------

# Anything a server might put in text, lone surrogates and NUL included.
texts = st.text(st.characters(), max_size=200) | st.sampled_from(
    ["\x00", "\ud800x", f"key={SECRET}", "ok", "\u202e\u2066"]
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | texts,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(texts, kids, max_size=4),
    max_leaves=20,
)


def _result(texts: list[str], structured: Any = None, is_error: bool = False) -> Any:
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=t) for t in texts],
        structured_content=structured,
        is_error=is_error,
    )


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@given(st.lists(texts, max_size=5), st.dictionaries(texts, json_values, max_size=4))
def test_any_result_comes_back_clean_and_scrubbed(blocks: list[str], structured: Any) -> None:
    out = _result_value(_result(blocks, structured), [SECRET])
    assert is_clean(out)
    assert not any(SECRET in s for s in _strings(out))
    for given_text, got in zip(blocks, out["content"], strict=True):
        assert got["text"] == clean_text(given_text).replace(SECRET, REDACTED)


@given(st.integers(min_value=1, max_value=3 * MAX_RESULT_CHARS), st.integers(1, 4))
def test_text_is_capped_in_total(size: int, blocks: int) -> None:
    out = _result_value(_result(["z" * size] * blocks), [])
    total = sum(len(b["text"]) for b in out["content"])
    assert total <= MAX_RESULT_CHARS
    assert out.get("truncated", False) == (size * blocks > MAX_RESULT_CHARS)


def test_too_many_blocks_and_non_text_blocks() -> None:
    image = mcp_types.ImageContent(type="image", data="AAAA", mime_type="image/png")
    result = mcp_types.CallToolResult(
        content=[image] + [mcp_types.TextContent(type="text", text="t")] * (MAX_BLOCKS + 5)
    )
    out = _result_value(result, [])
    assert out["content"][0] == {"type": "image", "omitted": True}
    assert len(out["content"]) == MAX_BLOCKS and out["truncated"] is True
    assert "AAAA" not in str(out)


def test_an_error_result_is_a_definitive_rejection_cleaned_and_scrubbed() -> None:
    with pytest.raises(ServiceRejected) as e:
        _result_value(_result([f"failed\x00 with {SECRET}" + "!" * 5000], is_error=True), [SECRET])
    assert e.value.code == "tool_error" and not e.value.transient
    assert SECRET not in e.value.message and "\x00" not in e.value.message
    assert len(e.value.message) <= 500


# -- failures ---------------------------------------------------------------------------------


def _sig(exc: BaseException, sent: bool) -> Any:
    return _signal(exc, _Phase(sent=sent), 5.0)


@pytest.mark.parametrize("sent", [False, True])
def test_where_a_failure_happened_decides_sent(sent: bool) -> None:
    for exc in (
        TimeoutError(),
        MCPError(code=mcp_types.CONNECTION_CLOSED, message="Connection closed"),
        httpx2.ConnectError("refused"),
        BrokenPipeError(),
        BaseExceptionGroup("tg", [ExceptionGroup("inner", [TimeoutError()])]),
    ):
        sig = _sig(exc, sent)
        assert isinstance(sig, TransportFailed) and sig.sent is sent


def test_a_timeout_wins_over_the_cancellations_it_caused() -> None:
    group = BaseExceptionGroup("tg", [BrokenPipeError(), TimeoutError()])
    sig = _sig(group, True)
    assert isinstance(sig, TransportFailed) and sig.reason == "timeout"


def test_json_rpc_errors_after_send() -> None:
    message = f"bad\x00 {SECRET}"
    refused = _signal(
        MCPError(code=mcp_types.INVALID_PARAMS, message=message), _Phase(True), 5, [SECRET]
    )
    assert isinstance(refused, ServiceRejected) and refused.code == "mcp_error_32602"
    assert refused.message == f"bad\ufffd {REDACTED}"
    failed = _sig(MCPError(code=mcp_types.INTERNAL_ERROR, message="oops"), True)
    assert isinstance(failed, ServiceFailed) and failed.code == "mcp_error_32603"
    big = _sig(
        MCPError(
            code=mcp_types.CONNECTION_CLOSED,
            message="SSE stream failed: Server-sent event exceeded the 1048576 byte limit.",
        ),
        True,
    )
    assert isinstance(big, ServiceFailed) and big.code == "response_too_large"
    assert not big.transient
    # Before the call left, a JSON-RPC error sent nothing; a refused handshake is definitive.
    early = _sig(MCPError(code=mcp_types.INTERNAL_ERROR, message="no"), False)
    assert isinstance(early, TransportFailed) and early.sent is False
    refused_early = _sig(MCPError(code=mcp_types.METHOD_NOT_FOUND, message="404"), False)
    assert isinstance(refused_early, ServiceRejected)
    assert refused_early.code == "mcp_handshake_refused" and not refused_early.transient


def test_an_answer_the_sdk_cannot_parse_is_a_failure_not_a_retry() -> None:
    with pytest.raises(ValueError) as bad:
        mcp_types.CallToolResult.model_validate({"content": "nope"})
    sig = _sig(bad.value, True)
    assert isinstance(sig, ServiceFailed) and not sig.transient
