"""Keyword scoring for `GET /policies/search`: simple, explainable and fully deterministic.

A passage's score is the fraction of the distinct query terms it contains. Ties are broken by how
often those terms occur, then by document id, version and chunk id, so the same query over the
same world always returns the same list in the same order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_WORD = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(
    {
        *("a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "have", "in"),
        *("is", "it", "its", "of", "on", "or", "that", "the", "this", "to", "was", "were"),
        *("will", "with", "my", "me", "i", "you", "your", "we", "our"),
    }
)


def terms(text: str) -> list[str]:
    """Lower-case words without stopwords, with a plural `s` folded so 'refunds' finds 'refund'."""
    out = []
    for word in _WORD.findall(text.lower()):
        if word in _STOPWORDS:
            continue
        plural = len(word) > 3 and word.endswith("s") and not word.endswith("ss")
        out.append(word[:-1] if plural else word)
    return out


@dataclass(frozen=True)
class Passage:
    doc_id: str
    version: int
    chunk_id: str
    text: str


@dataclass(frozen=True)
class Hit:
    passage: Passage
    score: float
    hits: int


def rank(query: str, passages: Iterable[Passage], limit: int) -> list[Hit]:
    """The best `limit` passages for `query`; passages sharing no term with it are left out."""
    wanted = set(terms(query))
    if not wanted:
        return []
    found: list[Hit] = []
    for p in passages:
        words = terms(p.text)
        matched = wanted.intersection(words)
        if not matched:
            continue
        hits = sum(1 for w in words if w in wanted)
        found.append(Hit(p, round(len(matched) / len(wanted), 4), hits))
    found.sort(
        key=lambda h: (-h.score, -h.hits, h.passage.doc_id, h.passage.version, h.passage.chunk_id)
    )
    return found[:limit]
