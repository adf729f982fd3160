"""A fast validity check in front of `jsonschema`, for the hot path's schemas.

`jsonschema` walks a schema in Python: 100 to 300 µs to accept a model's proposal against the
route's output schema, on every model call, and tens of µs for every tool call's arguments.
jsonschema-rs (Rust, the same drafts, the same official test suite) answers in about a
microsecond. Only its "valid" is taken: an instance it finds invalid, or cannot take at all (NaN,
an integer beyond 64 bits, a lone surrogate, a key that is not a string), is judged by
`jsonschema`, whose messages the repair request and the tool errors quote, exactly as before.

A schema that uses a keyword whose meaning could differ between the two gets no fast check:
regular expressions (`pattern`, `patternProperties`: Rust's dialect is not Python's), `format`,
references and anchors (resolution), content and unevaluated keywords. Without jsonschema-rs
installed, every check is `jsonschema`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

try:
    import jsonschema_rs as _rs
except ImportError:  # pragma: no cover - a dependency; optional all the same
    _rs = None  # type: ignore[assignment]

# Keywords the fast check leaves alone (see the module). A property *named* like one of them
# also turns it off: conservative, and only slower.
RISKY = frozenset(
    {
        "pattern", "patternProperties", "format", "$ref", "$dynamicRef", "$recursiveRef",
        "$id", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$vocabulary",
        "contentEncoding", "contentMediaType", "contentSchema",
        "unevaluatedProperties", "unevaluatedItems",
    }
)  # fmt: skip


def _uses(schema: Any, keys: frozenset[str]) -> bool:
    if isinstance(schema, Mapping):
        return any(k in keys or _uses(v, keys) for k, v in schema.items())
    if isinstance(schema, list | tuple):
        return any(_uses(v, keys) for v in schema)
    return False


def fast_check(schema: Mapping[str, Any]) -> Callable[[Any], bool] | None:
    """`is_valid` for `schema` by jsonschema-rs, or None when it should not be trusted with it
    (see the module) or is not installed. True means valid; False means "ask jsonschema"."""
    if _rs is None or _uses(schema, RISKY):
        return None
    try:
        compiled = _rs.validator_for(dict(schema))
    except Exception:  # a schema it will not compile: jsonschema judges every instance
        return None

    def is_valid(instance: Any) -> bool:
        try:
            return bool(compiled.is_valid(instance))
        except Exception:  # a value it cannot take (NaN, a huge integer, a surrogate)
            return False

    return is_valid


@dataclass(frozen=True)
class CheckedSchema:
    """A schema's `jsonschema` validator (whose messages callers quote) with the fast "valid" in
    front of it where it applies: what the gateway and the tool descriptors validate with."""

    validator: Any
    fast: Callable[[Any], bool] | None

    @classmethod
    def of(cls, schema: Mapping[str, Any]) -> CheckedSchema:
        """For a schema already known to be valid JSON Schema (callers check it first, each
        raising its own error)."""
        return cls(Draft202012Validator(dict(schema)), fast_check(schema))

    def errors(self, instance: Any) -> Iterable[Any]:
        """`jsonschema`'s errors for `instance`; none, without asking it, when the fast check
        says it is valid."""
        if self.fast is not None and self.fast(instance):
            return ()
        found: Iterable[Any] = self.validator.iter_errors(instance)
        return found
