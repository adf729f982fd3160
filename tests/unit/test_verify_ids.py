"""The verifier blanks verified ids out of a draft before it looks for account-like tokens: the
hand-written scan must do exactly what the pattern it replaced did, on any text."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_jobs.verify.verifier import _without_known_ids

# What decides a token's edges, over-represented: digits (ASCII and others), spaces, dashes,
# dots, underscores, letters of two scripts, a combining mark, a superscript digit (numeric but
# not decimal), a surrogate and NUL.
EDGES = "0123456789 -._ab\u0663\u00b2\u00e9\u0301\u4e00\ud800\x00\n"
TEXT = st.text(alphabet=st.sampled_from(EDGES) | st.characters(codec=None), max_size=60)


def _by_pattern(text: str, ids: frozenset[str]) -> str:
    """The verifier's previous implementation: one pattern per id."""
    for known in sorted(ids, key=len, reverse=True):
        if not known:
            continue
        pattern = rf"(?<![\w.])(?<!\d[ -]){re.escape(known)}(?![\w])(?!\.\w)(?![ -]\d)"
        text = re.sub(pattern, " ", text)
    return text


@st.composite
def text_and_ids(draw: st.DrawFn) -> tuple[str, frozenset[str]]:
    text = draw(TEXT)
    ids = set(draw(st.lists(TEXT.filter(bool), max_size=2)))
    for _ in range(draw(st.integers(0, 3))):  # ids that do occur in the text
        if text:
            i = draw(st.integers(0, len(text) - 1))
            ids.add(text[i : draw(st.integers(i + 1, min(len(text), i + 12)))])
    return text, frozenset(ids)


@given(text_and_ids())
@settings(max_examples=1500)
def test_the_scan_blanks_exactly_what_the_pattern_did(case: tuple[str, frozenset[str]]) -> None:
    text, ids = case
    assert _without_known_ids(text, ids) == _by_pattern(text, ids)


def test_whole_tokens_go_and_longer_runs_stay() -> None:
    ids = frozenset({"8472", "pay_8472_b"})
    assert _without_known_ids("Order 8472 (pay_8472_b).", ids) == "Order   ( )."
    # Inside a longer run of digits, across a space or a dash, or before a decimal: kept.
    for kept in ("12 8472", "8472-99", "18472", "8472.5", "x8472", "8472\u0663"):
        assert _without_known_ids(kept, ids) == kept
    assert _without_known_ids("8472. Next", ids) == " . Next"
