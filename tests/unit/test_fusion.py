"""Hybrid fusion: RRF over each path's session order, represented by the session's best message."""

from __future__ import annotations

import pytest


@pytest.fixture
def search(phr):
    return phr.search


def rows(*pairs: tuple[str, int]) -> list[dict]:
    return [{"session_id": s, "message_id": m, "content": f"m{m}", "timestamp": 0} for s, m in pairs]


def test_a_session_found_by_both_paths_through_different_messages_adds_up(search):
    keyword = rows(("A", 1), ("B", 5), ("C", 7))
    semantic = rows(("C", 8), ("A", 2), ("D", 9))
    fused = search.fuse_rankings(keyword, semantic, k=5, keyword_weight=2.5, semantic_weight=1.0)
    # A: 2.5/6 + 1/7; C: 2.5/8 + 1/6; B: 2.5/7; D: 1/8.
    assert [r["session_id"] for r in fused] == ["A", "C", "B", "D"]
    assert [r["score_source"] for r in fused] == ["both", "both", "keyword", "semantic"]
    assert fused[0]["message_id"] == 1  # A's best message: its keyword hit ranks first
    assert abs(fused[0]["score"] - (2.5 / 6 + 1 / 7)) < 1e-12
    # Message-level fusion (the spec's) cannot join A's two messages: each counts alone.
    by_message = search.fuse_messages(keyword, semantic, k=5, keyword_weight=2.5, semantic_weight=1.0)
    assert {r["score_source"] for r in by_message} == {"keyword", "semantic"}


def test_zero_weight_leaves_one_path_in_charge(search):
    fused = search.fuse_rankings(rows(("A", 1)), rows(("B", 2), ("A", 3)), k=5, keyword_weight=0)
    assert [r["session_id"] for r in fused] == ["B", "A"]


def test_equal_scores_follow_the_keyword_order_not_the_sessions_age(search):
    keyword = rows(("NEW", 9))
    semantic = rows(("OLD", 1))
    fused = search.fuse_rankings(keyword, semantic, k=5, keyword_weight=1.0, semantic_weight=1.0)
    assert [r["session_id"] for r in fused] == ["NEW", "OLD"]  # both 1/6: keyword's rank decides


def scored(*triples: tuple[str, int, float]) -> list[dict]:
    return [
        {**row, "score": score}
        for row, (_, _, score) in zip(rows(*[t[:2] for t in triples]), triples, strict=True)
    ]


def test_a_clear_keyword_winner_stays_first(search):
    fused = rows(("B", 2), ("A", 1), ("C", 3))
    clear = scored(("A", 1, 12.0), ("B", 2, 9.0))
    assert [r["session_id"] for r in search.keep_clear_keyword_winner(fused, clear)] == ["A", "B", "C"]
    close = scored(("A", 1, 10.0), ("B", 2, 9.0))
    assert [r["session_id"] for r in search.keep_clear_keyword_winner(fused, close)] == ["B", "A", "C"]
    like_rows = rows(("A", 1), ("B", 2))  # LIKE rows carry no bm25: nothing to compare
    assert [r["session_id"] for r in search.keep_clear_keyword_winner(fused, like_rows)] == ["B", "A", "C"]


def test_a_keyword_winner_far_past_what_the_query_needs_stays_first(search):
    fused = rows(("B", 2), ("A", 1), ("C", 3))
    close = scored(("A", 1, 50.0), ("B", 2, 45.0))  # not 20 % ahead of the runner-up
    order = [r["session_id"] for r in search.keep_clear_keyword_winner(fused, close, needed=10.0)]
    assert order == ["A", "B", "C"]  # 5x the evidence needed: an exact error line, say
    order = [r["session_id"] for r in search.keep_clear_keyword_winner(fused, close, needed=12.0)]
    assert order == ["B", "A", "C"]
    assert [r["session_id"] for r in search.keep_clear_keyword_winner(fused, close)] == ["B", "A", "C"]


def test_the_only_conversation_holding_the_questions_identifier_stays_first(search):
    fused = rows(("B", 2), ("A", 1), ("C", 3))
    close = scored(("A", 1, 16.4), ("B", 2, 15.7))  # "which value did we pick": everywhere
    order = [r["session_id"] for r in search.keep_clear_keyword_winner(fused, close, needed=10.0, alone="A")]
    assert order == ["A", "B", "C"]  # A alone holds MEDIUM_VALUE_SIGNALS, and keyword ranks it first
    # Only keyword's first conversation is kept first: one that keyword ranks lower is left to RRF.
    order = [r["session_id"] for r in search.keep_clear_keyword_winner(fused, close, needed=10.0, alone="B")]
    assert order == ["B", "A", "C"]
    order = [
        r["session_id"]
        for r in search.keep_clear_keyword_winner(rows(("C", 3), ("B", 2), ("A", 1)), close, 10.0, "B")
    ]
    assert order == ["C", "B", "A"]


def test_relevance_floor_needs_one_strong_hit(search):
    weak_words = scored(("A", 1, search.KEYWORD_EVIDENCE - 1))
    strong_words = scored(("A", 1, search.KEYWORD_EVIDENCE))
    near = [{**rows(("B", 2))[0], "lift": 0.30}]
    far = [{**rows(("B", 2))[0], "lift": 0.10}]
    assert not search.has_evidence(weak_words, far, floor=0.22)
    assert search.has_evidence(strong_words, far, floor=0.22)
    assert search.has_evidence(weak_words, near, floor=0.22)
    assert search.has_evidence(weak_words, far, floor=0)  # 0: no floor
    assert search.has_evidence(rows(("A", 1)), far, floor=0.22)  # LIKE rows: not judged


def test_short_queries_need_less_keyword_evidence(search):
    """bm25 adds up over the query's words: one or two topical words cannot reach 10."""
    assert search.keyword_evidence(None) == search.KEYWORD_EVIDENCE
    assert search.keyword_evidence(1) == search.KEYWORD_EVIDENCE_PER_TERM
    assert search.keyword_evidence(0) == search.KEYWORD_EVIDENCE_PER_TERM
    assert search.keyword_evidence(2) == 2 * search.KEYWORD_EVIDENCE_PER_TERM
    assert search.keyword_evidence(7) == search.KEYWORD_EVIDENCE
    exact_name = scored(("A", 1, 4.6))  # "Who is Anthony?": one word, found in one session
    far = [{**rows(("B", 2))[0], "lift": 0.10}]
    assert search.has_evidence(exact_name, far, floor=0.22, terms=1)
    assert not search.has_evidence(exact_name, far, floor=0.22, terms=3)
    assert not search.has_evidence(exact_name, far, floor=0.22)  # terms unknown: the full 10


def test_relevance_floor_per_model(phr):
    config_schema = phr.config_schema
    settings = config_schema.EmbeddingSettings
    assert config_schema.relevance_floor(settings(model="all-MiniLM-L6-v2-int8")) == 0.28
    assert config_schema.relevance_floor(settings(model="multilingual-e5-small")) == 0.22
    assert config_schema.relevance_floor(settings(model="text-embedding-3-small")) == 0.22
    assert config_schema.relevance_floor(settings(model="e5", relevance_floor=0)) == 0


def test_recent_conversations_keep_whole_conversations_newest_first(phr):
    """common_words judges a large scope by its most recent conversations: the sessions of the
    last ``count`` conversations (in scope order, oldest first), a compressed one whole."""
    recent = phr.module("fulltext.rank").recent_conversations
    scope = {"s1": "c1", "s2": "c2", "s3": "c1", "s4": "c3", "s5": "c4", "s6": "c4"}
    assert recent(scope, 2) == {"s5": "c4", "s6": "c4", "s4": "c3"}
    assert recent(scope, 3) == {"s1": "c1", "s3": "c1", "s4": "c3", "s5": "c4", "s6": "c4"}
    assert recent(scope, 10) == scope
    assert recent({}, 5) == {}


def test_strength_averages_both_paths_each_capped(search):
    cap = search.STRENGTH_CAP
    assert search.strength(20.0, 10.0, 0.44, 0.22) == pytest.approx((2.0 + 2.0) / 2)
    assert search.strength(1000.0, 10.0, None, 0.22) == pytest.approx(cap / 2)  # one path, capped
    assert search.strength(None, 10.0, -0.3, 0.22) == 0.0  # below the background: nothing
    assert search.strength(None, 10.0, None, 0.22) == 0.0


def test_a_wide_margin_reorders_rrf_neighbours_not_the_tail(search):
    keyword = rows(("A", 1), ("B", 2), ("C", 3))
    semantic = rows(("B", 4), ("A", 5))
    fused = search.fuse_rankings(keyword, semantic, k=5, keyword_weight=1.5, semantic_weight=1.0)
    assert [r["session_id"] for r in fused][:2] == ["A", "B"]  # RRF: A 1.5/6 + 1/7 > B 1.5/7 + 1/6
    # B matches the question far better on both paths: the margin counts.
    words = {"A": 10.0, "B": 30.0, "C": 9.0}
    meaning = {"A": 0.22, "B": 0.66}
    strong = search.with_strength(fused, words, meaning, needed=10.0, floor=0.22)
    assert [r["session_id"] for r in strong] == ["B", "A", "C"]
    # A conversation only one path found weakly stays behind, however strong the others are.
    assert strong[-1]["session_id"] == "C"
    # Equal strengths: the RRF order stands.
    even = search.with_strength(fused, dict.fromkeys("ABC", 10.0), {}, needed=10.0, floor=0.22)
    assert [r["session_id"] for r in even] == [r["session_id"] for r in fused]


def test_a_quoted_error_keeps_the_keyword_order_and_semantic_adds_after_it(search):
    fused = rows(("N", 4), ("B", 2), ("A", 1), ("S", 9))  # N: semantic's neighbour, first by RRF
    keyword = rows(("A", 1), ("B", 2), ("A", 3), ("N", 4))
    order = [r["session_id"] for r in search.keyword_order_first(fused, keyword)]
    assert order == ["A", "B", "N", "S"]  # S: found by semantic alone, after keyword's
    assert search.keyword_order_first(fused, []) == fused
