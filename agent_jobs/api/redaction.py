"""Redaction of event data on the way out of the API.

Events are written with identities and hashes (`orchestrator.steps.action_summary`), but a
workflow can emit its own events with anything in them. So the API never trusts that: values
under keys that hold call arguments, payloads or model/tool text are replaced by their hash (still
enough to correlate two events), personal-data keys by a marker, and e-mail addresses in any
string are masked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agent_jobs.core.hashing import canonical_json, sha256_hex
from agent_jobs.verify.redact import PII, PII_KEYS

# Keys whose values may carry raw arguments, payloads, or model and tool text.
RAW_KEYS = frozenset(
    {
        "args",
        "arguments",
        "tool_args",
        "kwargs",
        "input",
        "inputs",
        "params",
        "parameters",
        "payload",
        "body",
        "request",
        "response",
        "result",
        "results",
        "output",
        "raw",
        "prompt",
        "messages",
        "completion",
        "content",
        "credential",
        "credentials",
        "token",
        "authorization",
        "password",
        "secret",
    }
)
_EMAIL = re.compile(r"[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_MAX_DEPTH = 16


def _digest(value: Any) -> str:
    try:
        return "sha256:" + sha256_hex(canonical_json(value))
    except Exception:
        return "sha256:" + sha256_hex(repr(value))


def redact(value: Any, depth: int = 0) -> Any:
    """A redacted copy of event data (nested dicts and lists)."""
    if depth > _MAX_DEPTH:
        return "[REDACTED:depth]"
    if isinstance(value, str):
        return _EMAIL.sub(PII, value)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            key = str(k)
            low = key.lower()
            if low in RAW_KEYS:
                out[key] = {"redacted": True, "hash": _digest(v)}
            elif low in PII_KEYS:
                out[key] = PII
            else:
                out[key] = redact(v, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [redact(v, depth + 1) for v in value]
    return value


def redact_event_data(data: Mapping[str, Any]) -> dict[str, Any]:
    """An event's `data` as the API may show it."""
    result = redact(data)
    return result if isinstance(result, dict) else {}
