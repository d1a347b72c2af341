"""fulltext/retrieval.py's pure parts: what a tool call's columns may not decide, and which
conversations are a large scope's recent ones."""

from __future__ import annotations

import pytest


@pytest.fixture
def retrieval(phr):
    return phr.module("fulltext.retrieval")


def test_a_match_only_in_tool_call_columns_is_no_match(retrieval, phr):
    term = phr.module("fulltext.query").KeywordTerm
    words = [term("session", "prefix"), term("search", "prefix")]
    calls = '[{"function": {"name": "session_search", "arguments": "{\\"query\\": \\"deploy\\"}"}}]'
    assert retrieval.only_in_text(words, "", calls) == 0.0
    assert retrieval.only_in_text(words, "Let me look for it.", calls) == 0.0
    assert retrieval.only_in_text(words, "I will search our history.", calls) == 0.5
    assert retrieval.only_in_text(words, "search every session", calls) == 1.0
    assert retrieval.only_in_text(words, "search every session", "") == 1.0
    assert retrieval.only_in_text([term("归属", "pair")], "项目归属", "") == 1.0


def test_recent_conversations_keep_whole_conversations_newest_first(retrieval):
    """common_words judges a large scope by its most recent conversations: the sessions of the
    last ``count`` conversations (in scope order, oldest first), a compressed one whole."""
    recent = retrieval.recent_conversations
    scope = {"s1": "c1", "s2": "c2", "s3": "c1", "s4": "c3", "s5": "c4", "s6": "c4"}
    assert recent(scope, 2) == {"s5": "c4", "s6": "c4", "s4": "c3"}
    assert recent(scope, 3) == {"s1": "c1", "s3": "c1", "s4": "c3", "s5": "c4", "s6": "c4"}
    assert recent(scope, 10) == scope
    assert recent({}, 5) == {}


@pytest.mark.parametrize(
    "title",
    ["数据库迁移报错", "Flaky payments tests", "conv-26 session 3", "Fix user_service.py", "", "部署-脚本"],
)
def test_a_title_holds_the_terms_a_table_would_match(retrieval, phr, title):
    # terms_in_title cuts a title into words once; it must agree with KeywordTerm.occurs_in.
    query = phr.module("fulltext.query")
    questions = [
        "上次那个数据库迁移的报错是怎么解决的",
        "what did we do about the flaky payments tests",
        "what happened in session 3",
        "the user_service.py import error",
        "部署脚本",
    ]
    for question in questions:
        terms = query.keyword_terms(query.plan_query(question)).terms
        expected = {i for i, t in enumerate(terms) if t.occurs_in(title)}
        assert retrieval.terms_in_title(terms, title) == expected, (question, title)
