"""fulltext/rank.py's pure parts: how a conversation's matching messages add up, and what a tool
call's columns may not decide."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st


@pytest.fixture
def rank(phr):
    return phr.module("fulltext.rank")


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
