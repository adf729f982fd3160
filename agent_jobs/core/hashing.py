"""Canonical JSON, payload and action hashes, and idempotency-key derivation.

Hashes are how an approval binds one exact action and how a repeated request is recognised, so
the encoding must not depend on dict order, whitespace or float formatting quirks.
"""

from __future__ import annotations

import hashlib
import json
import math
import string
from collections.abc import Mapping
from typing import Any

from agent_jobs.core.errors import InvalidInput


def _check(value: Any, path: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(f"{path}: NaN and infinities have no canonical JSON form")
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidInput(f"{path}: object keys must be strings, got {type(k).__name__}")
            _check(v, f"{path}.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _check(v, f"{path}[{i}]")


def _plain(value: Any) -> bool:
    """True when `value` is plainly canonical: built of exact dicts with str keys, lists,
    tuples, str, int, bool, None and finite floats. The common case, checked without building
    a path for every node; anything else (NaN, a non-str key, a subclass) goes to `_check`,
    which decides and names the path."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(value)
    if kind is dict:
        return all(type(k) is str and _plain(v) for k, v in value.items())
    if kind is list or kind is tuple:
        return all(_plain(v) for v in value)
    return False


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 text, finite numbers only (RFC 8785 in spirit)."""
    if not _plain(value):
        _check(value, "$")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def payload_hash(payload: Any) -> str:
    """Identity of a submitted payload, compared when an idempotency key is reused."""
    return "sha256:" + sha256_hex(canonical_json(payload))


def action_hash(tool: str, tool_version: str, args: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of (tool, tool version, args): what an approval binds to."""
    return "sha256:" + sha256_hex(
        canonical_json({"tool": tool, "tool_version": tool_version, "args": dict(args)})
    )


def args_hash(args: Mapping[str, Any]) -> str:
    """Hash of tool arguments for audit events: correlatable, not readable."""
    return "sha256:" + sha256_hex(canonical_json(dict(args)))


_ALLOWED_KEY_CHARS = set(string.ascii_letters + string.digits + "-_:.@/")


def derive_idempotency_key(template: str, fields: Mapping[str, Any]) -> str:
    """Fill a template such as ``refund:{request_id}:{payment_id}`` from the action's identity.

    The key names the action, never the attempt: the first try and every retry present the same
    key, so an idempotent backend returns the original result instead of acting twice. Missing
    fields, unused-placeholder typos and values that are not plain scalars are errors.
    """
    names = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    if not names:
        raise InvalidInput(f"idempotency key template {template!r} names no field")
    values: dict[str, str] = {}
    for name in names:
        if name not in fields:
            raise InvalidInput(f"idempotency key template {template!r} needs field {name!r}")
        value = fields[name]
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise InvalidInput(f"idempotency key field {name!r} must be a string or integer")
        text = str(value)
        if not text or not set(text) <= _ALLOWED_KEY_CHARS:
            raise InvalidInput(
                f"idempotency key field {name!r} has characters outside [A-Za-z0-9-_:.@/]"
            )
        values[name] = text
    key = template.format(**values)
    if len(key) > 255:
        raise InvalidInput("idempotency key longer than 255 characters")
    return key
