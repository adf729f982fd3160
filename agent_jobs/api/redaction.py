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
from agent_jobs.core.text import clean_text, cut
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
# Starts only where a run of address characters starts (as `verify.redact`'s): without the
# look-behind a long run with no `@` is rescanned from every position, quadratic in its length.
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_MAX_DEPTH = 16
# In free text, the rule for `RAW_KEYS` reads `key=value` / `key: value`: the value goes.
_PAIR = re.compile(
    r"(?i)(?<![A-Za-z0-9_])(" + "|".join(sorted(RAW_KEYS, key=len, reverse=True)) + r")"
    r"([\"']?\s{0,8}[=:]\s{0,8})(\"[^\"]*\"?|'[^']*'?|\S+)"
)
_BEARER = re.compile(r"(?i)(?<![A-Za-z0-9_])(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]+")
REDACTED = "[REDACTED]"
# Keys whose string values are free text that may quote an exception: a failed attempt's
# `error`, a dead letter's `reason`. They go through `redact_text`.
FREE_TEXT_KEYS = frozenset({"error", "reason", "last_error"})
EVENT_TEXT_MAX_CHARS = 2000
# What a dead letter's reason may show to someone who is not an operator.
REASON_MAX_CHARS = 300


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
            elif low in FREE_TEXT_KEYS and isinstance(v, str):
                out[key] = redact_text(v, EVENT_TEXT_MAX_CHARS)
            else:
                out[key] = redact(v, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [redact(v, depth + 1) for v in value]
    return value


def redact_text(text: str, limit: int = REASON_MAX_CHARS) -> str:
    """Free text as the API may show it to someone who is not an operator (a dead letter's
    reason is an exception's message, and may quote anything the step held): NUL and lone
    surrogates replaced, e-mail addresses masked, the value after any `RAW_KEYS` word followed by
    `=` or `:` (and after `Bearer` / `Basic`) replaced, then cut to `limit` characters. The
    whole text is redacted before it is cut, so a cut never leaves half an address unmasked."""
    text = clean_text(text)
    text = _EMAIL.sub(PII, text)
    text = _BEARER.sub(lambda m: f"{m[1]}{m[2]}{REDACTED}", text)  # before `authorization: `
    text = _PAIR.sub(lambda m: f"{m[1]}{m[2]}{REDACTED}", text)
    return cut(text, limit)


def redact_outcome(outcome: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A task's outcome as the public task view shows it: a dead letter's reason through
    `redact_text` (the raw one stays in the operators' views)."""
    if outcome is None:
        return None
    shown = dict(outcome)
    if shown.get("dead_letter") and "reason" in shown:
        shown["reason"] = redact_text(str(shown["reason"]))
    return shown


def redact_event_data(data: Mapping[str, Any]) -> dict[str, Any]:
    """An event's `data` as the API may show it."""
    result = redact(data)
    return result if isinstance(result, dict) else {}
