"""One stored shape for what a tool answered, whatever its source (`agents.declare.stored`): a
Python function's dict, an HTTP body, an MCP result's structured content (or the JSON object its
text is, or `{"text": ...}`), so an effect answered directly and one found by its key read alike."""

from __future__ import annotations

import json
from typing import Any

import mcp_types
from hypothesis import given
from hypothesis import strategies as st

from agent_jobs.agents.declare import found_of, stored
from agent_jobs.tools.descriptors import ToolDescriptor
from agent_jobs.tools.mcp import McpToolAdapter
from agent_jobs.tools.mcp_content import REDACTED, result_value

CREDIT = {"credit_id": "cr_1", "account_id": "a1", "amount_minor": 1500}
SECRET = "s3cret-value-0123"


def tool(adapter: Any) -> ToolDescriptor:
    schema = {"type": "object", "additionalProperties": False}
    return ToolDescriptor(name="billing.create_credit", version="1", description="",
                          args_schema=schema, side_effect="none", permission="p",
                          step_scopes=frozenset({"work"}), timeout_s=1.0,
                          adapter=adapter)  # fmt: skip


MCP = tool(McpToolAdapter.__new__(McpToolAdapter))
PYTHON = tool(lambda inv: None)


def mcp(texts: list[str], structured: Any = None) -> dict[str, Any]:
    result = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=t) for t in texts],
        structured_content=structured,
    )
    return result_value(result, [SECRET])


def test_an_effect_reads_the_same_answered_or_found_by_its_key() -> None:
    answered = stored(MCP, mcp([json.dumps(CREDIT)], CREDIT))
    found = found_of(stored(MCP, mcp(["..."], {"found": True, **CREDIT})))
    assert answered == found == CREDIT == stored(PYTHON, dict(CREDIT))


def test_a_server_without_structured_output_is_read_from_its_json_text() -> None:
    assert stored(MCP, mcp([json.dumps(CREDIT)])) == CREDIT
    assert found_of(stored(MCP, mcp(['{"found": null}']))) is None
    assert stored(MCP, mcp(["credited"])) == {"text": "credited"}
    assert stored(PYTHON, None) == {}  # an HTTP effect answering an empty body


def test_json_escapes_cannot_smuggle_a_secret_or_a_nul_past_the_cleaning() -> None:
    escaped = "".join(f"\\u{ord(c):04x}" for c in SECRET)
    out = stored(MCP, mcp([f'{{"note": "{escaped}", "nul": "a\\u0000b"}}']))
    assert out["note"] == REDACTED and "\x00" not in out["nul"]


@given(st.dictionaries(st.text(max_size=10), st.integers() | st.text(max_size=10), max_size=5))
def test_structured_content_is_the_stored_object(value: dict[str, Any]) -> None:
    assert stored(MCP, mcp(["ignored"], value)) == mcp(["ignored"], value)["structured"]
