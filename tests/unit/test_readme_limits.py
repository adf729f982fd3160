"""README's table of the limits an agent author meets says what the code does: each row's value
is the value of the constant, default or setting it names (a changed limit fails here until the
table says so)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest

from agent_jobs.agents import Agent, Policy, model, steps
from agent_jobs.agents import agent as agent_module
from agent_jobs.agents.claims import MAX_CLAIMS
from agent_jobs.agents.declare import DEFAULT_TIMEOUT_S
from agent_jobs.agents.facts import MAX_FACTS
from agent_jobs.config import Settings
from agent_jobs.tools import http, mcp
from agent_jobs.tools.mcp_config import McpToolConfig

README = Path(__file__).resolve().parents[2] / "README.md"


def rows() -> dict[str, list[str]]:
    text = README.read_text(encoding="utf-8")
    head = text.index("| Limit |", text.index("**Limits an author meets.**"))
    table = text[head : text.index("\n\n", head)]
    out = {}
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        out[cells[0]] = cells[1:]
    return out


def default(fn: Any, name: str) -> Any:
    return inspect.signature(fn).parameters[name].default


CASES = [
    ("A read's result kept", "16,000", steps.MAX_RESULT_CHARS == 16_000),
    ("An MCP tool's result", "256 KiB", mcp.MAX_RESULT_CHARS == 256 * 1024),
    ("One MCP answer on the wire", "1 MiB", mcp.MAX_MESSAGE_BYTES == 1024 * 1024),
    ("One HTTP (OpenAPI) answer", "1 MiB", http.MAX_RESPONSE_BYTES == 1024 * 1024),
    ("A tool result or note", "4,000 characters; 40",
     (model.MAX_ENTRY_CHARS, model.MAX_TRANSCRIPT) == (4000, 40)),
    ("Facts kept per task", "50 each", MAX_FACTS == 50),
    ("Tool calls in one proposal", "8; 20",
     model.proposal_schema([])["allOf"][0]["then"]["properties"]["calls"]["maxItems"] == 8
     and MAX_CLAIMS == 20),
    ("Model calls per step", "6 (1 to 50)", default(Agent, "max_model_calls") == 6),
    ("Effects per task", "1 (1 to 10)",
     default(Agent, "max_effects") == 1 and agent_module.MAX_EFFECTS == 10),
    ("Redrafts after a failed", "1 (0 to 5)", default(Agent, "max_redrafts") == 1),
    ("A tool call (function", "10 s",
     DEFAULT_TIMEOUT_S == 10.0 and McpToolConfig("t", "read", frozenset({"w"})).timeout_s == 10.0),
    ("An MCP connection's cleanup", "3 s", mcp.CLEANUP_GRACE_S == 3.0),
    ("Lookups (or sends", "5", Settings().max_reconcile_attempts == 5),
    ("Consecutive failed attempts", "5", Settings().max_attempts == 5),
    ("Model calls in flight", "no cap", Settings().model_cap == 0),
    ("An approval's validity", "30 min", Policy("P@1").approval_ttl_s == 1800),
]  # fmt: skip


@pytest.mark.parametrize(("row", "shown", "holds"), CASES, ids=[c[0] for c in CASES])
def test_the_table_says_what_the_code_does(row: str, shown: str, holds: bool) -> None:
    (cells,) = [v for k, v in rows().items() if k.startswith(row)]
    assert cells[0] == shown
    assert holds, f"the code no longer has {row!r} at {shown}"


def test_every_row_is_checked() -> None:
    checked = {c[0] for c in CASES}
    unchecked = [k for k in rows() if not any(k.startswith(c) for c in checked)]
    # The route's budgets are checked where they are defined (the routes file's tests).
    assert unchecked == ["Model calls and input tokens per task, per call"]
