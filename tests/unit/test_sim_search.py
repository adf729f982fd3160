"""Keyword scoring for policy search: deterministic and explainable."""

from __future__ import annotations

from agent_jobs.sim.search import Passage, rank, terms


def test_terms_drop_stopwords_and_fold_plurals() -> None:
    assert terms("The refunds of my Order, in 5 to 7 business days") == [
        "refund",
        "order",
        "5",
        "7",
        "business",
        "day",
    ]


def test_score_is_the_fraction_of_query_terms_matched() -> None:
    ps = [
        Passage("D", 1, "c1", "refund approval needed"),
        Passage("D", 1, "c2", "refund only"),
        Passage("D", 1, "c3", "nothing relevant"),
    ]
    hits = rank("refund approval", ps, limit=10)
    assert [(h.passage.chunk_id, h.score) for h in hits] == [("c1", 1.0), ("c2", 0.5)]


def test_ties_break_on_hits_then_ids() -> None:
    ps = [
        Passage("B", 1, "c1", "refund"),
        Passage("A", 1, "c2", "refund"),
        Passage("A", 1, "c1", "refund"),
        Passage("C", 1, "c1", "refund refund"),
    ]
    assert [(h.passage.doc_id, h.passage.chunk_id) for h in rank("refund", ps, 10)] == [
        ("C", "c1"),
        ("A", "c1"),
        ("A", "c2"),
        ("B", "c1"),
    ]


def test_limit_and_empty_queries() -> None:
    ps = [Passage("D", 1, f"c{i}", "refund") for i in range(5)]
    assert len(rank("refund", ps, 2)) == 2
    assert rank("the of and", ps, 10) == []
