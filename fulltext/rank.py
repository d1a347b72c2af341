"""The keyword ranking: which messages of the scope match the query, best first
(:func:`keyword_messages`), and which of the query's words nearly every conversation has
(:func:`common_words`). Reads go through :class:`reader.FullTextReader`.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .query import QueryPlan, Term, bare_word
from .reader import FullTextReader

logger = logging.getLogger(__name__)

SCAN_LIMIT = 300  # message rows read per query step before reducing to sessions
# The relaxed OR pass reads more rows per session than the others (reader.PER_SESSION_SCAN) so
# that a hit's neighbours are there to add to its score (docs/benchmarks.md).
NEIGHBOUR_SCAN = 10
NEIGHBOUR_WEIGHT = 0.5  # share of each adjacent message's bm25 added to a message's own


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
            continue
    return frozenset(common) if len(common) < len(words) else frozenset()


def with_neighbours(reader: FullTextReader, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """FTS rows re-ranked by their bm25 plus :data:`NEIGHBOUR_WEIGHT` of their neighbours' bm25.

    A question's words are often split between a message and the reply to it; a message whose
    neighbours also match is the better hit. Neighbours are the adjacent user/assistant messages
    of the same session; one that did not match adds nothing (docs/benchmarks.md).
    """
    if not rows or any("rank" not in row for row in rows):
        return list(rows)
    strength = {row["message_id"]: -float(row["rank"]) for row in rows}  # FTS5 bm25: lower is better
    score = dict(strength)
    # Two matching messages are neighbours when one is the other's predecessor: asking each hit
    # for its predecessor finds every matching pair once (one index descent per hit).
    for message_id, previous in reader.previous_messages(strength).items():
        if previous in strength:
            score[message_id] += NEIGHBOUR_WEIGHT * strength[previous]
            score[previous] += NEIGHBOUR_WEIGHT * strength[message_id]
    scored = [{**row, "score": score[row["message_id"]]} for row in rows]
    scored.sort(key=lambda row: (-row["score"], row["rank"], row["message_id"]))
    return scored


def keyword_messages(
    reader: FullTextReader,
    plan: QueryPlan,
    in_scope: Mapping[str, str],
    want_sessions: int,
    *,
    only_best: bool = False,
    leave_out: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """Ranked matching messages: AND first, relaxed to OR (bm25) when too few conversations match.

    ``in_scope`` maps each session that may be returned to its conversation; every row carries
    its ``conversation``. CJK terms use the trigram table when every term has three or more
    characters, else LIKE. Latin queries that still find too few conversations get a trigram
    substring pass, which finds words glued to CJK text (``修改youer服务端``) that unicode61
    indexes as one token. An FTS error of any kind falls back to LIKE: a search never fails
    because of its query. ``only_best``: only the best message of the first ``want_sessions``
    conversations matters (no fusion follows), so FTS reading stops there.

    The relaxed pass searches each plain word as the prefix of its stem (:meth:`QueryPlan.match_words`)
    and ranks a message by its bm25 plus half its neighbours' (:func:`with_neighbours`); it reads
    every matching row (up to :data:`NEIGHBOUR_SCAN` per session), since a later row can overtake.
    With ``leave_out`` (:func:`common_words`) it first searches without those words, then, when
    that finds too few conversations, with them.
    """
    if not plan.terms or not in_scope:
        return []
    ranked: list[dict[str, Any]] = []
    seen: set[int] = set()
    relax = len(plan.terms) > 1 and not plan.has_operators
    long_terms = all(len(t.text) >= 3 for t in plan.terms)
    # The user's AND/OR/NOT hold on the LIKE path too (else "归属 NOT 项目" would mean AND).
    expression = plan.like_expression() if plan.has_operators else None
    enough_groups = want_sessions if only_best else None

    def like(require_all: bool) -> list[dict[str, Any]]:
        terms = plan.needles() if require_all or expression else [t.text for t in plan.topical()]
        return reader.like_messages(terms, list(in_scope), require_all, SCAN_LIMIT, expression=expression)

    def fts(
        table: str, match: str, require_all: bool = True, neighbours: bool = False
    ) -> list[dict[str, Any]]:
        try:
            if neighbours:
                rows = reader.fts_messages(table, match, in_scope, SCAN_LIMIT, per_session=NEIGHBOUR_SCAN)
                return with_neighbours(reader, rows)
            return reader.fts_messages(table, match, in_scope, SCAN_LIMIT, enough_groups=enough_groups)
        except sqlite3.OperationalError as error:
            logger.debug("FTS query %r failed (%s); using LIKE", match, error)
            return like(require_all)

    def add(rows: Iterable[dict[str, Any]]) -> None:
        for row in rows:
            if row["message_id"] not in seen:
                seen.add(row["message_id"])
                ranked.append({**row, "conversation": in_scope[row["session_id"]]})

    def enough() -> bool:
        return len({row["conversation"] for row in ranked}) >= want_sessions

    schema = reader.schema
    if plan.has_cjk or not schema.fts_columns:
        if schema.has_trigram and long_terms:
            add(fts("messages_fts_trigram", plan.match_all()))
            if relax and not enough():
                add(fts("messages_fts_trigram", plan.match_any(), require_all=False))
        else:
            add(like(True))
            if relax and not enough():
                add(like(False))
        return ranked

    add(fts("messages_fts", plan.match_all()))
    if relax and leave_out and not enough():
        add(fts("messages_fts", plan.match_words(leave_out), require_all=False, neighbours=True))
    if relax and not enough():
        add(fts("messages_fts", plan.match_words(), require_all=False, neighbours=True))
    if not enough() and schema.has_trigram and long_terms:
        match = plan.match_any() if relax else plan.match_all()
        add(fts("messages_fts_trigram", match, require_all=not relax))
    return ranked
