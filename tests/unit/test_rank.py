"""fulltext/rank.py's pure parts and search.py's relevance: how a conversation's matching
messages add up, what a tool call's columns may not decide, and the figure each result shows."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st


@pytest.fixture
def rank(phr):
    return phr.module("fulltext.rank")


@pytest.fixture
def search(phr):
    return phr.search


def test_a_conversations_score_is_its_best_plus_the_log_of_the_rest(rank):
    assert rank.conversation_score([]) == 0.0
    assert rank.conversation_score([5.0]) == 5.0
    assert rank.conversation_score([2.0, 5.0, 1.0]) == pytest.approx(5.0 + math.log(4.0))
    # Many weak mentions cannot outweigh one strong match by much: ln grows slowly.
    assert rank.conversation_score([1.0] * 100) < rank.conversation_score([7.0])


@given(st.lists(st.floats(min_value=0, max_value=50), min_size=1, max_size=30), st.floats(0, 50))
def test_more_evidence_never_lowers_a_conversation(phr, scores, extra):
    rank = phr.module("fulltext.rank")
    base = rank.conversation_score(scores)
    assert base >= max(scores)
    assert rank.conversation_score([*scores, extra]) >= base - 1e-9


def row(conversation: str, message_id: int, score: float, bm25: float | None = None) -> dict:
    return {"conversation": conversation, "message_id": message_id, "score": score, "bm25": bm25}


def test_rows_are_ranked_by_conversation_then_by_their_own_score(rank):
    rows = [
        row("once", 1, 6.0, 6.0),
        row("often", 2, 5.0, 5.0),
        row("often", 3, 2.0, 2.0),
        row("like", 4, 1.0),  # a LIKE match: no bm25
        row("often", 5, 3.0, 3.0),
    ]
    ranked = rank.rank_by_conversation(rows)
    assert [(r["conversation"], r["message_id"]) for r in ranked] == [
        ("often", 2),
        ("often", 5),
        ("often", 3),
        ("once", 1),
        ("like", 4),
    ]
    assert ranked[0]["conversation_score"] == pytest.approx(5.0 + math.log(6.0))
    assert ranked[0]["evidence"] == ranked[0]["conversation_score"]
    assert ranked[-1]["evidence"] is None  # nothing to weigh: LIKE only
    # Equal conversations: the one whose best message is older first.
    tie = rank.rank_by_conversation([row("b", 9, 1.0, 1.0), row("a", 4, 1.0, 1.0)])
    assert [r["conversation"] for r in tie] == ["a", "b"]


def test_a_match_only_in_tool_call_columns_is_no_match(rank, phr):
    term = phr.module("fulltext.query").KeywordTerm
    words = [term("session", "prefix"), term("search", "prefix")]
    calls = '[{"function": {"name": "session_search", "arguments": "{\\"query\\": \\"deploy\\"}"}}]'
    assert rank.only_in_text(words, "", calls) == 0.0
    assert rank.only_in_text(words, "Let me look for it.", calls) == 0.0
    assert rank.only_in_text(words, "I will search our history.", calls) == 0.5
    assert rank.only_in_text(words, "search every session", calls) == 1.0
    assert rank.only_in_text(words, "search every session", "") == 1.0
    assert rank.only_in_text([term("归属", "pair")], "项目归属", "") == 1.0


def test_relevance_is_half_at_the_floor_and_one_at_twice_it(search):
    needed, floor = 8.0, 0.28
    assert search.relevance(8.0, needed, None, floor) == 0.5
    assert search.relevance(16.0, needed, None, floor) == 1.0
    assert search.relevance(40.0, needed, None, floor) == 1.0
    assert search.relevance(2.0, needed, None, floor) == 0.12
    assert search.relevance(None, needed, 0.28, floor) == 0.5
    assert search.relevance(None, needed, -0.1, floor) == 0.0
    # The stronger side counts.
    assert search.relevance(2.0, needed, 0.42, floor) == 0.75
    assert search.relevance(None, needed, None, floor) is None
    assert search.relevance(None, needed, 0.3, 0) is None  # floor off: the lift means nothing


def test_each_conversations_evidence_is_its_strongest(search):
    keyword = [
        {"conversation": "A", "session_id": "A", "evidence": 9.0},
        {"conversation": "A", "session_id": "A", "evidence": 9.0},
        {"conversation": "B", "session_id": "B", "evidence": None},
    ]
    semantic = [
        {"session_id": "A", "lift": 0.1},
        {"session_id": "A", "lift": 0.3},
        {"session_id": "C", "lift": None, "approximate_lift": 0.2},
    ]
    words, meaning = search.evidence_by_conversation(keyword, semantic)
    assert words == {"A": 9.0, "B": None}
    assert meaning == {"A": 0.3, "C": 0.2}


def test_semantic_hits_clear_the_floor_or_cannot_be_judged(search):
    assert search.clears_floor({"lift": 0.3}, 0.28)
    assert not search.clears_floor({"lift": 0.2}, 0.28)
    assert search.clears_floor({"lift": None, "approximate_lift": 0.01}, 0.28)
    assert search.clears_floor({"lift": 0.01}, 0)
