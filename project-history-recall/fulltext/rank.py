"""The keyword ranking: which messages of the scope match the query, best first
(:func:`keyword_messages`), and which of the query's words nearly every conversation has
(:func:`common_words`). Reads go through :class:`reader.FullTextReader`.
"""

from __future__ import annotations

import logging
import math
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..store import message_text
from .query import KeywordQuery, KeywordTerm, QueryPlan, Term, as_written, bare_word, keyword_terms
from .reader import FullTextReader

logger = logging.getLogger(__name__)

SCAN_LIMIT = 300  # message rows read per query step before reducing to sessions
# What a two-character CJK word found in a candidate's text adds to its score: neither table can
# search it (unicode61 glues CJK runs, trigram needs three characters) (docs/benchmarks.md).
PAIR_BOOST = 1.0
# Matching messages a question's ranking reads per conversation (of SCAN_LIMIT per table): enough
# for a conversation's evidence to add up (conversation_score), few enough that one conversation
# repeating a word hundreds of times cannot hide the others.
RANKED_PER_SESSION = 20
# What an identifier's match as written in code (``health_endpoint``: KeywordTerm.code_joined) weighs
# against the other terms' bm25. The same message matches the identifier's phrase too (``health
# endpoint``), which prose matches as well; and the trigram table's bm25 of a long message (a config
# block, a diff), whose every character is a token, is small (docs/benchmarks.md).
LITERAL_WEIGHT = 2.0


# --------------------------------------------------------------------------- words every conversation has

# A topical word found in more than this share of the scope's conversations cannot tell them apart:
# the relaxed keyword pass and the semantic query leave it out (common_words). On LoCoMo these are
# the two speakers' names, which the question names and nearly every session carries ("Hey
# Caroline!"); in a project, its own name or its main tool (docs/benchmarks.md).
COMMON_SHARE = 0.9
# Below this many conversations a share is no statistic (two sessions that both say "test" say
# nothing about "test"): nothing is left out.
COMMON_MIN_CONVERSATIONS = 10
# A larger scope is judged by its most recent conversations: "nearly every conversation lately",
# what the project talks of now. Deciding that a word is in 90 % of a large project's
# conversations means reading most of its matches on each search with a word not counted yet;
# over the last 200 it is bounded (docs/benchmarks.md).
COMMON_RECENT_CONVERSATIONS = 200


# A project of more conversations than this ranks a question by the messages holding all its
# words first (ranked_messages): the same bound as a large project for common words.
EVERY_WORD_FIRST_ABOVE = COMMON_RECENT_CONVERSATIONS


def recent_conversations(in_scope: Mapping[str, str], count: int) -> dict[str, str]:
    """The part of ``in_scope`` (oldest session first, as :class:`projects.ProjectMap` orders it)
    that belongs to its ``count`` most recent conversations."""
    recent: set[str] = set()
    for conversation in reversed(list(in_scope.values())):
        if len(recent) >= count and conversation not in recent:
            break
        recent.add(conversation)
    return {sid: conversation for sid, conversation in in_scope.items() if conversation in recent}


def common_words(reader: FullTextReader, plan: QueryPlan, in_scope: Mapping[str, str]) -> frozenset[str]:
    """The query's topical words (bare, :func:`bare_word`) that more than :data:`COMMON_SHARE` of
    the scope's conversations contain, as the relaxed pass searches them (:meth:`QueryPlan.word_match`).

    Such a word adds bm25 to every message that merely mentions it and pulls the query's vector
    towards greetings; ranking by the other words finds the conversation that is about them
    (docs/benchmarks.md). Nothing is left
    out for queries with the user's operators, CJK queries, fewer than two topical words, scopes
    under :data:`COMMON_MIN_CONVERSATIONS` conversations, or when every topical word is common. A
    scope of more conversations than :data:`COMMON_RECENT_CONVERSATIONS` is judged by its most
    recent ones. One unranked FTS read per topical word through the ids of the conversations judged
    (:meth:`FullTextReader.in_conversations`).
    """
    if plan.has_operators or plan.has_cjk or not reader.schema.fts_columns:
        return frozenset()
    words: dict[str, Term] = {}
    for term in plan.topical():
        words.setdefault(bare_word(term.text), term)
    if len(words) < 2:
        return frozenset()
    counted_in = recent_conversations(in_scope, COMMON_RECENT_CONVERSATIONS)
    conversations = len(set(counted_in.values()))
    if conversations < COMMON_MIN_CONVERSATIONS:
        return frozenset()
    needed = int(COMMON_SHARE * conversations) + 1
    common = set()
    for word, term in words.items():
        try:
            if reader.in_conversations("messages_fts", QueryPlan.word_match(term), counted_in, needed):
                common.add(word)
        except sqlite3.OperationalError:
            if reader.out_of_time:  # not judged in time: nothing is left out
                return frozenset()
            continue
    return frozenset(common) if len(common) < len(words) else frozenset()


def sole_holder(
    reader: FullTextReader, plan: QueryPlan, in_scope: Mapping[str, str], query: KeywordQuery | None = None
) -> str | None:
    """The one conversation of the scope with a message holding every exact phrase of the question
    (its identifiers' phrases, ``MEDIUM_VALUE_SIGNALS``, and the user's quoted phrases), or None:
    when none or several do, when the question has no phrase, or when FTS cannot say in time.

    An identifier is what a developer's question is most precise about: a configuration key or
    an error code found in one conversation only names it, where its other words ("which value
    did we pick") are everywhere. Hybrid keeps that conversation first when keyword ranks it
    first too (``search.keep_clear_keyword_winner``; docs/benchmarks.md). One unranked FTS read
    that stops at the second conversation (:meth:`FullTextReader.conversations_with`), which loads
    no scope for it: a fresh process's first search would pay that for one rare phrase.
    ``query``: ``keyword_terms(plan)`` when the caller has it.
    """
    if plan.has_operators or not reader.schema.fts_columns:
        return None
    terms = (query or keyword_terms(plan)).terms
    phrases = [t for t in terms if t.kind == "phrase" and t.table == "messages_fts"]
    if not phrases:
        return None
    try:
        match = " AND ".join(t.fts for t in phrases)
        found = reader.conversations_with("messages_fts", match, in_scope, 2, load=False)
    except sqlite3.OperationalError:
        if not reader.out_of_time:
            logger.debug("phrase query failed", exc_info=True)
        return None
    return next(iter(found)) if len(found) == 1 else None


def conversation_score(message_scores: Sequence[float]) -> float:
    """A conversation's keyword score from its matching messages' scores: the best one, plus the
    log of one plus the rest's sum.

    The best message decides (a conversation is found through the message that says it); the
    others add evidence with diminishing returns, so a conversation that keeps coming back to the
    question's words beats one that mentions them once, and a long one that repeats a common word
    cannot outweigh a strong match (docs/benchmarks.md).
    """
    if not message_scores:
        return 0.0
    best = max(message_scores)
    return best + math.log1p(max(0.0, sum(message_scores) - best))


def rank_by_conversation(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows (each with its ``conversation``, message ``score`` and ``bm25``) ordered by their
    conversation's :func:`conversation_score`, then by their own score. Each row gains
    ``conversation_score`` and ``evidence``, the same over its conversation's bm25 alone (None
    when no message of it has any: LIKE matches), which the relevance floor reads. Ties go to the
    conversation whose best message is older."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault(row["conversation"], []).append(row)
    conversations = []
    for members in grouped.values():
        if len(members) == 1:  # most conversations of a large scope: their one message's scores
            only = members[0]
            conversations.append(
                (-only["score"], only["message_id"], only["score"], only.get("bm25"), members)
            )
            continue
        members.sort(key=lambda row: (-row["score"], row["message_id"]))
        bm25 = [row["bm25"] for row in members if row.get("bm25") is not None]
        total = conversation_score([row["score"] for row in members])
        conversations.append(
            (-total, members[0]["message_id"], total, conversation_score(bm25) if bm25 else None, members)
        )
    conversations.sort(key=lambda c: (c[0], c[1]))
    return [
        {**row, "conversation_score": total, "evidence": evidence}
        for _, _, total, evidence, members in conversations
        for row in members
    ]


def only_in_text(terms: Sequence[KeywordTerm], text: str, meta: str) -> float:
    """The share of a row's matching terms that match its text rather than only its tool-call
    columns (Hermes's FTS tables index ``content || tool_name || tool_calls`` as one text): 0
    when only the tool call matched (not a match), 1 when the tool call adds nothing."""
    in_text = sum(1 for t in terms if t.occurs_in(text))
    anywhere = sum(1 for t in terms if t.occurs_in(text) or t.occurs_in(meta))
    return in_text / anywhere if anywhere else 0.0


def _checked(reader: FullTextReader, rows: list[dict[str, Any]], terms: Sequence[KeywordTerm]) -> list[dict]:
    """Rows whose match is in their text: a row that also carries tool-call columns keeps the
    share of its bm25 that :func:`only_in_text` gives, and goes when that is 0."""
    flagged = [row["message_id"] for row in rows if row.get("tool_meta")]
    if not flagged:
        return rows
    texts = reader.tool_texts(flagged)
    kept = []
    for row in rows:
        if row.get("tool_meta"):
            text, meta = texts.get(row["message_id"], ("", ""))
            share = only_in_text(terms, message_text(text), meta)
            if not share:
                continue
            row = {**row, "rank": row["rank"] * share}
        kept.append(row)
    return kept


def keyword_messages(
    reader: FullTextReader,
    plan: QueryPlan,
    in_scope: Mapping[str, str],
    want_sessions: int,
    *,
    only_best: bool = False,
    leave_out: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """Ranked matching messages of the scope, best conversation first, each with its
    ``conversation``.

    A question (no operators) is ranked by :func:`ranked_messages`; a query with the user's own
    ``AND``/``OR``/``NOT`` by :func:`boolean_messages`, which keeps their meaning. ``only_best``:
    only the first ``want_sessions`` conversations' best messages matter (keyword mode), which
    lets the boolean pass stop reading early.
    """
    if not plan.terms or not in_scope:
        return []
    if plan.has_operators:
        return boolean_messages(reader, plan, in_scope, want_sessions, only_best=only_best)
    return ranked_messages(reader, plan, in_scope, want_sessions, leave_out=leave_out)


def ranked_messages(
    reader: FullTextReader,
    plan: QueryPlan,
    in_scope: Mapping[str, str],
    want_sessions: int,
    *,
    leave_out: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """A question's matching messages, ranked by conversation (:func:`rank_by_conversation`).

    The question's terms (:func:`query.keyword_terms`, without the ``leave_out`` words) are ORed,
    one FTS query per table: words, stems and identifier phrases on ``messages_fts``, CJK 3-grams
    and identifiers as written on ``messages_fts_trigram``, the :data:`SCAN_LIMIT` best rows of
    each. A message scores the sum of its bm25 in both (``bm25``, the evidence the relevance floor
    reads; an identifier written as code, :attr:`KeywordTerm.code_joined`, is its own query and
    counts :data:`LITERAL_WEIGHT` times), plus :data:`PAIR_BOOST` per two-character CJK word its
    text contains; LIKE finds those words when nothing else matched (a message scores how many it
    has), or, for the conversations not found yet, when too few matched. A match only in a row's
    tool-call columns is no match (:func:`only_in_text`). An FTS error of any kind falls back to
    LIKE: a search never fails because of its query.

    In a project of more than :data:`EVERY_WORD_FIRST_ABOVE` conversations, when
    ``want_sessions`` of them or more have a message holding every word of the question
    (:meth:`KeywordQuery.every_word`, one AND query), those messages alone rank: their bm25 is the
    OR ranking's for the same rows, and the OR query would score every message that has any of the
    words (half a large project for a few common words), where the AND seeks through the rarer
    words' lists as Hermes's own search does. A smaller project keeps every match's evidence
    (docs/benchmarks.md).

    When fewer than ``want_sessions`` conversations match, conversations found only by the
    ``leave_out`` words follow, ranked among themselves (as before common words were left out,
    so recall at 10 is kept). When the question mixes CJK and Latin words, or still too few
    conversations match, its Latin words are also searched as substrings in the trigram table
    and add to the messages' scores: unicode61 glues a word to CJK text around it
    (``修改youer服务端`` is one token). A question with no term left (``_折``) is searched as
    written, with LIKE.
    """
    query = keyword_terms(plan, leave_out)
    if not query.terms and leave_out:
        query, leave_out = keyword_terms(plan), frozenset()
    schema = reader.schema
    if not query.terms:  # nothing but punctuation and single CJK characters ("_折"): as written
        try:
            rows = reader.like_messages(plan.needles(), list(in_scope), False, SCAN_LIMIT)
        except sqlite3.OperationalError:
            if not reader.out_of_time:
                raise
            return []
        return [
            {**row, "conversation": in_scope[row["session_id"]], "score": 0.0, "bm25": None} for row in rows
        ]
    main: dict[int, dict[str, Any]] = {}
    tiers = [main]

    def conversations() -> set[str]:
        return {row["conversation"] for tier in tiers for row in tier.values()}

    def add(
        tier: dict[int, dict[str, Any]],
        rows: Iterable[dict[str, Any]],
        bm25: bool,
        new_only: bool,
        like_terms: int = 0,
        weight: float = 1.0,
    ) -> None:
        known = conversations() if new_only else set()
        for row in rows:
            conversation = in_scope.get(row["session_id"])
            if conversation is None or conversation in known:
                continue
            entry = tier.setdefault(
                row["message_id"], {**row, "conversation": conversation, "score": 0.0, "bm25": None}
            )
            value = -float(row["rank"]) * weight if bm25 else float(row.get("matched") or 1)
            entry["score"] += value
            if bm25:
                entry["bm25"] = (entry["bm25"] or 0.0) + value
            elif like_terms:
                entry["like_share"] = max(entry.get("like_share", 0.0), value / like_terms)

    def like(texts: Sequence[str]) -> list[dict[str, Any]]:
        return reader.like_messages(list(texts), list(in_scope), False, SCAN_LIMIT)

    def fts(table: str, match: str, terms: Sequence[KeywordTerm]) -> list[dict[str, Any]] | None:
        """The best rows of ``match`` whose match is in their text; None when FTS5 refuses the
        query (the deadline is raised)."""
        try:
            rows = reader.fts_messages(
                table, match, in_scope, SCAN_LIMIT, per_session=RANKED_PER_SESSION, with_content=False
            )
        except sqlite3.OperationalError as error:
            if reader.out_of_time:
                raise
            logger.debug("FTS query %r failed (%s)", match, error)
            return None
        return _checked(reader, rows, terms)

    def search(
        table: str, terms: Sequence[KeywordTerm], tier: dict | None = None, new_only: bool = False
    ) -> None:
        tier = main if tier is None else tier
        usable = schema.has_trigram if table == "messages_fts_trigram" else bool(schema.fts_columns)
        plain, code = [], []
        for term in terms:
            (code if term.code_joined else plain).append(term)
        for group, weight in ((plain, 1.0), (code, LITERAL_WEIGHT)):
            if not group:
                continue
            rows = fts(table, " OR ".join(t.fts for t in group), group) if usable else None
            if rows is not None:
                add(tier, rows, bm25=True, new_only=new_only, weight=weight)
            else:  # LIKE: what FTS cannot read
                add(tier, like([t.text for t in group]), bm25=False, new_only=new_only, like_terms=len(group))

    def search_every_word() -> bool:
        """Rank by the messages holding every word, when ``want_sessions`` conversations have one."""
        match = query.every_word()
        if match is None or not schema.fts_columns or len(set(in_scope.values())) <= EVERY_WORD_FIRST_ABOVE:
            return False
        add(main, fts("messages_fts", match, query.terms) or [], bm25=True, new_only=False)
        if len(conversations()) >= want_sessions:
            return True
        main.clear()  # too few: the OR ranking below, as if this had not been asked
        return False

    try:  # each step adds to the tiers; at the deadline the ranking keeps what they hold
        together = search_every_word()
        for table in ("messages_fts", "messages_fts_trigram"):
            terms = [t for t in query.terms if t.table == table]
            if not schema.has_trigram:  # an identifier as written adds to its phrase: not worth a scan
                terms = [t for t in terms if t.kind != "literal"]
            if terms and not together:
                search(table, terms)
        if query.pairs and main:
            for message_id, count in reader.containing(main, query.pairs).items():
                main[message_id]["score"] += PAIR_BOOST * count
            if len(conversations()) < want_sessions:
                tiers.append({})
                add(tiers[-1], like(query.pairs), bm25=False, new_only=True, like_terms=len(query.pairs))
        elif query.pairs:
            add(main, like(query.pairs), bm25=False, new_only=False, like_terms=len(query.pairs))
        if leave_out and len(conversations()) < want_sessions:
            every = keyword_terms(plan).terms
            common = [t for t in every if t.table == "messages_fts" and t not in query.terms]
            if common:
                tiers.append({})
                search("messages_fts", common, tiers[-1], new_only=True)
        mixed = any(t.kind in ("gram", "pair") for t in query.terms)
        if (mixed or len(conversations()) < want_sessions) and schema.has_trigram and query.latin_words:
            glued = [KeywordTerm(word, "gram", word) for word in query.latin_words]
            search("messages_fts_trigram", glued)
    except sqlite3.OperationalError:
        if not reader.out_of_time:
            raise
    ranked: list[dict[str, Any]] = []
    for tier in tiers:
        ranked.extend(rank_by_conversation(tier.values()))
    return ranked


def boolean_messages(
    reader: FullTextReader,
    plan: QueryPlan,
    in_scope: Mapping[str, str],
    want_sessions: int,
    *,
    only_best: bool = False,
) -> list[dict[str, Any]]:
    """Messages matching the user's own ``AND``/``OR``/``NOT`` query as FTS5 reads it, best bm25
    first.

    ``in_scope`` maps each session that may be returned to its conversation; every row carries
    its ``conversation``. Latin terms search ``messages_fts``, then, when too few conversations
    match, the trigram table (words glued to CJK text); CJK terms use the trigram table when every
    term has three or more characters, else LIKE, with the operators kept (else "归属 NOT 项目"
    would mean AND). An FTS error of any kind falls back to LIKE. A match only in a row's
    tool-call columns is no match. ``only_best``: only the best message of the first
    ``want_sessions`` conversations matters, so FTS reading stops there.
    """
    ranked: list[dict[str, Any]] = []
    seen: set[int] = set()
    long_terms = all(len(t.text) >= 3 for t in plan.terms)
    expression = plan.like_expression()
    enough_groups = want_sessions if only_best else None
    checked_terms = [as_written(t) for t in plan.terms]

    def like() -> list[dict[str, Any]]:
        return reader.like_messages(plan.needles(), list(in_scope), True, SCAN_LIMIT, expression=expression)

    def fts(table: str) -> list[dict[str, Any]]:
        try:
            rows = reader.fts_messages(
                table, plan.match_all(), in_scope, SCAN_LIMIT, enough_groups=enough_groups
            )
            return _checked(reader, rows, checked_terms)
        except sqlite3.OperationalError as error:
            if reader.out_of_time:
                raise
            logger.debug("FTS query %r failed (%s); using LIKE", plan.match_all(), error)
            return like()

    def add(rows: Iterable[dict[str, Any]]) -> None:
        for row in rows:
            if row["message_id"] not in seen:
                seen.add(row["message_id"])
                ranked.append({**row, "conversation": in_scope[row["session_id"]]})

    schema = reader.schema
    try:  # at the deadline: what was read so far
        if plan.has_cjk or not schema.fts_columns:
            add(fts("messages_fts_trigram") if schema.has_trigram and long_terms else like())
            return ranked
        add(fts("messages_fts"))
        if len({row["conversation"] for row in ranked}) < want_sessions and schema.has_trigram and long_terms:
            add(fts("messages_fts_trigram"))
    except sqlite3.OperationalError:
        if not reader.out_of_time:
            raise
    return ranked
