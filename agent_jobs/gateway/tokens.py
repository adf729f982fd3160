"""The gateway's token estimator, used to enforce budgets *before* a call.

Deterministic and tokenizer-free on purpose: the gateway must refuse an over-budget call before
it is sent, for every provider, and tests must get the same number on every machine.

    tokens(text)    = ceil(len(text) / 4)             (characters, not bytes)
    tokens(request) = sum over messages of (tokens(content) + 4)
                    + sum over tools of tokens(canonical JSON of the tool spec)
                    + tokens(canonical JSON of the output schema), if any

Four characters per token is the usual rule of thumb for English with BPE tokenizers; the +4 per
message stands for the role and separators real chat formats add. When a provider reports real
counts, accounting uses those; the estimate only gates the call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent_jobs.core.hashing import canonical_json
from agent_jobs.core.memo import SameObjectMemo
from agent_jobs.gateway.contracts import Message, ToolSpec

CHARS_PER_TOKEN = 4
PER_MESSAGE_TOKENS = 4


def estimate_text_tokens(text: str) -> int:
    """ceil(len(text) / 4); 0 for the empty string."""
    return -(-len(text) // CHARS_PER_TOKEN)


def estimate_input_tokens(
    messages: Sequence[Message],
    tools: Sequence[ToolSpec] = (),
    output_schema: Mapping[str, Any] | None = None,
) -> int:
    """The documented estimate of what a request will cost in input tokens."""
    total = sum(estimate_text_tokens(m.content) + PER_MESSAGE_TOKENS for m in messages)
    total += sum(_tool_tokens(t) for t in tools)
    if output_schema:
        total += _schema_tokens(output_schema)
    return total


# The same tool specs and output schema come with every call: remembered per object (see
# core/memo.py); a frozen `ToolSpec` compares equal while its parameters are unchanged.
_tool_tokens = SameObjectMemo(lambda t: estimate_text_tokens(canonical_json(t.model_dump())))
_schema_tokens = SameObjectMemo(lambda s: estimate_text_tokens(canonical_json(dict(s))))
