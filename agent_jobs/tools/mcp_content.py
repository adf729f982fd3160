"""What an MCP server hands us, taken as data (`tools.mcp` connects and calls; this is what it
does with the answers): the server's argument schema checked and closed, a `tools/call` result
cleaned, bounded and scrubbed of the credentials the call sent, and those credentials themselves.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import mcp_types

from agent_jobs.core.errors import ConfigError
from agent_jobs.core.text import clean_json, clean_text, cut
from agent_jobs.tools.adapter import ServiceFailed, ServiceRejected

# The whole answer a model may be handed from one call, in characters: text blocks are cut to
# what is left of it, structured content that does not fit is dropped (both marked `truncated`).
MAX_RESULT_CHARS = 256 * 1024
MAX_BLOCKS = 64
MAX_DESCRIPTION_CHARS = 1000
MAX_ERROR_CHARS = 500
# A tool's argument schema is a few hundred bytes; a server's megabyte of schema is refused.
MAX_SCHEMA_CHARS = 64 * 1024
# A secret shorter than this is not scrubbed from results: it would mangle ordinary words.
MIN_SCRUB_CHARS = 8
REDACTED = "[redacted]"


@dataclass(frozen=True)
class Secrets:
    """What one connection sends that must never come back: resolved values, for scrubbing."""

    headers: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    # The executor's minted credential, also on its own: a server may echo it without "Bearer".
    token: str = ""

    def values(self) -> list[str]:
        found = {*self.headers.values(), *self.env.values(), self.token}
        # Longest first, so a secret containing another is scrubbed whole.
        return sorted((v for v in found if len(v) >= MIN_SCRUB_CHARS), key=len, reverse=True)


def scrub(value: Any, secrets: Sequence[str]) -> Any:
    if not secrets:
        return value
    if isinstance(value, str):
        for s in secrets:
            value = value.replace(s, REDACTED)
        return value
    if isinstance(value, dict):
        return {scrub(k, secrets): scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, secrets) for v in value]
    return value


def check_schema_source(name: str, schema: Any) -> dict[str, Any]:
    """The server's argument schema, bounded, with local references only, and closed."""
    if not isinstance(schema, dict):
        raise ConfigError(f"mcp tool {name}: input schema is not an object")
    try:
        size = len(json.dumps(schema, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as e:
        raise ConfigError(f"mcp tool {name}: input schema is not JSON: {type(e).__name__}") from e
    if size > MAX_SCHEMA_CHARS:
        raise ConfigError(f"mcp tool {name}: input schema of {size} chars is over the limit")
    out = clean_json(copy.deepcopy(schema))

    def refs_ok(node: Any) -> bool:
        if isinstance(node, dict):
            for k, v in node.items():
                # A reference out of the document could make the validator fetch a URL.
                if k in ("$ref", "$dynamicRef") and not (isinstance(v, str) and v.startswith("#")):
                    return False
                if k in ("$id", "$schema") and node is not out:
                    return False
                if not refs_ok(v):
                    return False
        elif isinstance(node, list):
            return all(refs_ok(v) for v in node)
        return True

    if not refs_ok(out):
        raise ConfigError(f"mcp tool {name}: input schema refers outside itself")
    out.pop("$id", None)
    out["additionalProperties"] = False
    return dict(out)


BlockKind = Literal["text", "image", "audio", "resource_link", "resource"]

# An `isError` result saying "nothing here" rather than "this failed": the code a lookup by key
# answers when no effect exists under the key, so the effect is sent again under the same key.
# Only this explicit code counts (in the structured content's `code` or `error.code`, or as the
# first word of the first text block, after the official Python SDK's "Error executing tool
# <name>: " as `raise ToolError("not_found: ...")` sends it): any other error, however
# worded, is a failed lookup, since a wrong "not found" sends the effect twice.
NOT_FOUND = "not_found"
_NOT_FOUND_TEXT = re.compile(
    r"\s*(?:Error executing tool [A-Za-z0-9_.-]{1,128}: )?not_found(?![A-Za-z0-9_])", re.IGNORECASE
)


def says_not_found(structured: Any, content: Sequence[dict[str, Any]]) -> bool:
    """Whether an `isError` result is the not-found answer (see `NOT_FOUND`)."""
    if isinstance(structured, dict):
        error = structured.get("error")
        codes = [structured.get("code"), error.get("code") if isinstance(error, dict) else None]
        if any(isinstance(c, str) and c.lower() == NOT_FOUND for c in codes):
            return True
    texts = [b["text"] for b in content if b.get("type") == "text"]
    return bool(texts) and _NOT_FOUND_TEXT.match(str(texts[0])) is not None


def result_value(result: Any, secrets: list[str]) -> dict[str, Any]:
    """A `tools/call` result as the data a model may be shown: text and structured content,
    cleaned, bounded and scrubbed; an `isError` result is a definitive rejection."""
    if not isinstance(result, mcp_types.CallToolResult):
        # An input-required or task result: a conversation this executor does not hold.
        raise ServiceFailed("unsupported_result", type(result).__name__, transient=False)
    budget = MAX_RESULT_CHARS
    truncated = False
    content: list[dict[str, Any]] = []
    for block in result.content[:MAX_BLOCKS]:
        if isinstance(block, mcp_types.TextContent):
            text = scrub(clean_text(block.text), secrets)
            if len(text) > budget:
                # `cut` marks the cut with an ellipsis, which an exhausted budget has no room for.
                text, truncated = (cut(text, budget) if budget > 0 else ""), True
            budget -= len(text)
            content.append({"type": "text", "text": text})
        else:
            # Images, audio and resources are not passed on: only that one was there.
            kind = cut(clean_text(str(getattr(block, "type", "unknown"))), 40)
            content.append({"type": kind, "omitted": True})
    truncated = truncated or len(result.content) > MAX_BLOCKS
    if result.is_error:
        text = " ".join(str(b.get("text", "")) for b in content)
        code = NOT_FOUND if says_not_found(result.structured_content, content) else "tool_error"
        raise ServiceRejected(code, cut(text, MAX_ERROR_CHARS) or "the tool failed")
    structured = None
    if result.structured_content is None and not truncated:
        structured = _text_object(content, secrets)
    elif result.structured_content is not None:
        cleaned = scrub(clean_json(result.structured_content), secrets)
        try:
            size = len(json.dumps(cleaned, allow_nan=False))
        except (TypeError, ValueError, RecursionError):
            size = budget + 1
        if size <= budget:
            structured = cleaned
        else:
            truncated = True
    out: dict[str, Any] = {"content": content, "structured": structured}
    if truncated:
        out["truncated"] = True
    return out


def as_object(value: dict[str, Any]) -> dict[str, Any]:
    """The one JSON object an MCP result (`result_value`'s) stands for, as a Python function's
    dict or an HTTP body is one: its structured content, else `{"text": ...}` (with
    `truncated: true` when cut; non-text blocks were never passed on)."""
    structured = value.get("structured")
    if isinstance(structured, dict):
        return structured
    text = "".join(
        str(b.get("text", "")) for b in value.get("content") or () if b.get("type") == "text"
    )
    out: dict[str, Any] = {"text": text}
    if value.get("truncated"):
        out["truncated"] = True
    return out


def _text_object(content: Sequence[dict[str, Any]], secrets: Sequence[str]) -> Any:
    """The text blocks, when together they are one JSON object: how a server without structured
    output sends its JSON. Cleaned and scrubbed again, since JSON escapes (`\\u0000`, a secret
    spelled in escapes) come to life only when parsed."""
    text = "".join(str(b.get("text", "")) for b in content if b.get("type") == "text")
    if not text.lstrip().startswith("{"):
        return None
    try:
        parsed = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return None
    if not isinstance(parsed, dict):
        return None
    try:
        return scrub(clean_json(parsed), secrets)
    except RecursionError:
        return None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON a task can store")
