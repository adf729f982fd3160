"""The chat-completions shape, both ways: read a response, build one from a proposal.

Reading: model output is text until proven otherwise, so nothing trusts the response's shape;
anything unusable becomes errors the gateway sends back in its one repair request. Building:
the scripted provider and the fake server wrap a proposal exactly as a real model would answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, TypeAlias

# A chat-completions response body, as parsed JSON.
ChatResponse: TypeAlias = dict[str, Any]

# Models often wrap JSON in a Markdown fence; unwrapping one fence costs nothing and saves a repair.
_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(?P<body>.*)\n\s*```\s*$", re.DOTALL)


@dataclass(frozen=True)
class ParsedOutput:
    """`proposal` is None when the output could not be read as a JSON object (see `errors`).
    Token counts are None when the provider did not report them."""

    proposal: dict[str, Any] | None
    raw: str
    errors: list[str] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int = 0


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _usage(resp: ChatResponse) -> tuple[int | None, int | None, int]:
    usage = resp.get("usage")
    if not isinstance(usage, dict):
        return None, None, 0
    prompt = _count(usage.get("prompt_tokens"))
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
    # Cached tokens are a part of the prompt tokens; a larger figure is nonsense, so drop it.
    cached = cached if cached is not None and prompt is not None and cached <= prompt else 0
    return prompt, _count(usage.get("completion_tokens")), cached


def _from_tool_calls(calls: list[Any], content: Any) -> tuple[dict[str, Any] | None, list[str]]:
    out, errors = [], []
    for i, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            errors.append(f"$.calls[{i}]: tool call has no function name")
            continue
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except (TypeError, json.JSONDecodeError) as exc:
            errors.append(f"$.calls[{i}].args: arguments are not valid JSON ({exc})")
            continue
        if not isinstance(args, dict):
            errors.append(f"$.calls[{i}].args: arguments must be a JSON object")
            continue
        out.append({"tool": fn["name"], "args": args})
    if errors:
        return None, errors
    rationale = content if isinstance(content, str) else ""
    return {"kind": "tool_calls", "calls": out, "rationale": rationale}, []


def _from_content(content: str) -> tuple[dict[str, Any] | None, list[str]]:
    fenced = _FENCE.match(content)
    text = fenced.group("body") if fenced else content
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, [f"$: reply is not valid JSON ({exc.msg} at line {exc.lineno})"]
    if not isinstance(value, dict):
        return None, [f"$: reply must be a JSON object, got {type(value).__name__}"]
    return value, []


def parse_chat_response(resp: ChatResponse) -> ParsedOutput:
    """Read `choices[0].message`: tool calls become a `tool_calls` proposal (the message text,
    if any, its rationale); otherwise the content must be one JSON object."""
    prompt, completion, cached = _usage(resp)
    choices = resp.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        missing = ["$: response has no choices[0].message"]
        return ParsedOutput(None, json.dumps(resp)[:2000], missing, prompt, completion, cached)
    content, calls = message.get("content"), message.get("tool_calls")
    if isinstance(calls, list) and calls:
        raw = json.dumps(calls, ensure_ascii=False)
        proposal, errors = _from_tool_calls(calls, content)
    elif isinstance(content, str) and content.strip():
        raw = content
        proposal, errors = _from_content(content)
    else:
        refusal = message.get("refusal")
        raw = refusal if isinstance(refusal, str) else ""
        reason = f"the model refused: {refusal}" if raw else "the reply is empty"
        proposal, errors = None, [f"$: {reason}"]
    return ParsedOutput(proposal, raw, errors, prompt, completion, cached)


def proposal_message(proposal: Any, *, as_tool_calls: bool | None = None) -> dict[str, Any]:
    """The assistant message a model would send for `proposal`.

    A well-formed `tool_calls` proposal becomes real `tool_calls` (its rationale the text
    content) unless `as_tool_calls` is False; anything else is a JSON string in `content`.
    """
    calls = proposal.get("calls") if isinstance(proposal, dict) else None
    usable = (
        isinstance(proposal, dict)
        and proposal.get("kind") == "tool_calls"
        and isinstance(calls, list)
        and all(isinstance(c, dict) and isinstance(c.get("tool"), str) for c in calls)
    )
    if as_tool_calls is not False and usable and isinstance(calls, list):
        rationale = proposal.get("rationale")
        return {
            "role": "assistant",
            "content": rationale if isinstance(rationale, str) and rationale else None,
            "tool_calls": [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {
                        "name": c["tool"],
                        "arguments": json.dumps(c.get("args", {}), sort_keys=True),
                    },
                }
                for i, c in enumerate(calls)
            ],
        }
    return {"role": "assistant", "content": json.dumps(proposal, sort_keys=True)}


def message_text(message: dict[str, Any]) -> str:
    """Everything a message says, for counting its tokens."""
    text = message.get("content") or ""
    for call in message.get("tool_calls") or []:
        text += call["function"]["name"] + call["function"]["arguments"]
    return str(text)


def chat_completion(
    model: str,
    message: dict[str, Any],
    *,
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int = 0,
    response_id: str = "chatcmpl-0",
    extra: dict[str, Any] | None = None,
) -> ChatResponse:
    """A complete chat-completions response body around one assistant message."""
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens},
        },
        **(extra or {}),
    }
