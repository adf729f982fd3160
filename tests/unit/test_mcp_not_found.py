"""How an MCP lookup says "not found" (`tools.mcp_content.NOT_FOUND`): an `isError` result whose
structured content carries the code `not_found` (as `code` or `error.code`) or whose first text
block starts with it (after the official SDK's "Error executing tool <name>: "). Nothing else an
error says is taken for it, whatever its words: a wrong "not found" sends an effect twice."""

from __future__ import annotations

import re
from typing import Any

import mcp_types
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_jobs.tools.adapter import ServiceRejected
from agent_jobs.tools.mcp_content import NOT_FOUND, result_value


def rejected(texts: list[str], structured: Any = None) -> ServiceRejected:
    result = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=t) for t in texts],
        structured_content=structured,
        is_error=True,
    )
    with pytest.raises(ServiceRejected) as refused:
        result_value(result, [])
    return refused.value


@pytest.mark.parametrize(
    ("texts", "structured"),
    [
        (["not_found"], None),
        (["NOT_FOUND: no credit under that key"], None),
        (["Error executing tool find_credit: not_found: no credit"], None),
        (["no answer"], {"code": "not_found"}),
        ([], {"error": {"code": "NOT_FOUND", "message": "none"}}),
    ],
)
def test_the_documented_not_found_answers(texts: list[str], structured: Any) -> None:
    refused = rejected(texts, structured)
    assert refused.code == NOT_FOUND and not refused.transient


@pytest.mark.parametrize(
    ("texts", "structured"),
    [
        (["not found"], None),  # words, not the code
        (["the ledger said not_found, then failed"], None),  # not its first word
        (["not_founder"], None),
        (["404 Not Found"], None),  # an upstream's 404 may be a missing endpoint
        (["ok", "not_found"], None),  # only the first block speaks for the result
        (["failed"], {"code": "ledger_unavailable", "detail": "not_found"}),
        (["failed"], {"code": 404}),
        (["Error executing tool x: the order was not_found"], None),
    ],
)
def test_what_is_not_the_not_found_answer(texts: list[str], structured: Any) -> None:
    assert rejected(texts, structured).code == "tool_error"


_CODE = re.compile(r"\s*(Error executing tool [A-Za-z0-9_.-]+: )?not_found(?!\w)", re.I)


@given(st.lists(st.text(max_size=60), min_size=1, max_size=3), st.none() | st.dictionaries(
    st.sampled_from(["code", "error", "message"]), st.text(max_size=20) | st.integers()
))  # fmt: skip
def test_any_other_error_is_a_failed_lookup(texts: list[str], structured: Any) -> None:
    code = rejected(texts, structured).code
    said = isinstance(structured, dict) and str(structured.get("code")).lower() == NOT_FOUND
    assert (code == NOT_FOUND) == (said or _CODE.match(texts[0]) is not None)
