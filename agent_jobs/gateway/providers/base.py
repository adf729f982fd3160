"""The provider port: one method, one response shape.

Every provider answers in the OpenAI chat-completions shape, the de-facto protocol of hosted and
local model servers, so the gateway has exactly one parser:

    {"model": ..., "choices": [{"message": {"role": "assistant", "content": "..." | None,
                                            "tool_calls": [{"id", "type": "function",
                                                            "function": {"name", "arguments"}}]},
                                "finish_reason": ...}],
     "usage": {"prompt_tokens", "completion_tokens",
               "prompt_tokens_details": {"cached_tokens"}}}

A provider raises `ModelUnavailable` for anything a later retry may fix (429, 5xx, timeouts,
connection errors), `ProviderRejected` for a request the provider refuses, and
`InvalidModelOutput` when the body is not a chat completion at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from agent_jobs.gateway.chat import ChatResponse
from agent_jobs.gateway.contracts import Message, ModelRequest, Timeouts, ToolSpec

__all__ = ["ChatResponse", "Provider"]


class Provider(Protocol):
    """A model provider. Implementations must be safe to call from several threads."""

    def complete(
        self,
        model: str,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        output_schema: Mapping[str, Any] | None,
        timeouts: Timeouts,
        *,
        request: ModelRequest,
    ) -> ChatResponse:
        """One chat completion. `request` is the caller's full request (with `facts`); only a
        scripted provider may read it. A real provider sends `messages`, `tools` and the schema,
        never `request.facts`, and must return or raise within the timeouts."""
        ...
