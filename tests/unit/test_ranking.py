"""The ranking (``ranking/``), pure: how a conversation's messages add up, hybrid fusion (RRF over
each path's conversation order, then strength), keyword's clear winner, the relevance floor and
the figure each result shows, all under a policy passed in; and the keyword retrieval's pure parts."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st


@pytest.fixture
def r(phr):
    return phr.module("ranking.rank")


@pytest.fixture
def ranking(phr):
    return phr.ranking


@pytest.fixture
def policy(ranking):
    return ranking.DEFAULT_POLICY


def message(ranking, conversation: str, message_id: int):
    return ranking.Message(message_id, conversation, conversation, 0.0, f"m{message_id}")


def kw(ranking, *triples):
    """Keyword ``Scored`` rows: (conversation, message id, evidence)."""
    return [
        ranking.Scored(message(ranking, c, m), "keyword", evidence=e, own_evidence=e) for c, m, e in triples
    ]


def sem(ranking, *pairs, lift=None):
    return [ranking.Scored(message(ranking, c, m), "semantic", lift=lift, chunk=0) for c, m in pairs]


def ids(rows):
    return [row.conversation for row in rows]


# --------------------------------------------------------------------------- keyword scores


def test_a_conversations_score_is_its_best_plus_the_log_of_the_rest(r, policy):
    assert r.conversation_score([], policy) == 0.0
    assert r.conversation_score([5.0], policy) == 5.0
    assert r.conversation_score([2.0, 5.0, 1.0], policy) == pytest.approx(5.0 + math.log(4.0))
    # Many weak mentions cannot outweigh one strong match by much: ln grows slowly.
    assert r.conversation_score([1.0] * 100, policy) < r.conversation_score([7.0], policy)
    assert r.conversation_score([2.0, 5.0, 1.0], replace(policy, add_the_rest=False)) == 5.0


@given(st.lists(st.floats(min_value=0, max_value=50), min_size=1, max_size=30), st.floats(0, 50))
def test_more_evidence_never_lowers_a_conversation(phr, scores, extra):
    r, policy = phr.module("ranking.rank"), phr.ranking.DEFAULT_POLICY
    base = r.conversation_score(scores, policy)
    assert base >= max(scores)
    assert r.conversation_score([*scores, extra], policy) >= base - 1e-9


def hit(ranking, conversation, message_id, *parts, tier=0):
    return ranking.KeywordHit(message(ranking, conversation, message_id), tuple(parts), tier)


def test_hits_are_ranked_by_conversation_then_by_their_own_score(ranking, r, policy):
    hits = [
        hit(ranking, "once", 1, ("bm25", 6.0)),
        hit(ranking, "often", 2, ("bm25", 5.0)),
        hit(ranking, "often", 3, ("bm25", 2.0)),
        hit(ranking, "like", 4, ("like", 1.0)),  # a LIKE match: no bm25
        hit(ranking, "often", 5, ("bm25", 3.0)),
    ]
    ranked = r.rank_by_conversation(hits, policy)
    assert [(h.conversation, h.message.message_id) for h in ranked] == [
        ("often", 2),
        ("often", 5),
        ("often", 3),
        ("once", 1),
        ("like", 4),
    ]
    assert ranked[0].score == pytest.approx(5.0 + math.log(6.0))
    assert ranked[0].evidence == ranked[0].score
    assert ranked[-1].evidence is None  # nothing to weigh: LIKE only
    # Equal conversations: the one whose best message is older first.
    tie = r.rank_by_conversation(
        [hit(ranking, "b", 9, ("bm25", 1.0)), hit(ranking, "a", 4, ("bm25", 1.0))], policy
    )
    assert ids(tie) == ["a", "b"]


def test_each_part_is_weighed_by_the_policy(ranking, r, policy):
    both = hit(ranking, "a", 1, ("bm25", 3.0), ("code", 2.0), ("pairs", 1.0))
    assert r.message_score(both, policy) == 3.0 + 2.0 * policy.literal_weight + policy.pair_boost
    assert r.message_score(both, replace(policy, literal_weight=1.0, pair_boost=0.0)) == 5.0
    # Evidence is bm25 alone: a CJK pair or a LIKE count is no bm25.
    assert (
        r.keyword_order(ranking.KeywordSignals((both,)), policy)[0].evidence
        == 3.0 + 2.0 * policy.literal_weight
    )


def test_tool_activity_weighs_its_policy_share_of_a_word_match(ranking, r, policy):
    """A turn's tool calls and output count for its opening message at ``activity_weight`` of a
    word match, as evidence too; at 0 they count for nothing, and a message with words beats
    one whose turn only saw the same bm25 in a tool row."""
    seen = hit(ranking, "a", 1, ("activity", 4.0))
    said = hit(ranking, "b", 2, ("bm25", 4.0))
    assert r.message_score(seen, policy) == 4.0 * policy.activity_weight
    assert 0 < policy.activity_weight < 1
    order = r.keyword_order(ranking.KeywordSignals((seen, said)), policy)
    assert ids(order) == ["b", "a"]
    assert order[1].evidence == 4.0 * policy.activity_weight
    off = replace(policy, activity_weight=0.0)
    assert r.message_score(seen, off) == 0.0
    both = hit(ranking, "c", 3, ("bm25", 1.0), ("activity", 4.0))
    assert r.message_score(both, policy) == 1.0 + 4.0 * policy.activity_weight


def test_a_fallback_tier_comes_after_the_questions_own_terms(ranking, r, policy):
    hits = (hit(ranking, "late", 1, ("bm25", 50.0), tier=1), hit(ranking, "own", 2, ("bm25", 1.0)))
    assert ids(r.keyword_order(ranking.KeywordSignals(hits), policy)) == ["own", "late"]


def test_the_users_own_operators_keep_fts_order(ranking, r, policy):
    hits = (hit(ranking, "b", 2, ("bm25", 1.0)), hit(ranking, "a", 1, ("bm25", 9.0)), hit(ranking, "c", 3))
    ordered = r.keyword_order(ranking.KeywordSignals(hits, "boolean"), policy)
    assert ids(ordered) == ["b", "a", "c"] and [h.evidence for h in ordered] == [1.0, 9.0, None]


# --------------------------------------------------------------------------- fusion


def test_a_conversation_found_by_both_paths_through_different_messages_adds_up(ranking, r, policy):
    p = replace(policy, rrf_k=5, keyword_weight=2.5, semantic_weight=1.0, strength_weight=0.0)
    keyword = kw(ranking, ("A", 1, None), ("B", 5, None), ("C", 7, None))
    semantic = sem(ranking, ("C", 8), ("A", 2), ("D", 9))
    fused = r.fuse(keyword, semantic, p, needed=10.0)
    # A: 2.5/6 + 1/7; C: 2.5/8 + 1/6; B: 2.5/7; D: 1/8.
    assert ids(fused) == ["A", "C", "B", "D"]
    assert [h.source for h in fused] == ["both", "both", "keyword", "semantic"]
    assert fused[0].message.message_id == 1  # A's best message: its keyword hit ranks first
    assert fused[0].score == pytest.approx(2.5 / 6 + 1 / 7)


def test_zero_weight_leaves_one_path_in_charge(ranking, r, policy):
    p = replace(policy, keyword_weight=0.0, strength_weight=0.0)
    fused = r.fuse(kw(ranking, ("A", 1, None)), sem(ranking, ("B", 2), ("A", 3)), p, needed=10.0)
    assert ids(fused) == ["B", "A"]


def test_equal_scores_follow_the_keyword_order_not_the_sessions_age(ranking, r, policy):
    p = replace(policy, keyword_weight=1.0, semantic_weight=1.0)
    fused = r.fuse(kw(ranking, ("NEW", 9, None)), sem(ranking, ("OLD", 1)), p, needed=10.0)
    assert ids(fused) == ["NEW", "OLD"]  # both 1/6: keyword's rank decides


def test_a_wide_margin_reorders_rrf_neighbours_not_the_tail(ranking, r, policy):
    p = replace(policy, rrf_k=5, keyword_weight=1.5, semantic_weight=1.0, semantic_floor=0.22)
    keyword = kw(ranking, ("A", 1, 10.0), ("B", 2, 30.0), ("C", 3, 9.0))
    semantic = [
        ranking.Scored(message(ranking, "B", 4), "semantic", lift=0.66),
        ranking.Scored(message(ranking, "A", 5), "semantic", lift=0.22),
    ]
    # RRF alone: A 1.5/6 + 1/7 > B 1.5/7 + 1/6.
    assert ids(r.fuse(keyword, semantic, replace(p, strength_weight=0.0), needed=10.0))[:2] == ["A", "B"]
    # B matches the question far better on both paths: the margin counts.
    strong = r.fuse(keyword, semantic, p, needed=10.0)
    assert ids(strong) == ["B", "A", "C"]
    even = kw(ranking, ("A", 1, 10.0), ("B", 2, 10.0), ("C", 3, 10.0))
    assert ids(r.fuse(even, [], p, needed=10.0)) == ["A", "B", "C"]  # equal strengths: RRF stands


def test_strength_averages_both_paths_each_capped(r, policy):
    p = replace(policy, semantic_floor=0.22)
    assert r.strength(20.0, 10.0, 0.44, p) == pytest.approx((2.0 + 2.0) / 2)
    assert r.strength(1000.0, 10.0, None, p) == pytest.approx(p.strength_cap / 2)  # one path, capped
    assert r.strength(None, 10.0, -0.3, p) == 0.0  # below the background: nothing
    assert r.strength(None, 10.0, None, p) == 0.0


def test_a_clear_keyword_winner_stays_first(ranking, r, policy):
    fused = kw(ranking, ("B", 2, None), ("A", 1, None), ("C", 3, None))
    clear = kw(ranking, ("A", 1, 12.0), ("B", 2, 9.0))
    assert ids(r.keep_clear_keyword_winner(fused, clear, policy)) == ["A", "B", "C"]
    close = kw(ranking, ("A", 1, 10.0), ("B", 2, 9.0))
    assert ids(r.keep_clear_keyword_winner(fused, close, policy)) == ["B", "A", "C"]
    like_rows = kw(ranking, ("A", 1, None), ("B", 2, None))  # LIKE rows carry no bm25
    assert ids(r.keep_clear_keyword_winner(fused, like_rows, policy)) == ["B", "A", "C"]
    assert ids(r.keep_clear_keyword_winner(fused, close, replace(policy, clear_winner_ratio=1.1))) == [
        "A",
        "B",
        "C",
    ]


def test_a_keyword_winner_far_past_what_the_query_needs_stays_first(ranking, r, policy):
    fused = kw(ranking, ("B", 2, None), ("A", 1, None), ("C", 3, None))
    close = kw(ranking, ("A", 1, 50.0), ("B", 2, 45.0))  # not 20 % ahead of the runner-up
    assert ids(r.keep_clear_keyword_winner(fused, close, policy, needed=10.0)) == ["A", "B", "C"]
    assert ids(r.keep_clear_keyword_winner(fused, close, policy, needed=12.0)) == ["B", "A", "C"]
    assert ids(r.keep_clear_keyword_winner(fused, close, policy)) == ["B", "A", "C"]


def test_the_only_conversation_holding_the_questions_identifier_stays_first(ranking, r, policy):
    fused = kw(ranking, ("B", 2, None), ("A", 1, None), ("C", 3, None))
    close = kw(ranking, ("A", 1, 16.4), ("B", 2, 15.7))  # "which value did we pick": everywhere
    assert ids(r.keep_clear_keyword_winner(fused, close, policy, 10.0, alone="A")) == ["A", "B", "C"]
    # Only keyword's first conversation is kept first: one that keyword ranks lower is left to RRF.
    assert ids(r.keep_clear_keyword_winner(fused, close, policy, 10.0, alone="B")) == ["B", "A", "C"]
    reordered = kw(ranking, ("C", 3, None), ("B", 2, None), ("A", 1, None))
    assert ids(r.keep_clear_keyword_winner(reordered, close, policy, 10.0, "B")) == ["C", "B", "A"]


def test_a_quoted_error_keeps_the_keyword_order_and_semantic_adds_after_it(ranking, r):
    fused = kw(ranking, ("N", 4, None), ("B", 2, None), ("A", 1, None), ("S", 9, None))
    keyword = kw(ranking, ("A", 1, None), ("B", 2, None), ("A", 3, None), ("N", 4, None))
    assert ids(r.keyword_order_first(fused, keyword)) == ["A", "B", "N", "S"]  # S: semantic alone
    assert r.keyword_order_first(fused, []) == fused


# --------------------------------------------------------------------------- the floor and relevance


def question(ranking, terms=3, **features):
    return ranking.Question("hybrid", terms, **features)


def test_relevance_floor_needs_one_strong_hit(ranking, r, policy):
    p = replace(policy, semantic_floor=0.22)
    weak_words = kw(ranking, ("A", 1, p.keyword_evidence - 1))
    strong_words = kw(ranking, ("A", 1, p.keyword_evidence))
    near, far = sem(ranking, ("B", 2), lift=0.30), sem(ranking, ("B", 2), lift=0.10)
    q = question(ranking, terms=7)
    assert not r.has_evidence(q, weak_words, far, p)
    assert r.has_evidence(q, strong_words, far, p)
    assert r.has_evidence(q, weak_words, near, p)
    assert r.has_evidence(q, weak_words, far, replace(p, semantic_floor=0.0))  # 0: no floor
    assert r.has_evidence(q, kw(ranking, ("A", 1, None)), far, p)  # LIKE rows: not judged


def test_short_queries_need_less_keyword_evidence(ranking, r, policy):
    """bm25 adds up over the query's words: one or two topical words cannot reach 10."""
    assert policy.evidence_needed(None) == policy.keyword_evidence
    assert policy.evidence_needed(1) == policy.keyword_evidence_per_term
    assert policy.evidence_needed(0) == policy.keyword_evidence_per_term
    assert policy.evidence_needed(2) == 2 * policy.keyword_evidence_per_term
    assert policy.evidence_needed(7) == policy.keyword_evidence
    exact_name = kw(ranking, ("A", 1, 4.6))  # "Who is Anthony?": one word, found in one session
    far = sem(ranking, ("B", 2), lift=0.10)
    assert r.has_evidence(question(ranking, terms=1), exact_name, far, policy)
    assert not r.has_evidence(question(ranking, terms=3), exact_name, far, policy)


def test_the_floor_per_model_family_not_a_substring_of_the_name(ranking, phr):
    settings = phr.config_schema.EmbeddingSettings
    policy = ranking.DEFAULT_POLICY
    assert policy.with_settings(settings(model="all-MiniLM-L6-v2-int8")).semantic_floor == 0.28
    assert (
        policy.with_settings(settings(model="sentence-transformers/all-MiniLM-L6-v2")).semantic_floor == 0.28
    )
    assert policy.with_settings(settings(model="multilingual-e5-small")).semantic_floor == 0.22
    assert policy.with_settings(settings(model="text-embedding-3-small")).semantic_floor == 0.22
    assert policy.with_settings(settings(model="not-minilm-at-all")).semantic_floor == 0.22  # unknown
    assert policy.with_settings(settings(model="e5-small", relevance_floor=0)).semantic_floor == 0
    custom = policy.with_settings(settings(model="e5-small", rrf_k=9, keyword_weight=2.0))
    assert (custom.rrf_k, custom.keyword_weight) == (9, 2.0)


def test_strength_is_the_stronger_side_over_what_counts(r, policy):
    p = replace(policy, semantic_floor=0.28)
    assert r.match_strength(8.0, 8.0, None, p) == 1.0
    assert r.match_strength(2.0, 8.0, 0.56, p) == 2.0  # the stronger side counts
    assert r.match_strength(None, 8.0, None, p) is None
    assert r.match_strength(None, 8.0, 0.3, replace(p, semantic_floor=0.0)) is None  # no floor: no meaning


def test_relevance_is_a_chance_that_grows_with_strength_and_lead(r, policy):
    """The calibrated relevance: a first result far ahead of the second is likely right, one of
    several alike is not; a later result is likely right only when as strong as the first."""
    alone = r.relevance(0, [3.0, 0.5], policy)
    assert alone > r.relevance(0, [3.0, 3.0], policy) and alone > r.relevance(0, [0.5, 0.1], policy)
    assert alone > 0.5 > r.relevance(0, [1.0, 1.0], policy)
    assert r.relevance(1, [3.0, 3.0], policy) > r.relevance(1, [3.0, 1.0], policy)
    assert r.relevance(1, [3.0, 0.5], policy) < 0.1
    assert r.relevance(0, [2.0], policy) == r.relevance(0, [2.0, None], policy)  # alone in its list
    assert r.relevance(1, [2.0, None], policy) is None
    values = [r.relevance(i, s, policy) for s in ([0.0, 0.0], [50.0, 0.0], [0.2, 9.0]) for i in (0, 1)]
    assert all(0.0 <= v <= 1.0 for v in values if v is not None)


def test_keyword_mode_has_a_relevance_model_of_its_own(r, policy):
    """Keyword mode shows word matches without a floor, so the same strength is less likely right
    there: its coefficients are its own, and switching them to hybrid's gives hybrid's figure."""
    for strengths in ([3.0, 0.5], [1.0, 1.0], [8.0, 2.0]):
        assert r.relevance(0, strengths, policy, "keyword") != r.relevance(0, strengths, policy, "hybrid")
    assert r.relevance(0, [1.0, 1.0], policy, "keyword") < r.relevance(0, [1.0, 1.0], policy, "hybrid")
    assert r.relevance(1, [3.0, 3.0], policy) == r.relevance(1, [3.0, 3.0], policy, "semantic")
    same = replace(policy, **{f"keyword_{name}": getattr(policy, name) for name in RELEVANCE_FIELDS})
    assert r.relevance(0, [3.0, 0.5], same, "keyword") == r.relevance(0, [3.0, 0.5], policy, "hybrid")


RELEVANCE_FIELDS = (
    "relevance_intercept",
    "relevance_per_log_strength",
    "relevance_first",
    "relevance_per_log_lead",
    "relevance_per_log_share_of_first",
)


def test_the_first_results_relevance_does_not_depend_on_limit(ranking, policy):
    hits = tuple(
        ranking.KeywordHit(message(ranking, c, i), (("bm25", score),))
        for i, (c, score) in enumerate((("a", 40.0), ("b", 12.0), ("c", 11.0)), start=1)
    )
    signals = ranking.Signals(keyword=ranking.KeywordSignals(hits))
    q = ranking.Question("keyword", 3)
    one = ranking.rank(q, signals, policy, 1).results
    three = ranking.rank(q, signals, policy, 3).results
    assert one == three[:1]


def test_each_conversations_evidence_is_its_strongest(ranking, r):
    keyword = kw(ranking, ("A", 1, 9.0), ("A", 2, 9.0), ("B", 3, None))
    semantic = [
        ranking.Scored(message(ranking, "A", 4), "semantic", lift=0.1),
        ranking.Scored(message(ranking, "A", 5), "semantic", lift=0.3),
        ranking.Scored(message(ranking, "C", 6), "semantic", lift=None, approximate_lift=0.2),
    ]
    words, meaning = r.evidence_by_conversation(keyword, semantic)
    assert words == {"A": 9.0, "B": None}
    assert meaning == {"A": 0.3, "C": 0.2}


def test_lift_needs_a_background_of_enough_chunks(ranking, r, policy):
    hit = ranking.SemanticHit(message(ranking, "A", 1), cosine=0.6, chunk=0, mean=0.2, background=99)
    small = r.with_lift(hit, replace(policy, min_background_chunks=100))
    assert small.lift is None and small.approximate_lift == pytest.approx(0.5)
    assert r.with_lift(hit, replace(policy, min_background_chunks=99)).lift == pytest.approx(0.5)
    assert r.clears_floor(small, 0.28)  # no background: cannot be judged, kept
    assert not r.clears_floor(small._replace(lift=0.2), 0.28)
    assert r.clears_floor(small._replace(lift=0.01), 0)


# --------------------------------------------------------------------------- the whole ranking


def test_the_first_results_do_not_depend_on_the_limit(ranking, policy):
    hits = tuple(hit(ranking, f"c{n}", n, ("bm25", float(20 - n))) for n in range(10))
    signals = ranking.Signals(ranking.KeywordSignals(hits))
    q = ranking.Question("keyword", 3)
    ten = ranking.rank(q, signals, policy, 10).results
    three = ranking.rank(q, signals, policy, 3).results
    assert three == ten[:3] and [x.message.conversation for x in three] == ["c0", "c1", "c2"]


def test_dated_sessions_come_first_then_one_result_per_conversation(ranking, policy):
    hits = (
        hit(ranking, "a", 1, ("bm25", 9.0)),
        hit(ranking, "a", 2, ("bm25", 8.0)),
        hit(ranking, "b", 3, ("bm25", 1.0)),
    )
    ranked = ranking.rank(
        ranking.Question("keyword", 3),
        ranking.Signals(ranking.KeywordSignals(hits)),
        policy,
        3,
        frozenset({"b"}),
    )
    assert [(x.message.conversation, x.message.message_id) for x in ranked.results] == [("b", 3), ("a", 1)]


def test_hybrid_below_the_floor_says_so_or_asks_for_the_question_as_asked(ranking, policy):
    p = replace(policy, semantic_floor=0.28, min_background_chunks=1)
    weak = ranking.KeywordSignals((hit(ranking, "a", 1, ("bm25", 1.0)),))
    far = (ranking.SemanticHit(message(ranking, "b", 2), cosine=0.3, chunk=0, mean=0.25, background=500),)
    signals = ranking.Signals(weak, far)
    assert ranking.rank(ranking.Question("hybrid", 3), signals, p, 3).floor == "unmet"
    common = ranking.Question("hybrid", 3, has_common_words=True)
    assert ranking.rank(common, signals, p, 3).floor == "as_asked"
    assert ranking.rank(common, signals, replace(p, floor_as_asked=False), 3).floor == "unmet"
    assert ranking.rank(ranking.Question("hybrid", 3, has_cjk=True), signals, p, 3).floor == "met"


def test_semantic_mode_shows_nothing_below_the_floor(ranking, policy):
    p = replace(policy, semantic_floor=0.28, min_background_chunks=1)
    far = (ranking.SemanticHit(message(ranking, "b", 2), cosine=0.3, chunk=0, mean=0.25, background=500),)
    ranked = ranking.rank(ranking.Question("semantic", 3), ranking.Signals(semantic=far), p, 3)
    assert ranked.results == () and ranked.floor == "unmet"
    near = (ranking.SemanticHit(message(ranking, "b", 2), cosine=0.9, chunk=1, mean=0.25, background=500),)
    (shown,) = ranking.rank(ranking.Question("semantic", 3), ranking.Signals(semantic=near), p, 3).results
    assert shown.source == "semantic" and shown.chunk == 1 and shown.relevance == 1.0


def test_the_floor_judges_the_questions_own_terms_not_the_passes_that_fill_the_list(ranking, policy):
    """Retrieval runs fill passes (Latin words as trigram substrings, common words alone) until it
    has gathered enough conversations; a strong substring match there says little about whether
    the question belongs to this project."""
    p = replace(policy, semantic_floor=0.28, min_background_chunks=1)
    far = (ranking.SemanticHit(message(ranking, "b", 2), cosine=0.3, chunk=0, mean=0.25, background=500),)
    filled = hit(ranking, "a", 1, ("bm25", 1.0), ("glued", 30.0))
    later = hit(ranking, "c", 3, ("bm25", 30.0), tier=1)
    signals = ranking.Signals(ranking.KeywordSignals((filled, later)), far)
    q = ranking.Question("hybrid", 3)
    assert ranking.rank(q, signals, p, 3).floor == "unmet"
    assert ranking.rank(q, signals, replace(p, floor_own_terms_only=False), 3).floor == "met"
    # The fill passes still rank: a's substring match counts in its score and its relevance.
    (first, *_) = ranking.rank(q, signals, replace(p, floor_own_terms_only=False), 3).results
    assert first.message.conversation == "a" and first.relevance > 0.5  # by its 31, not its own 1


# --------------------------------------------------------------------------- recall chats


def test_a_recall_chat_ranks_after_the_conversations_it_cites(ranking, r, policy):
    rows = kw(ranking, ("chat", 1, 30.0), ("other", 2, 20.0), ("decision", 3, 12.0), ("chat", 4, 5.0))
    cites = {"chat": frozenset({"decision", "elsewhere"})}  # "elsewhere": cited, not ranked
    moved = r.recall_after_cited(rows, cites)
    assert ids(moved) == ["other", "decision", "chat", "chat"]
    assert [row.message.message_id for row in moved if row.conversation == "chat"] == [1, 4]
    # Only the chat moves: citing nothing ranked, or ranked after what it cites already, it stays.
    assert r.recall_after_cited(rows, {"chat": frozenset({"elsewhere"})}) == rows
    assert r.recall_after_cited(rows, {"decision": frozenset({"other"})}) == rows
    # Chats citing each other keep their order; a chain follows what it cites.
    loop = {"chat": frozenset({"other"}), "other": frozenset({"chat"})}
    assert ids(r.recall_after_cited(rows, loop)) == ["decision", "chat", "chat", "other"]
    chain = {"chat": frozenset({"other"}), "other": frozenset({"decision"})}
    assert ids(r.recall_after_cited(rows, chain)) == ["decision", "other", "chat", "chat"]


def test_rank_puts_a_recall_chat_after_what_it_cites_under_the_policys_switch(ranking, policy):
    hits = (
        hit(ranking, "chat", 1, ("bm25", 30.0)),
        hit(ranking, "decision", 2, ("bm25", 12.0)),
        hit(ranking, "other", 3, ("bm25", 11.0)),
    )
    signals = ranking.Signals(ranking.KeywordSignals(hits), cites={"chat": frozenset({"decision"})})
    for mode in ("keyword", "hybrid"):
        question = ranking.Question(mode, topical_terms=3)
        ranked = ranking.rank(question, signals, policy, 10)
        # What the chat cites is shown, so it goes after every other conversation too.
        assert [x.message.conversation for x in ranked.results] == ["decision", "other", "chat"]
        kept = ranking.rank(question, signals, replace(policy, recall_shown_last=False), 10)
        assert [x.message.conversation for x in kept.results] == ["decision", "chat", "other"]
        off = replace(policy, recall_after_cited=False, recall_shown_last=False)
        assert [x.message.conversation for x in ranking.rank(question, signals, off, 10).results] == [
            "chat",
            "decision",
            "other",
        ]


def test_a_recall_chat_whose_citations_are_all_shown_goes_last(ranking, r):
    rows = kw(ranking, ("decision", 1, 30.0), ("chat", 2, 20.0), ("other", 3, 12.0), ("chat", 4, 5.0))
    assert ids(r.recall_shown_last(rows, {"chat": frozenset({"decision"})})) == [
        "decision",
        "other",
        "chat",
        "chat",
    ]
    # Citing something not ranked, the chat still points at an answer: it keeps its place.
    assert r.recall_shown_last(rows, {"chat": frozenset({"decision", "elsewhere"})}) == rows
    assert r.recall_shown_last(rows, {"chat": frozenset()}) == rows


def test_a_question_naming_only_what_the_project_never_mentions_gets_nothing(ranking, r, policy):
    """Semantic and hybrid answer nothing (the floor is unmet, not "as asked"); keyword mode still
    lists its matches; CJK questions and the policy switch keep the old behaviour."""
    signals = ranking.Signals(
        keyword=ranking.KeywordSignals((ranking.KeywordHit(message(ranking, "a", 1), (("bm25", 50.0),)),)),
        semantic=(ranking.SemanticHit(message(ranking, "a", 1), 0.9, 0, mean=0.1, background=500),),
    )

    def floor(mode, p=policy, **features):
        q = ranking.Question(mode, 3, names_absent=True, has_common_words=True, **features)
        return ranking.rank(q, signals, p, 10)

    assert floor("hybrid").floor == "unmet" and floor("semantic").floor == "unmet"
    assert floor("keyword").floor == "met" and len(floor("keyword").results) == 1
    assert floor("hybrid", has_cjk=True).floor == "met"
    off = replace(policy, absent_names_answer_nothing=False)
    assert floor("hybrid", off).floor == "met" and floor("semantic", off).floor == "met"


# --------------------------------------------------------------------------- titles


def test_a_title_adds_its_share_of_the_title_evidence_and_ranks_a_title_only_conversation(r, ranking, policy):
    hits = (
        ranking.KeywordHit(message(ranking, "a", 1), (("bm25", 6.0),)),
        ranking.KeywordHit(message(ranking, "b", 2), (("bm25", 4.0),)),
    )
    titles = (
        ranking.TitleHit("b", 0.5),  # half the question's terms: half of title_evidence
        ranking.TitleHit("c", 1.0, message(ranking, "c", 3)),  # nothing but its title matched
    )
    order = r.keyword_order(ranking.KeywordSignals(hits, titles=titles), policy)
    assert ids(order) == ["c", "b", "a"]
    by = {row.conversation: row for row in order}
    assert by["c"].evidence == by["c"].own_evidence == policy.title_evidence
    assert by["b"].evidence == pytest.approx(4.0 + 0.5 * policy.title_evidence)
    assert by["a"].evidence == 6.0
    # Without title evidence, the messages' bm25 alone, as before titles were read.
    plain = r.keyword_order(ranking.KeywordSignals(hits, titles=titles), replace(policy, title_evidence=0.0))
    assert [(row.conversation, row.evidence) for row in plain][:2] == [("a", 6.0), ("b", 4.0)]


def test_a_title_only_conversation_without_a_message_to_show_is_not_ranked(r, ranking, policy):
    signals = ranking.KeywordSignals((), titles=(ranking.TitleHit("c", 1.0),))
    assert r.keyword_order(signals, policy) == []
