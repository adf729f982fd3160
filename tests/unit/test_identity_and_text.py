"""The one rule for identifiers, the one identity comparison, and the one content rule."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_jobs.core.contracts import Action
from agent_jobs.core.identity import (
    check_idempotency_key,
    check_subject,
    check_tenant_id,
    principal,
    same_principal,
)
from agent_jobs.core.text import (
    REPLACEMENT,
    clean_json,
    clean_text,
    for_log,
    to_json,
)

# Every code point, surrogates and NUL included (hypothesis leaves surrogates out by default).
ANY_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=200)
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=12,
)


@pytest.mark.parametrize("bad", ["acme\n", "acme\r\n", "\nacme", "Acme", "acme corp", "", "a" * 64])
def test_tenant_ids_are_full_matched(bad: str) -> None:
    with pytest.raises(ValueError):
        check_tenant_id(bad)


@pytest.mark.parametrize("bad", ["key\n", "key ", "", "k" * 256, "ключ", "k\x00"])
def test_idempotency_keys_are_full_matched(bad: str) -> None:
    with pytest.raises(ValueError):
        check_idempotency_key(bad)


@pytest.mark.parametrize("bad", ["al\x00ice", "alice\n", "\u202eecila", "a\u200bb", "   ", ""])
def test_subjects_carry_no_control_format_or_line_characters(bad: str) -> None:
    with pytest.raises(ValueError):
        check_subject(bad)


@given(ANY_TEXT)
def test_an_accepted_identifier_is_exactly_of_its_alphabet(value: str) -> None:
    for check, pattern in (
        (check_tenant_id, r"[a-z0-9][a-z0-9_.-]{0,62}"),
        (check_idempotency_key, r"[\x21-\x7e]{1,255}"),
    ):
        try:
            check(value)
        except ValueError:
            continue
        assert re.fullmatch(pattern, value)
        assert "\n" not in value


@pytest.mark.parametrize(
    "variant", ["Alice", " alice", "alice ", "ALICE", "aLiCe", "\uff21\uff4c\uff49\uff43\uff45"]
)
def test_spelling_variants_of_one_name_are_one_principal(variant: str) -> None:
    assert same_principal("alice", variant)


def test_different_people_and_nobody_are_not_the_same() -> None:
    assert not same_principal("alice", "alicia")
    assert not same_principal(None, None)
    assert not same_principal("alice", None)


@given(ANY_TEXT)
def test_principal_is_stable(value: str) -> None:
    assert principal(principal(value)) == principal(value)


@given(JSONISH)
@settings(max_examples=300)
def test_clean_json_leaves_nothing_a_store_refuses_and_is_idempotent(value: object) -> None:
    cleaned = clean_json(value)
    text = to_json(value)
    assert "\\u0000" not in text
    text.encode("utf-8")  # no lone surrogates survive
    assert json.loads(text) == json.loads(to_json(cleaned))
    assert clean_json(cleaned) == cleaned


@given(ANY_TEXT)
def test_clean_text_replaces_only_what_cannot_be_stored(value: str) -> None:
    cleaned = clean_text(value)
    assert len(cleaned) == len(value)
    for a, b in zip(value, cleaned, strict=True):
        unstorable = a == "\x00" or 0xD800 <= ord(a) <= 0xDFFF
        assert b == (REPLACEMENT if unstorable else a)


@given(ANY_TEXT)
def test_a_log_line_cannot_be_broken_or_reordered(value: str) -> None:
    shown = for_log(value)
    assert "\n" not in shown and "\r" not in shown
    assert not re.search("[\u202a-\u202e\u2066-\u2069\x00-\x1f]", shown)
    shown.encode("utf-8")
    assert len(shown) <= 200 * 6  # bounded (each escaped character is at most six)


def test_clean_values_are_not_copied() -> None:
    value = {"a": ["b", {"c": 1.5}]}
    assert clean_json(value) is value


@given(st.dictionaries(ANY_TEXT, JSONISH, max_size=4))
@settings(max_examples=200)
def test_an_action_holds_its_args_cleaned_and_always_hashes(args: dict[str, object]) -> None:
    """The action a model or a business system's answer yields is hashed, approved, stored and
    sent as one value: the cleaned one. A lone surrogate once made the hash raise."""
    made = Action(tool="refunds.create", tool_version="2", args=args, idempotency_key="k-1")
    assert made.args == clean_json(args)
    assert made.action_hash.startswith("sha256:")
    again = Action(tool="refunds.create", tool_version="2", args=made.args, idempotency_key="k-1")
    assert again.action_hash == made.action_hash
