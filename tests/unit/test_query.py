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


def test_punctuation_before_a_trailing_star_is_dropped(q):
    # Issue 31: `osprey:*` found nothing (the term "osprey:" is in no message's words).
    for query in ("osprey:*", "osprey.*", "osprey:**"):
        (term,) = q.plan_query(query).terms
        assert term.prefix and term.fts == '"osprey"*', query
    assert q.plan_query(":*").terms == ()


def test_an_unpaired_quote_is_a_space_and_punctuation_alone_is_dropped(q):
    assert [t.text for t in q.plan_query('"unbalanced phrase').terms] == ["unbalanced", "phrase"]
    assert q.plan_query("?? -- ...").terms == ()


def test_control_characters_and_length_are_bounded(q):
    plan = q.plan_query("launch\x00codes")
    assert [t.text for t in plan.terms] == ["launch", "codes"]
    assert len(q.clean_query("x" * 5000)) == q.MAX_QUERY_CHARS
    many = " ".join(f"w{i}" for i in range(100))
    assert len(q.plan_query(many).terms) == q.MAX_TERMS


def test_what_the_plan_cuts_it_counts(q):
    assert (q.plan_query("short question").chars_cut, q.plan_query("short question").terms_cut) == (0, 0)
    many = " ".join(f"w{i}" for i in range(100))  # 100 terms, 389 characters
    assert (q.plan_query(many).chars_cut, q.plan_query(many).terms_cut) == (0, 100 - q.MAX_TERMS)
    assert q.plan_query("x" * 5000).chars_cut == 5000 - q.MAX_QUERY_CHARS
    assert q.plan_query("AND OR x").terms_cut == 0  # operators are not terms


def test_a_long_cjk_run_is_ranked_by_its_first_grams(q):
    run = "".join(chr(0x9E00 + i) for i in range(200))  # 198 distinct 3-grams, no stop phrase
    query = q.keyword_terms(q.plan_query(run))
    assert len(query.terms) == q.MAX_KEYWORD_TERMS and query.cut == 198 - q.MAX_KEYWORD_TERMS
    assert query.terms[0].text == run[:3]
    assert q.keyword_terms(q.plan_query("缓存策略")).cut == 0


def test_topical_terms_drop_stopwords_unless_nothing_is_left(q):
    assert [t.text for t in q.plan_query("what did we decide about the cache").topical()] == [
        "decide",
        "cache",
    ]
    assert [t.text for t in q.plan_query("who is it").topical()] == ["who", "is", "it"]


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


# --------------------------------------------------------------------------- terms a question ranks by


def _terms(q, text: str) -> list[tuple[str, str]]:
    return [(t.text, t.kind) for t in q.keyword_terms(q.plan_query(text)).terms]


def test_cjk_grams_are_the_three_character_windows_once_each(q):
    assert q.cjk_grams("项目归属") == ["项目归", "目归属"]
    assert q.cjk_grams("啊啊啊啊") == ["啊啊啊"]
    assert q.cjk_grams("归属") == []
    assert q.cjk_grams("项目归属", 2) == ["项目", "目归", "归属"]


def test_cjk_stop_phrases_are_cut_longest_first_and_content_words_survive(q):
    assert q.without_cjk_stop_phrases("上次我们是怎么处理缓存的？").split() == ["处理缓存", "？"]
    # 什么 goes before 么 could be taken by anything shorter; 会话 and 功能 keep their characters.
    assert q.without_cjk_stop_phrases("会话功能是什么").split() == ["会话功能"]
    # 是否 and 还是 are cut whole before 是 alone.
    assert q.without_cjk_stop_phrases("是否还是要缓存").split() == ["要缓存"]
    assert q.without_cjk_stop_phrases("plain English") == "plain English"
    phrases = q.CJK_STOP_PHRASES
    assert list(phrases) == sorted(phrases, key=lambda p: (-len(p), p))


def test_a_chinese_question_is_ranked_by_the_grams_of_its_topic(q):
    # The question's frame (上次 我们 是 怎么 的) is cut.
    assert _terms(q, "上次我们是怎么处理项目归属的？") == [
        ("处理项", "gram"),
        ("理项目", "gram"),
        ("项目归", "gram"),
        ("目归属", "gram"),
    ]
    # A two-character word can only be a pair; a single character is nothing.
    assert _terms(q, "归属") == [("归属", "pair")]
    assert _terms(q, "折") == []


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        # How it was solved, and 报错 a word of two characters: the topic's grams and its pair.
        (
            "上次那个数据库迁移的报错是怎么解决的",
            [("数据库", "gram"), ("据库迁", "gram"), ("库迁移", "gram"), ("报错", "pair")],
        ),
        ("我们之前部署脚本在哪里", [("部署脚", "gram"), ("署脚本", "gram")]),
        ("那个登录超时的问题后来怎么样了", [("登录超", "gram"), ("录超时", "gram")]),
        ("上次把缓存方案放在哪里了", [("缓存方", "gram"), ("存方案", "gram")]),
        ("之前讨论的限流是什么结果", [("限流", "pair")]),
        ("我记得之前聊过登录超时，具体是怎么做的来着？", [("登录超", "gram"), ("录超时", "gram")]),
        ("之前关于限流的讨论结论是什么？", [("限流", "pair")]),
    ],
)
def test_a_chinese_sentence_question_is_ranked_by_its_topic_alone(q, question, expected):
    # Written as a user asks (上次…是怎么解决的, 我们之前…在哪里, 那个…的问题后来怎么样了): every
    # framing word is cut, so no gram spans the topic and the frame (报错是, 的问题) and a title
    # holding the topic holds every term.
    assert _terms(q, question) == expected


def test_mixed_chinese_and_english_takes_both_and_unglues_latin_words(q):
    assert _terms(q, "把 `UserService` 的缓存改成什么了") == [
        ("userservice", "prefix"),
        ("缓存改", "gram"),
        ("存改成", "gram"),
    ]
    query = q.keyword_terms(q.plan_query("修改youer服务端"))
    assert [(t.text, t.kind) for t in query.terms] == [
        ("修改", "pair"),
        ("服务端", "gram"),
        ("youer", "prefix"),
    ]
    assert query.latin_words == ["youer"]
    assert query.pairs == ["修改"]


def test_identifiers_are_searched_as_phrases_and_as_their_words(q):
    assert _terms(q, "the SUPABASE_ACCESS_TOKEN in user_service.py") == [
        ("supabase access token", "phrase"),
        ("supabase_access_token", "literal"),  # as written: prose cannot match it
        ("supabase", "prefix"),
        ("access", "prefix"),
        ("token", "prefix"),
        ("user service py", "phrase"),
        ("user_service.py", "literal"),
        ("user", "prefix"),
        ("service", "prefix"),
        ("py", "word"),
    ]
    # Joanna's is a word, not an identifier; stopwords and single letters are not searched.
    assert _terms(q, "what did Joanna's x say") == [("joanna", "prefix"), ("say", "word")]
    # Hyphens and apostrophes join prose as well: the phrase of the parts only.
    for text in ("C-side", "can't", "l'historique", "ERR-42"):
        assert not [t for t in q.keyword_terms(q.plan_query(text)).terms if t.kind == "literal"], text
    assert q.as_identifier_literal("Foo::bar,") == "foo::bar"
    assert q.as_identifier_literal("@scope/pkg") == "@scope/pkg"
    # Written as only code writes it, an identifier weighs more (rank.LITERAL_WEIGHT); prose joins
    # two words with a dot or a slash too.
    text = "HEALTH_ENDPOINT, Foo::bar, lib/db.ts and src/app/page.tsx, not Next.js and/or src/app"
    terms = q.keyword_terms(q.plan_query(text)).terms
    assert [t.text for t in terms if t.kind == "literal"] == [
        "health_endpoint",
        "foo::bar",
        "lib/db.ts",
        "src/app/page.tsx",
        "next.js",
        "and/or",
        "src/app",
    ]
    assert [t.text for t in terms if t.code_joined] == [
        "health_endpoint",
        "foo::bar",
        "lib/db.ts",
        "src/app/page.tsx",
    ]


def test_the_users_phrases_prefixes_and_only_stopwords(q):
    assert _terms(q, '"painted fences" deploy*') == [("painted fences", "phrase"), ("deploy", "prefix")]
    assert _terms(q, "who is it") == [("who", "word"), ("is", "word"), ("it", "word")]
    assert _terms(q, "_折") == []  # nothing to rank by: searched as written (rank.ranked_messages)
    # Common words left out (rank.common_words), and when nothing else is left, nothing at all.
    assert _terms(q, "orion flaky") == [("orion", "prefix"), ("flaky", "prefix")]
    assert [t.text for t in q.keyword_terms(q.plan_query("orion flaky"), frozenset({"orion"})).terms] == [
        "flaky"
    ]
    assert q.keyword_terms(q.plan_query("orion"), frozenset({"orion"})).terms == ()


def test_the_or_of_a_tables_terms_is_quoted(q):
    query = q.keyword_terms(q.plan_query('修改 youer 服务端 "a b"'))
    assert query.match("messages_fts") == '"youer"* OR "a b"'
    assert query.match("messages_fts_trigram") == '"服务端"'


@pytest.mark.parametrize(
    ("text", "kind", "inside", "outside"),
    [
        ("token", "word", "the Token expired", "tokens expired"),
        ("token", "prefix", "two tokens", "a retoken"),
        ("access token", "phrase", "an ACCESS-token here", "token access"),
        ("项目归", "gram", "我们的项目归属", "项目的归属"),
        ("归属", "pair", "归属问题", "归 属"),
        ("gemini_model", "literal", "set GEMINI_MODEL=pro", "the Gemini model"),
    ],
)
def test_a_term_occurs_in_a_text_as_its_table_matches_it(q, text, kind, inside, outside):
    term = q.KeywordTerm(text, kind)
    assert term.occurs_in(inside)
    assert not term.occurs_in(outside)


def test_a_boolean_querys_terms_as_written(q):
    terms = {
        t.text: q.as_written(t) for t in q.plan_query('归属 AND "user service" AND deploy* AND x.com').terms
    }
    assert (terms["归属"].kind, terms["归属"].text) == ("gram", "归属")
    assert (terms["user service"].kind, terms["deploy"].kind) == ("phrase", "prefix")
    assert (terms["x.com"].kind, terms["x.com"].text) == ("phrase", "x com")


@given(st.text(max_size=80))
def test_any_question_ranks_by_quoted_terms_of_their_kind(phr, text):
    """Whatever is asked, each table gets only quoted phrases ORed, grams are three CJK
    characters and pairs two: nothing the analysis makes can break MATCH."""
    q = phr.module("fulltext.query")
    query = q.keyword_terms(q.plan_query(text))
    cjk = q._CJK_RUN
    for term in query.terms:
        assert term.fts.startswith('"') and term.fts.rstrip("*").endswith('"')
        if term.kind == "gram":
            assert len(term.text) == 3 and cjk.fullmatch(term.text)
        elif term.kind == "pair":
            assert len(term.text) == 2 and cjk.fullmatch(term.text)
    assert len(set(query.terms)) == len(query.terms)
    for table in ("messages_fts", "messages_fts_trigram"):
        parts = [p for p in query.match(table).split(" OR ") if p]
        assert len(parts) == sum(1 for t in query.terms if t.table == table)


@pytest.mark.parametrize(
    ("question", "every_word"),
    [
        ("how did we fix the login timeout", '"fix" AND "login"* AND "timeout"*'),
        ("why retry_after broke", '"retry after" AND "retry"* AND "broke"*'),  # an identifier: all of it
        ("deploy", None),  # one term: the ranking is already that
        ("把 UserService 的缓存", None),  # CJK: the trigram table, not one AND query
    ],
)
def test_every_word_ands_the_or_rankings_terms(q, question, every_word):
    query = q.keyword_terms(q.plan_query(question))
    assert query.every_word() == every_word
    if every_word:  # the same phrases as the OR ranking: the same bm25 for the rows both match
        assert every_word.split(" AND ") == query.match("messages_fts").split(" OR ")


# --------------------------------------------------------------------------- errors in the query


@pytest.mark.parametrize(
    "question",
    [
        "we hit a AssertionError about least, one, message before. How did we fix it?",
        "System.Reflection.ReflectionTypeLoadException: Unable to load one or more types",
        "又遇到 error TS2353 了（Object litera），之前的解决办法是什么？",
        "上次的错误TS2353怎么解决的",  # the code glued to CJK text
        "CS0246 again in the build",
        "E0382 borrow of moved value",
        "ENOENT: no such file or directory, open config.json",
        "ERROR: relation does not exist",
        "Traceback (most recent call last) in the worker",
        "what caused the ERR_MODULE_NOT_FOUND with Vite last time?",
        "I'm seeing 'fatal:' again (refusing to merge unrelated histories)",
        "之前遇到的 Cannot find module 错误是怎么解决的？",
        "Module not found: Can't resolve './Button'",
    ],
)
def test_a_question_quoting_an_error_is_told_apart(q, question):
    assert q.quotes_error(question)


@pytest.mark.parametrize(
    "question",
    [
        "Where did we land on fixing terminal selection errors?",
        "Error handling plan for the importer",  # a topic, not a quoted error
        "what is an error budget",
        "EXPORT the data nightly",  # capitals, but no errno name
        "Which value did we pick for ENABLE_CACHE?",
        "the MyErrorHandler class",
        "TypeError_count metric",
        "the fatal flaw in the module loader",  # the words, not a log line's prefix
        "MY_ERR_CODE setting",
    ],
)
def test_a_question_about_errors_is_not_one_quoting_an_error(q, question):
    assert not q.quotes_error(question)


# --------------------------------------------------------------------------- what the question names


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("When did Caroline go to the LGBTQ support group?", ("caroline", "lgbtq")),
        ("What is Jon's favorite style of dance?", ("jon",)),  # the possessive is not the name
        ("What did Mel paint in July 2023? Answer yes or no.", ("mel",)),  # months; a new sentence
        ("How did we fix the Vite build on Next.js?", ("vite", "next.js")),
        ('what did we decide about "Stripe Webhooks" in May', ()),  # a quoted phrase is a phrase
        ("Which outdoor spot did Joanna visit on Sunday?", ("joanna",)),
        ("How did we set up the cache? I forgot.", ()),  # "I" is a stopword, "How" opens
        ("上次那个 Redis 缓存的问题是怎么解决的", ("redis",)),
        ("how did we fix the login timeout", ()),
    ],
)
def test_named_things_are_capitalised_words_inside_a_sentence(q, text, names):
    assert q.named_things(text) == names
