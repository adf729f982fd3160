"""Output schemas a route can name, and their cached validators.

`PROPOSAL_V3` is what a model may return: a set of tool calls to request, a final draft with
its claims (which the verifier checks against facts), or no action. Variants are selected with
`if`/`then` on `kind` rather than `oneOf`, so a validation error names the exact field that is
wrong ("$.draft.claims[0]: 'status' is a required property") instead of "matched no branch";
that message is what the repair request sends back to the model.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from agent_jobs.core.hashing import canonical_json
from agent_jobs.core.memo import SameObjectMemo
from agent_jobs.core.schema_check import CheckedSchema


def variant(kind: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """One branch of a proposal schema: when `kind` is this, exactly these properties."""
    return {
        "if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
        "then": {
            "properties": {"kind": {"const": kind}, **props},
            "required": ["kind", *required],
            "additionalProperties": False,
        },
    }


def _claim(kind: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "if": {"properties": {"type": {"const": kind}}, "required": ["type"]},
        "then": {
            "properties": {"type": {"const": kind}, **props},
            "required": ["type", *required],
            "additionalProperties": False,
        },
    }


_NONEMPTY = {"type": "string", "minLength": 1}

_CLAIM: dict[str, Any] = {
    "type": "object",
    "required": ["type"],
    "properties": {
        "type": {
            "enum": ["duplicate_charge", "refund_submitted", "policy_cited", "no_refund"],
        }
    },
    "allOf": [
        _claim(
            "duplicate_charge",
            {"payment_ids": {"type": "array", "items": _NONEMPTY, "minItems": 1}},
            ["payment_ids"],
        ),
        _claim(
            "refund_submitted",
            {
                "refund_id": _NONEMPTY,
                "amount_minor": {"type": "integer", "minimum": 1},
                "status": {"enum": ["processing", "settled"]},
            },
            ["refund_id", "amount_minor", "status"],
        ),
        _claim(
            "policy_cited",
            {"doc": _NONEMPTY, "version": {"type": ["string", "integer"]}},
            ["doc", "version"],
        ),
        _claim("no_refund", {"reason": _NONEMPTY}, ["reason"]),
    ],
}

PROPOSAL_V3: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "proposal_v3",
    "type": "object",
    "required": ["kind"],
    "properties": {"kind": {"enum": ["tool_calls", "final_draft", "no_action"]}},
    "allOf": [
        variant(
            "tool_calls",
            {
                "calls": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {"tool": _NONEMPTY, "args": {"type": "object"}},
                        "required": ["tool", "args"],
                        "additionalProperties": False,
                    },
                },
                "rationale": {"type": "string"},
            },
            ["calls", "rationale"],
        ),
        variant(
            "final_draft",
            {
                "draft": {
                    "type": "object",
                    "properties": {
                        "text": _NONEMPTY,
                        "claims": {"type": "array", "items": _CLAIM},
                    },
                    "required": ["text", "claims"],
                    "additionalProperties": False,
                }
            },
            ["draft"],
        ),
        variant("no_action", {"reason": _NONEMPTY}, ["reason"]),
    ],
}

# Schemas a route config may name instead of inlining one.
SCHEMAS: Mapping[str, dict[str, Any]] = {"proposal_v3": PROPOSAL_V3}


_cache: dict[str, CheckedSchema] = {}
_cache_lock = threading.Lock()


def validator_for(schema: Mapping[str, Any]) -> Any:
    """A compiled validator for `schema`, cached by its canonical JSON (schemas are small and few),
    and, in front of that, by the schema object itself (`SameObjectMemo`): every model call asks
    for the route's schema and each tool's, the same objects each time.

    Raises `jsonschema.SchemaError` when the schema itself is not valid JSON Schema.
    """
    return _compiled_by_object(schema).validator


def _compiled_by_canonical_json(schema: Mapping[str, Any]) -> CheckedSchema:
    key = canonical_json(dict(schema))
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    Draft202012Validator.check_schema(schema)
    compiled = CheckedSchema.of(schema)
    with _cache_lock:
        # Bounded: routes and tool schemas are configuration, but a caller inventing schemas per
        # request must not grow this forever.
        if len(_cache) > 512:
            _cache.clear()
        _cache[key] = compiled
    return compiled


_compiled_by_object = SameObjectMemo(_compiled_by_canonical_json)


def validation_errors(schema: Mapping[str, Any], instance: Any, *, limit: int = 5) -> list[str]:
    """Readable validation errors (`$.path: message`), at most `limit`, empty when valid. A
    valid instance is recognised by the fast check (`core.schema_check`) where it applies."""
    found = sorted(
        _compiled_by_object(schema).errors(instance),
        key=lambda e: [str(p) for p in e.absolute_path],
    )
    out = []
    for err in found[:limit]:
        path = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path)
        out.append(f"{path}: {err.message[:300]}")
    return out
