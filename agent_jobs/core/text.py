"""Content is data: the one rule for text that comes from outside.

Text from business systems, tokens, users and the model may carry anything. The rule, applied at
every boundary where such text enters (the store's write path, the API's bodies, tool results,
model output) is:

1. **Kept as given**, except the code points no store or wire can carry: NUL (Postgres refuses it
   in `text` and `jsonb`) and lone surrogates (not encodable as UTF-8). Each becomes U+FFFD, the
   replacement character, so the damage is visible and the rest of the value is untouched.
   Likewise the numbers JSON cannot hold (NaN, ±Infinity, which Python's parser accepts from a
   sender) become null.
   Decisions read the cleaned value, so the same input always leads to the same decision, whether
   it came from memory or from the database.
2. **Bounded where it enters**: each entry point has its own size limit (request bodies, tool
   responses, model output); this module gives the helper to cut a string at a limit.
3. **Escaped where it is shown**: a log line or a one-line message shows text through
   `for_log()`: control and bidi characters escaped, cut to a length, so a value can neither
   break a line nor reorder what a person reads.

Pure: no I/O.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson

REPLACEMENT = "\ufffd"
# NUL and the surrogate range: what JSON can spell ("\u0000", "\ud800") but storage cannot hold.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# Shown escaped in logs and one-line messages: C0/C1 controls, DEL, bidi embeddings, overrides
# and isolates, zero-width and line/paragraph separators.
_UNSHOWABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
LOG_MAX_CHARS = 200


def clean_text(value: str) -> str:
    """`value` with NUL and lone surrogates replaced by U+FFFD (everything else kept)."""
    if _UNSTORABLE.search(value) is None:
        return value  # the common case costs one scan and no copy
    return _UNSTORABLE.sub(REPLACEMENT, value)


def clean_json(value: Any) -> Any:
    """`clean_text` applied to every string in a JSON-like value, keys included.

    Returns the same object when nothing needed cleaning (no copy on the hot path). A container
    is first written as ASCII JSON, in C: when that text spells no NUL or surrogate (and holds
    no NaN), nothing in it needs cleaning and it is returned as it is, without the walk."""
    return clean_json_sized(value)[0]


def clean_json_sized(value: Any) -> tuple[Any, int | None]:
    """`clean_json(value)`, and the length of the ASCII JSON that showed it clean, when it was a
    container that needed nothing (else None). No string in it is longer than that length: a
    string is written at least as long as it is."""
    if isinstance(value, dict | list | tuple):
        try:
            text = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):  # NaN, a value JSON cannot spell, a key of odd type
            pass
        else:
            if _ESCAPED_UNSTORABLE.search(text) is None:
                return value, len(text)
    return _clean_walk(value), None


def _clean_walk(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        out: dict[Any, Any] | None = None
        for i, (k, v) in enumerate(value.items()):
            ck = clean_text(k) if isinstance(k, str) else k
            cv = _clean_walk(v)
            if out is None and (ck is not k or cv is not v):
                out = dict(list(value.items())[:i])
            if out is not None:
                out[ck] = cv
        return value if out is None else out
    if isinstance(value, (list, tuple)):
        items = [_clean_walk(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    return value


# What `json.dumps` (ASCII output) writes for NUL or any surrogate: a cheap test on the text
# decides whether the value needs the slower walk. Valid non-BMP characters (emoji) are written
# as surrogate pairs and take the walk too, which keeps them unchanged.
_ESCAPED_UNSTORABLE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")


def to_json(value: Any) -> str:
    """Compact JSON of `value` under the content rule: what every JSON column is written as.

    Written by orjson (a step's state is kilobytes, written at every commit: about a tenth of
    `json.dumps`'s time), which writes NaN and infinities as null (the rule's own answer) and
    refuses what `json` would write differently or not at all (a key that is not a str, an int
    beyond 64 bits, a lone surrogate, a subclass, a dataclass, a datetime): those take the
    `json` path below, as every value did before. orjson does write a UUID or a plain Enum
    member, which `json` refuses. A NUL anywhere is spelled `\u0000` and takes the cleaning path.
    """
    try:
        fast: str | None = orjson.dumps(value, option=_ORJSON_STRICT).decode()
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        fast = None
    if fast is not None and _ESCAPED_UNSTORABLE.search(fast) is None:
        return fast
    try:
        out = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError:  # NaN or an infinity somewhere: cleaned below
        out = None
    if out is not None and _ESCAPED_UNSTORABLE.search(out) is None:
        return out
    return json.dumps(clean_json(value), separators=(",", ":"), allow_nan=False)


_ORJSON_STRICT = (
    orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def is_clean(value: Any) -> bool:
    """Whether `clean_json(value)` would change nothing."""
    return clean_json(value) is value


def cut(value: str, limit: int) -> str:
    """At most `limit` characters, with an ellipsis when cut."""
    return value if len(value) <= limit else value[: max(0, limit - 1)] + "…"


def for_log(value: object, limit: int = LOG_MAX_CHARS) -> str:
    """A value as it may appear in a log line or a one-line message: escaped and bounded."""
    text = value if isinstance(value, str) else str(value)
    text = cut(text, limit)
    return _UNSHOWABLE.sub(lambda m: f"\\u{ord(m.group()):04x}", _UNSTORABLE.sub(REPLACEMENT, text))
