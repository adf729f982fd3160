"""The shortcuts the step cost work took on the CPU (issue 14) give what the plain code gives.

- `canonical_json` checks a plain value without building a path per node; anything else goes to
  the full check, which names the path (hostile values included).
- `SameObjectMemo` (the gateway's validators and token estimates) answers from memory only for
  the very object it saw, unchanged.
- `bounded` (what the model is shown) cleans once and cuts, as cleaning at every level did.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_jobs.core.errors import InvalidInput
from agent_jobs.core.hashing import _check, canonical_json
from agent_jobs.core.memo import SameObjectMemo
from agent_jobs.core.text import clean_json, cut
from agent_jobs.gateway.schemas import validation_errors
from agent_jobs.workflows.refund.prompts import MAX_TEXT_CHARS, bounded

HOSTILE_TEXT = st.one_of(
    st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=20),
    st.sampled_from(
        [
            "\x00",
            "a\x00b",
            "\ud800",
            "\udfff tail",
            "\u202eevil",
            "x" * 4100,
            "x" * 3998,
            "é" * 4001,
            "\x00" * 3999,
        ]
    ),
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()  # NaN and infinities included
    | HOSTILE_TEXT
)
KEYS = HOSTILE_TEXT | st.integers(-3, 3) | st.none() | st.booleans()
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(KEYS, inner, max_size=4)
    ),
    max_leaves=25,
)


def _reference_canonical(value: Any) -> str:
    """`canonical_json` as it was before the fast path: the full check, then the encoding."""
    _check(value, "$")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _outcome(fn: Any, value: Any) -> tuple[str, str]:
    try:
        return ("ok", fn(value))
    except InvalidInput as exc:
        return ("invalid", str(exc))
    except TypeError as exc:  # keys of mixed types cannot be sorted: both fail alike
        return ("type", str(exc))


@given(VALUES)
def test_canonical_json_gives_what_the_full_check_gives(value: Any) -> None:
    assert _outcome(canonical_json, value) == _outcome(_reference_canonical, value)


def test_canonical_json_still_names_the_path_of_what_it_refuses() -> None:
    with pytest.raises(InvalidInput, match=r"\$\.a\[1\]: NaN"):
        canonical_json({"a": [1, math.nan]})
    with pytest.raises(InvalidInput, match=r"\$\.b: object keys must be strings"):
        canonical_json({"b": {1: "x"}})


def test_the_memo_answers_only_for_the_same_unchanged_object() -> None:
    calls: list[Any] = []

    def compute(value: Any) -> str:
        calls.append(value)
        return canonical_json(value)

    memo = SameObjectMemo(compute, size=4)
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert memo(schema) == memo(schema) == canonical_json(schema)
    assert len(calls) == 1  # the same object, unchanged: remembered
    twin = json.loads(json.dumps(schema))
    assert memo(twin) == canonical_json(schema)
    assert len(calls) == 2  # an equal but other object: computed
    schema["properties"]["a"]["type"] = "integer"  # changed in place, deep down
    assert memo(schema) == canonical_json(schema)
    assert len(calls) == 3
    for i in range(10):  # bounded: never more than `size` objects kept
        memo({"n": i})
    assert len(memo._kept) <= 4


def test_a_validator_follows_a_schema_changed_in_place() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"n": {"type": "string"}}}
    assert validation_errors(schema, {"n": "1"}) == []
    schema["properties"]["n"]["type"] = "integer"
    assert validation_errors(schema, {"n": "1"}) != []
    assert validation_errors(schema, {"n": 1}) == []


def _reference_bounded(value: Any) -> Any:
    """`bounded` as it was: cleaned at every level, then cut."""
    value = clean_json(value)
    if isinstance(value, str):
        return cut(value, MAX_TEXT_CHARS)
    if isinstance(value, dict):
        return {k: _reference_bounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_reference_bounded(v) for v in value]
    return value


@pytest.mark.parametrize("n", [MAX_TEXT_CHARS - 3, MAX_TEXT_CHARS, MAX_TEXT_CHARS + 1, 5000])
@pytest.mark.parametrize("char", ["x", "é", "\x00"])
def test_bounded_at_the_cuts_edge_in_a_container(n: int, char: str) -> None:
    """The shortcut (a container whose JSON is short has nothing to cut) at its boundary."""
    for value in ([char * n], {"note": char * n, "id": 1}, {"a": [{"b": char * n}]}):
        assert json.dumps(bounded(value)) == json.dumps(_reference_bounded(value))


@given(VALUES)
def test_bounded_cleans_once_and_cuts_as_before(value: Any) -> None:
    got, want = bounded(value), _reference_bounded(value)
    # NaN != NaN: compare their JSON (NaN cleans to None anyway; a NaN key stays a NaN key).
    assert json.dumps(got, sort_keys=False, default=repr) == json.dumps(
        want, sort_keys=False, default=repr
    )


@given(VALUES)
def test_deep_copy_is_an_independent_equal_copy(value: Any) -> None:
    import copy

    from agent_jobs.core.copies import deep_copy

    got = deep_copy(value)
    want = copy.deepcopy(value)
    assert json.dumps(got, default=repr) == json.dumps(want, default=repr)
    assert type(got) is type(want)
    if isinstance(value, dict | list):
        assert got is not value


def test_deep_copy_keeps_shared_parts_shared_and_copes_with_the_unpicklable() -> None:
    from agent_jobs.core.copies import deep_copy

    shared = {"a": [1, 2]}
    value = {"x": shared, "y": shared, "t": (1, "two")}
    got = deep_copy(value)
    got["x"]["a"].append(3)
    assert shared == {"a": [1, 2]}  # independent of the original
    assert got["y"]["a"] == [1, 2, 3]  # and shared where the original shared
    assert got["t"] == (1, "two")

    def f() -> int:
        return 1

    odd = {"f": f, "n": [1]}  # pickle refuses a local function; deepcopy keeps it
    copied = deep_copy(odd)
    assert copied["f"] is f
    assert copied["n"] == [1] and copied["n"] is not odd["n"]


@given(VALUES)
def test_clean_json_returns_what_the_walk_returns(value: Any) -> None:
    from agent_jobs.core.text import _clean_walk

    got, want = clean_json(value), _clean_walk(value)
    assert json.dumps(got, default=repr) == json.dumps(want, default=repr)
    if want is value:
        assert got is value  # nothing to clean: the very same object, no copy


def _reference_to_json(value: Any) -> str:
    """`to_json` before orjson: `json` alone, cleaned when it must be."""
    from agent_jobs.core.text import _ESCAPED_UNSTORABLE

    try:
        out = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except ValueError:
        out = None
    if out is not None and _ESCAPED_UNSTORABLE.search(out) is None:
        return out
    return json.dumps(clean_json(value), separators=(",", ":"), allow_nan=False)


@given(VALUES)
def test_to_json_writes_what_the_json_path_writes(value: Any) -> None:
    from agent_jobs.core.text import to_json

    def outcome(fn: Any) -> Any:
        try:
            return ("ok", json.loads(fn(value)))
        except (TypeError, ValueError) as exc:
            return ("error", type(exc).__name__)

    got, want = outcome(to_json), outcome(_reference_to_json)
    # The same JSON value (the text may differ: UTF-8 against \\u escapes, 1e16 against 1e+16).
    assert json.dumps(got, sort_keys=True, default=repr) == json.dumps(
        want, sort_keys=True, default=repr
    )
    if got[0] == "ok":
        assert "\\u0000" not in to_json(value).replace("\\\\", "")  # never a NUL for Postgres
