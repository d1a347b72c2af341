"""fulltext/query.py: the query as FTS5 takes it, English stems searched as prefixes, dates."""

from __future__ import annotations

from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st


@pytest.fixture
def q(phr):
    return phr.module("fulltext.query")


# --------------------------------------------------------------------------- plan_query


def test_every_token_becomes_one_quoted_phrase(q):
    plan = q.plan_query('email@x.com path/to/file.py 100% "a phrase"')
    assert [t.text for t in plan.terms] == ["email@x.com", "path/to/file.py", "100%", "a phrase"]
    assert plan.match_all() == '"email@x.com" "path/to/file.py" "100%" "a phrase"'
    assert not plan.has_operators


def test_operators_stand_between_terms_only(q):
    plan = q.plan_query("AND cache OR OR redis NOT")
    assert plan.items == (q.Term("cache"), "OR", q.Term("redis"))
    assert plan.has_operators and plan.match_all() == '"cache" OR "redis"'
    assert q.plan_query("AND OR NOT").items == ()


def test_a_trailing_star_is_a_prefix_and_quotes_inside_a_word_are_doubled(q):
    (term,) = q.plan_query("deploy*").terms
    assert term.prefix and term.fts == '"deploy"*'
    assert q.Term('say "hi"').fts == '"say ""hi"""'


def test_an_unpaired_quote_is_a_space_and_punctuation_alone_is_dropped(q):
    assert [t.text for t in q.plan_query('"unbalanced phrase').terms] == ["unbalanced", "phrase"]
    assert q.plan_query("?? -- ...").terms == ()


def test_control_characters_and_length_are_bounded(q):
    plan = q.plan_query("launch\x00codes")
    assert [t.text for t in plan.terms] == ["launch", "codes"]
    assert len(q.clean_query("x" * 5000)) == q.MAX_QUERY_CHARS
    many = " ".join(f"w{i}" for i in range(100))
    assert len(q.plan_query(many).terms) == q.MAX_TERMS


def test_topical_terms_drop_stopwords_unless_nothing_is_left(q):
    assert [t.text for t in q.plan_query("what did we decide about the cache").topical()] == [
        "decide",
        "cache",
    ]
    assert [t.text for t in q.plan_query("who is it").topical()] == ["who", "is", "it"]
    assert q.plan_query("the cache").match_any() == '"cache"'


def test_cjk_terms_are_known(q):
    assert q.plan_query("项目归属 design").has_cjk
    assert not q.plan_query("plain words").has_cjk


@given(st.text(max_size=80))
def test_any_text_plans_to_quoted_phrases_and_operators(phr, text):
    """Whatever is typed, MATCH gets only quoted phrases joined by AND/OR/NOT: nothing else reaches
    FTS5 (Hermes's own sanitiser lets ``@ / # , ; ! ?`` through as syntax errors)."""
    plan = phr.module("fulltext.query").plan_query(text)
    for item in plan.items:
        assert item in ("AND", "OR", "NOT") or item.fts.startswith('"')
    assert all(isinstance(i, str) for i in plan.items[1::2]) or not plan.has_operators
    assert len(plan.terms) <= 32


# --------------------------------------------------------------------------- stemming


@pytest.mark.parametrize(
    ("word", "stem"),
    [
        ("painted", "paint"),
        ("painting", "paint"),
        ("paints", "paint"),
        ("running", "run"),
        ("classes", "class"),
        ("studies", "stud"),
        ("studied", "stud"),
        ("status", "status"),  # -us stays
        ("analysis", "analysis"),  # -is stays
        ("falling", "fall"),  # double l stays
        ("cat", "cat"),  # three letters or fewer: as it is
        ("naïve", "naïve"),  # not plain ASCII letters
        ("sing", "sing"),  # "s" is no stem with a vowel
    ],
)
def test_light_stem(q, word, stem):
    assert q.light_stem(word) == stem


def test_stem_prefix_is_for_plain_english_words_only(q):
    assert q.stem_prefix(q.Term("Painted")) == "paint"
    assert q.stem_prefix(q.Term("user_service")) is None  # an identifier stays exact
    assert q.stem_prefix(q.Term("painted fences")) is None  # a user phrase stays exact
    assert q.stem_prefix(q.Term("paint", prefix=True)) is None  # the user's own prefix
    assert q.stem_prefix(q.Term("v2")) is None
    assert q.QueryPlan.word_match(q.Term("painted")) == '"paint"*'
    assert q.QueryPlan.word_match(q.Term("UserService")) == '"userservice"*'


def test_bare_word_and_without_words(q):
    assert q.bare_word("Joanna's?") == "joanna"
    assert q.bare_word("Orion’s") == "orion"
    assert q.bare_word("(cache)") == "cache"
    assert q.without_words("What did Orion say?", frozenset({"orion"})) == "What did say?"
    assert q.without_words("keep all", frozenset()) == "keep all"


def test_match_words_leaves_out_common_words_and_repeats(q):
    plan = q.plan_query("orion flaky flakes")
    assert plan.match_words() == '"orion"* OR "flaky"* OR "flake"*'
    assert plan.match_words(frozenset({"orion"})) == '"flaky"* OR "flake"*'


# --------------------------------------------------------------------------- dates


def _day(year: int, month: int, day: int) -> tuple[float, float]:
    start = datetime(year, month, day).timestamp()
    return (start - 86400.0, start + 2 * 86400.0)


@pytest.mark.parametrize(
    "text",
    ["what happened on 9 November, 2022?", "November 9th 2022", "on 2022-11-09", "9th of Nov 2022"],
)
def test_a_named_day_is_that_day_give_or_take_one(q, text):
    assert q.date_windows(text) == [_day(2022, 11, 9)]


def test_a_month_is_the_month_and_a_date_needs_its_year(q):
    start, end = datetime(2023, 12, 1).timestamp(), datetime(2024, 1, 1).timestamp()
    assert q.date_windows("in December 2023") == [(start, end)]
    assert q.date_windows("may 3") == []
    february = (datetime(2024, 2, 1).timestamp(), datetime(2024, 3, 1).timestamp())
    assert q.date_windows("31 February 2024") == [february]  # no such day: its month
    assert q.date_windows("the 2024-02-30 release") == []
