"""Keyword retrieval: which messages of the scope match the query and what each of the query's
passes contributed to them (:func:`keyword_signals`, read for ``ranking.rank`` to weigh), which of
the query's words nearly every conversation has (:func:`common_words`), and the one conversation
holding its exact phrases (:func:`sole_holder`). Reads go through :class:`reader.FullTextReader`;
what and how much to read is the policy's (``ranking.RankingPolicy``).
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from ..ranking import KeywordHit, KeywordSignals, Message, RankingPolicy, TitleHit
from ..ranking.signals import PartKind
from ..store import message_text
from .query import KeywordQuery, KeywordTerm, QueryPlan, Term, as_written, bare_word, keyword_terms
from .reader import FullTextReader

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- words every conversation has


def recent_conversations(in_scope: Mapping[str, str], count: int) -> dict[str, str]:
    """The part of ``in_scope`` (oldest session first, as :class:`projects.ProjectMap` orders it)
    that belongs to its ``count`` most recent conversations."""
    recent: set[str] = set()
    for conversation in reversed(list(in_scope.values())):
        if len(recent) >= count and conversation not in recent:
            break
        recent.add(conversation)
    return {sid: conversation for sid, conversation in in_scope.items() if conversation in recent}


def common_words(
    reader: FullTextReader, plan: QueryPlan, in_scope: Mapping[str, str], policy: RankingPolicy
) -> frozenset[str]:
    """The query's topical words (bare, :func:`bare_word`) that more than the policy's
    ``common_share`` of the scope's conversations contain, as the relaxed pass searches them
    (:meth:`QueryPlan.word_match`).

    Such a word adds bm25 to every message that merely mentions it and pulls the query's vector
    towards greetings; ranking by the other words finds the conversation that is about them
    (docs/benchmarks.md). Nothing is left
    out for queries with the user's operators, CJK queries, fewer than two topical words, scopes
    under ``common_min_conversations`` conversations, or when every topical word is common. A
    scope of more conversations than ``common_recent_conversations`` is judged by its most recent
    ones. One unranked FTS read per topical word through the ids of the conversations judged
    (:meth:`FullTextReader.in_conversations`).
    """
    if plan.has_operators or plan.has_cjk or not reader.schema.fts_columns:
        return frozenset()
    words: dict[str, Term] = {}
    for term in plan.topical():
        words.setdefault(bare_word(term.text), term)
    if len(words) < 2:
        return frozenset()
    counted_in = recent_conversations(in_scope, policy.common_recent_conversations)
    conversations = len(set(counted_in.values()))
    if conversations < policy.common_min_conversations:
        return frozenset()
    needed = int(policy.common_share * conversations) + 1
    common = set()
    for word, term in words.items():
        try:
            if reader.in_conversations("messages_fts", QueryPlan.word_match(term), counted_in, needed):
                common.add(word)
        except sqlite3.OperationalError as error:
            if reader.stopped(error):  # not judged in time: nothing is left out
                return frozenset()
            continue
    return frozenset(common) if len(common) < len(words) else frozenset()


def absent_names(
    reader: FullTextReader, names: Sequence[str], in_scope: Mapping[str, str], policy: RankingPolicy
) -> bool:
    """Does the question name things (``query.named_things``) of which not one occurs in any
    conversation of the scope, in its messages or in the titles :func:`title_hits` reads? Then it
    is about another project, and semantic and hybrid search answer nothing
    (``RankingPolicy.absent_names_answer_nothing``). A name the agent only saw or wrote (a key in
    a tool row or call) is mentioned: it is evidence too (issue 30.1). One unranked FTS read per
    name that stops at
    its first conversation (:meth:`FullTextReader.conversations_with`, kept with the scope), and
    one count over the titles; a name not judged in time counts as present."""
    if not names or not reader.schema.fts_columns:
        return False
    for name in names:
        match = QueryPlan.word_match(Term(name))
        try:
            if reader.conversations_with("messages_fts", match, in_scope, 1, activity=True):
                return False
        except sqlite3.OperationalError as error:
            if not reader.stopped(error):
                logger.warning("could not tell whether %r occurs in this project", name, exc_info=True)
            return False
    try:
        _, holding, _ = reader.session_titles(list(in_scope)[-policy.title_sessions :], list(names))
    except sqlite3.Error as error:
        if not (isinstance(error, sqlite3.OperationalError) and reader.stopped(error)):
            logger.warning("could not read this project's titles for %r", names, exc_info=True)
        return False
    return not any(holding)


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
    except sqlite3.OperationalError as error:
        if not reader.stopped(error):
            logger.debug("phrase query failed", exc_info=True)
        return None
    return next(iter(found)) if len(found) == 1 else None


#: The plugin's own tool: a chat that called it and got its answer recalled other conversations.
OWN_TOOL = "project_history_search"
#: Of a search's candidates, the plugin's own results read (each cut to this many characters):
#: bounded however many recall chats the candidates are.
CITATION_ROWS = 200
CITATION_CHARS = 20_000
_LINK = re.compile(r"@session:(?:[^/\s\"']+/)?([^\s\"'\\,)\]]+)")


def cited_sessions(text: str) -> set[str]:
    """The session ids one of the plugin's own answers links: its results' ``session_id`` and
    ``parent_session_id``, and ``@session:`` links (of an answer cut short, or quoted)."""
    found: set[str] = set()
    try:
        answer = json.loads(text)
    except ValueError:
        answer = None
    if isinstance(answer, dict) and isinstance(answer.get("results"), list):
        for row in answer["results"]:
            if isinstance(row, dict):
                found.update(
                    v for k in ("session_id", "parent_session_id") if isinstance(v := row.get(k), str)
                )
    found.update(_LINK.findall(text))
    return found


def recall_citations(
    reader: FullTextReader, candidates: Iterable[str], in_scope: Mapping[str, str], conversations: int
) -> dict[str, frozenset[str]]:
    """Recall chats among the candidate sessions (best first, as retrieval found them):
    conversation -> the other conversations of the scope that its own ``project_history_search``
    answers link (``ranking.rank`` never ranks a recall chat above a conversation it cites). Only
    the sessions of the first ``conversations`` candidate conversations are read: the recall rules
    only move a chat down, so one found further back is not shown either way. One bounded read of
    those sessions' tool rows (:meth:`FullTextReader.own_tool_results`); a failed read cites
    nothing."""
    sessions: list[str] = []
    counted: set[str] = set()
    for sid in dict.fromkeys(candidates):
        conversation = in_scope.get(sid)
        if conversation is None or (conversation not in counted and len(counted) >= conversations):
            continue
        counted.add(conversation)
        sessions.append(sid)
    if not sessions:
        return {}
    try:
        rows = reader.own_tool_results(sessions, OWN_TOOL, CITATION_ROWS, CITATION_CHARS)
    except sqlite3.Error:
        if not reader.out_of_time:
            logger.debug("reading the plugin's own results failed", exc_info=True)
        return {}
    cites: dict[str, set[str]] = {}
    for session_id, text in rows:
        chat = in_scope[session_id]
        cited = {in_scope[sid] for sid in cited_sessions(text) if sid in in_scope} - {chat}
        if cited:
            cites.setdefault(chat, set()).update(cited)
    return {chat: frozenset(cited) for chat, cited in cites.items()}


def only_in_text(terms: Sequence[KeywordTerm], text: str, meta: str) -> float:
    """The share of a row's matching terms that match its text rather than only its tool-call
    columns (Hermes's FTS tables index ``content || tool_name || tool_calls`` as one text): 0
    when only the tool call matched (not a match), 1 when the tool call adds nothing."""
    in_text = sum(1 for t in terms if t.occurs_in(text))
    anywhere = sum(1 for t in terms if t.occurs_in(text) or t.occurs_in(meta))
    return in_text / anywhere if anywhere else 0.0


def _checked(reader: FullTextReader, rows: list[dict[str, Any]], terms: Sequence[KeywordTerm]) -> list[dict]:
    """Rows whose match is in their text: a row that also carries tool-call columns keeps the
    share of its bm25 that :func:`only_in_text` gives; when that is 0 its match is what the agent
    did (its ``tool_calls``), marked ``activity`` as the tool rows :meth:`FullTextReader.fts_messages`
    adds are. Activity rows pass as they are."""
    flagged = [row["message_id"] for row in rows if row.get("tool_meta") and not row.get("activity")]
    if not flagged:
        return rows
    texts = reader.tool_texts(flagged)
    kept = []
    for row in rows:
        if row.get("tool_meta") and not row.get("activity"):
            text, meta = texts.get(row["message_id"], ("", ""))
            share = only_in_text(terms, message_text(text), meta)
            row = {**row, "rank": row["rank"] * share} if share else {**row, "activity": True}
        kept.append(row)
    return kept


#: The plugin's own tools: their calls and results are never evidence (spec 19.4).
OWN_TOOLS = ("project_history_search", "project_session_move")


def keyword_signals(
    reader: FullTextReader,
    plan: QueryPlan,
    in_scope: Mapping[str, str],
    policy: RankingPolicy,
    *,
    only_best: bool = False,
    leave_out: frozenset[str] = frozenset(),
) -> KeywordSignals:
    """The scope's messages matching the query, for ``ranking.rank`` to weigh.

    A question (no operators) is read by :func:`question_hits`; a query with the user's own
    ``AND``/``OR``/``NOT`` by :func:`boolean_hits`, which keeps their meaning. ``only_best``:
    only the first conversations' best messages matter (keyword mode), which lets the boolean
    pass stop reading early. How far either reads never depends on the ``limit`` asked for: the
    policy's ``gather_conversations`` (the largest limit), so a user asking for more results sees
    the same first ones. A question's conversations whose titles hold its terms come with it
    (:func:`title_hits`; issue 30: a title is evidence for its conversation); the user's own
    operators read messages only.
    """
    if not plan.terms or not in_scope:
        return KeywordSignals()
    if plan.has_operators:
        return boolean_hits(reader, plan, in_scope, policy, only_best=only_best)
    found = question_hits(reader, plan, in_scope, policy, leave_out=leave_out)
    if found.kind != "ranked" or policy.title_evidence <= 0:
        return found
    query = keyword_terms(plan, leave_out)
    words = [t for t in query.terms or keyword_terms(plan).terms if not t.text.isdigit()]
    titles = title_hits(reader, words, in_scope, policy, found.hits)
    return replace(found, titles=titles) if titles else found


def terms_in_title(terms: Sequence[KeywordTerm], title: str) -> frozenset[int]:
    """The indexes of ``terms`` that ``title`` holds, as :meth:`KeywordTerm.occurs_in` reads it
    (the title cut into words once, for the thousands of titles a search may read)."""
    folded = title.casefold()
    words = _TITLE_WORD.findall(folded)
    spaced = " " + " ".join(words) + " "
    found = set()
    for index, term in enumerate(terms):
        text = term.text.casefold()
        if term.kind in ("gram", "pair", "literal"):
            held = text in folded
        elif term.kind == "prefix":
            held = (" " + text) in spaced
        else:
            held = (" " + " ".join(text.split()) + " ") in spaced
        if held:
            found.add(index)
    return frozenset(found)


_TITLE_WORD = re.compile(r"[^\W_]+")


def title_hits(
    reader: FullTextReader,
    terms: Sequence[KeywordTerm],
    in_scope: Mapping[str, str],
    policy: RankingPolicy,
    hits: Sequence[KeywordHit] = (),
) -> tuple[TitleHit, ...]:
    """The conversations whose sessions' titles hold the question's terms (Hermes titles every
    conversation with a one-line summary, often in words its messages never write: a title
    ``数据库迁移报错`` over a chat about ``alembic upgrade head``).

    Of the scope's ``title_sessions`` most recent sessions, SQLite counts the titles and those
    holding each term as a substring, and returns the titles holding one (one statement each);
    those are matched here as the tables would match them (:func:`terms_in_title`). A term in
    more than ``common_share`` of the titles (``session`` in ``conv-26 session 3``) cannot tell
    them apart and does not count, once ``common_min_conversations`` titles are read. A
    conversation that nothing else matched is shown by its session's first user message (a
    second query, for those only). A failed or late read finds no titles: the search goes on.
    The caller leaves bare numbers out: a question's ``9 November`` or ``4 years`` is no
    ``session 9`` (LoCoMo's titles, tune half: docs/benchmarks.md, "Titles").
    """
    if not terms or not in_scope:
        return ()
    recent = list(in_scope)[-policy.title_sessions :]
    needles = [" ".join(t.text.casefold().split()) for t in terms]
    try:
        total, holding, titles = reader.session_titles(recent, needles)
    except sqlite3.Error as error:
        if not (isinstance(error, sqlite3.OperationalError) and reader.stopped(error)):
            logger.debug("reading titles failed", exc_info=True)
        return ()
    if not titles:
        return ()
    counted = set(range(len(terms)))
    if total >= policy.common_min_conversations:
        most = policy.common_share * total
        counted = {i for i in counted if holding[i] <= most}
    held = [(session_id, terms_in_title(terms, title)) for session_id, title in titles]
    best: dict[str, tuple[float, str]] = {}
    for session_id, holds in held:
        share = len(holds & counted) / len(counted) if counted else 0.0
        conversation = in_scope[session_id]
        if share > 0 and share > best.get(conversation, (0.0, ""))[0]:
            best[conversation] = (share, session_id)
    if not best:
        return ()
    matched = {hit.message.conversation for hit in hits}
    alone = [sid for conversation, (_, sid) in best.items() if conversation not in matched]
    try:
        first = reader.first_user_messages(alone)
    except sqlite3.Error as error:
        if not (isinstance(error, sqlite3.OperationalError) and reader.stopped(error)):
            logger.debug("reading titled sessions' first messages failed", exc_info=True)
        first = {}
    found = []
    for conversation, (share, session_id) in best.items():
        message = None
        if session_id in first:
            message_id, timestamp = first[session_id]
            message = Message(message_id, session_id, conversation, timestamp)
        if conversation in matched or message is not None:
            found.append(TitleHit(conversation, share, message))
    return tuple(found)


@dataclass
class _Found:
    """A message while the passes read it: the row first seen, and what each pass added."""

    row: dict[str, Any]
    conversation: str
    parts: list[tuple[PartKind, float]] = field(default_factory=list)
    like_share: float | None = None

    def hit(self, tier: int) -> KeywordHit:
        row = self.row
        message = Message(
            row["message_id"], row["session_id"], self.conversation, row.get("timestamp"), row.get("content")
        )
        return KeywordHit(message, tuple(self.parts), tier, self.like_share)


def question_hits(
    reader: FullTextReader,
    plan: QueryPlan,
    in_scope: Mapping[str, str],
    policy: RankingPolicy,
    *,
    leave_out: frozenset[str] = frozenset(),
) -> KeywordSignals:
    """A question's matching messages, each with what each pass found in it.

    The question's terms (:func:`query.keyword_terms`, without the ``leave_out`` words) are ORed,
    one FTS query per table: words, stems and identifier phrases on ``messages_fts``, CJK 3-grams
    and identifiers as written on ``messages_fts_trigram``, the ``scan_limit`` best rows of each.
    A message gains its bm25 from both (an identifier written as code,
    :attr:`KeywordTerm.code_joined`, is its own query, a ``code`` part) and a ``pairs`` part for
    the two-character CJK words its text contains; LIKE finds those words when nothing else
    matched, or, for the conversations not found yet, when too few matched. A match only in a
    row's tool-call columns (:func:`only_in_text`), or in a ``tool`` row, is what the agent did or
    saw: with the policy's ``activity_weight`` it counts for the message that opened its turn
    (:func:`_credit_activity`), else for nothing. An FTS error of any kind falls back to LIKE: a
    search never fails because of its query.

    In a project of more than ``every_word_first_above`` conversations, when enough of them
    (``gather_conversations``) have a message holding every word of the question
    (:meth:`KeywordQuery.every_word`, one AND query), those messages alone are read: their bm25 is
    the OR ranking's for the same rows, and the OR query would score every message that has any of
    the words (half a large project for a few common words), where the AND seeks through the
    rarer words' lists as Hermes's own search does. A smaller project keeps every match's evidence.

    When too few conversations match, conversations found only by the ``leave_out`` words follow
    in a tier of their own (so recall at 10 is kept). When the question mixes CJK and Latin words,
    or still too few conversations match, its Latin words are also searched as substrings in the
    trigram table: unicode61 glues a word to CJK text around it (``修改youer服务端`` is one token).
    A question with no term left (``_折``) is searched as written, with LIKE.
    """
    want = policy.gather_conversations
    query = keyword_terms(plan, leave_out)
    if not query.terms and leave_out:
        query, leave_out = keyword_terms(plan), frozenset()
    schema = reader.schema
    if not query.terms:  # nothing but punctuation and single CJK characters ("_折"): as written
        try:
            rows = reader.like_messages(plan.needles(), list(in_scope), False, policy.scan_limit)
        except sqlite3.OperationalError as error:
            if not reader.stopped(error):
                raise
            return KeywordSignals(kind="as_written")
        hits = tuple(_Found(row, in_scope[row["session_id"]]).hit(0) for row in rows)
        return KeywordSignals(hits, "as_written")
    main: dict[int, _Found] = {}
    tiers = [main]
    weigh_activity = policy.activity_weight > 0 and policy.activity_per_session > 0

    def conversations() -> set[str]:
        return {found.conversation for tier in tiers for found in tier.values()}

    def add(
        tier: dict[int, _Found],
        rows: Iterable[dict[str, Any]],
        kind: PartKind,
        new_only: bool,
        like_terms: int = 0,
    ) -> None:
        known = conversations() if new_only else set()
        for row in rows:
            conversation = in_scope.get(row["session_id"])
            if conversation is None or conversation in known:
                continue
            found = tier.setdefault(row["message_id"], _Found(row, conversation))
            if kind != "like":
                found.parts.append((kind, -float(row["rank"])))
                continue
            value = float(row.get("matched") or 1)
            found.parts.append(("like", value))
            if like_terms:
                found.like_share = max(found.like_share or 0.0, value / like_terms)

    def like(texts: Sequence[str]) -> list[dict[str, Any]]:
        return reader.like_messages(list(texts), list(in_scope), False, policy.scan_limit)

    activity: dict[int, _Activity] = {}  # what the agent did or saw, by row: each pass's bm25

    def fts(
        table: str,
        match: str,
        terms: Sequence[KeywordTerm],
        with_activity: bool = False,
        kind: PartKind = "bm25",
    ) -> list[dict[str, Any]] | None:
        """The best rows of ``match`` whose match is in their text; None when FTS5 refuses the
        query (the deadline is raised). ``with_activity``: the matching tool activity is kept
        aside for :func:`_credit_activity`, with the pass's ``kind`` (a question's own terms
        only, not the passes that fill the list)."""
        try:
            rows = reader.fts_messages(
                table,
                match,
                in_scope,
                policy.scan_limit,
                per_session=policy.ranked_per_session,
                with_content=False,
                activity_per_session=policy.activity_per_session if with_activity and weigh_activity else 0,
                activity_limit=policy.activity_rows,
            )
        except sqlite3.OperationalError as error:
            if reader.stopped(error):
                raise
            logger.debug("FTS query %r failed (%s)", match, error)
            return None
        spoken = []
        for row in _checked(reader, rows, terms):
            if not row.get("activity"):
                spoken.append(row)
            elif with_activity and weigh_activity:
                seen = activity.setdefault(row["message_id"], _Activity(row))
                part: PartKind = "activity_code" if kind == "code" else "activity"
                seen.parts[part] = max(seen.parts.get(part, 0.0), -float(row["rank"]))
        return spoken

    def search(
        table: str,
        terms: Sequence[KeywordTerm],
        tier: dict[int, _Found] | None = None,
        new_only: bool = False,
        plain_kind: PartKind = "bm25",
    ) -> None:
        tier = main if tier is None else tier
        usable = schema.has_trigram if table == "messages_fts_trigram" else bool(schema.fts_columns)
        plain: list[KeywordTerm] = []
        code: list[KeywordTerm] = []
        for term in terms:
            (code if term.code_joined else plain).append(term)
        kinds: tuple[tuple[list[KeywordTerm], PartKind], ...] = ((plain, plain_kind), (code, "code"))
        for group, kind in kinds:
            if not group:
                continue
            own_terms = tier is main and kind != "glued"
            match = " OR ".join(t.fts for t in group)
            rows = fts(table, match, group, own_terms, kind) if usable else None
            if rows is not None:
                add(tier, rows, kind, new_only)
            else:  # LIKE: what FTS cannot read
                add(tier, like([t.text for t in group]), "like", new_only, len(group))

    def search_every_word() -> bool:
        """Read only the messages holding every word, when enough conversations have one."""
        match = query.every_word()
        large = len(set(in_scope.values())) > policy.every_word_first_above
        if match is None or not schema.fts_columns or not large:
            return False
        add(main, fts("messages_fts", match, query.terms, True) or [], "bm25", False)
        if len(conversations()) >= want:
            return True
        main.clear()  # too few: the OR passes below, as if this had not been asked
        activity.clear()
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
                main[message_id].parts.append(("pairs", float(count)))
            if len(conversations()) < want:
                tiers.append({})
                add(tiers[-1], like(query.pairs), "like", True, len(query.pairs))
        elif query.pairs:
            add(main, like(query.pairs), "like", False, len(query.pairs))
        if leave_out and len(conversations()) < want:
            every = keyword_terms(plan).terms
            common = [t for t in every if t.table == "messages_fts" and t not in query.terms]
            if common:
                tiers.append({})
                search("messages_fts", common, tiers[-1], new_only=True)
        mixed = any(t.kind in ("gram", "pair") for t in query.terms)
        if (mixed or len(conversations()) < want) and schema.has_trigram and query.latin_words:
            glued = [KeywordTerm(word, "gram", word) for word in query.latin_words]
            search("messages_fts_trigram", glued, plain_kind="glued")
    except sqlite3.OperationalError as error:
        if not reader.stopped(error):
            raise
    credited = _credit_activity(reader, activity, in_scope, main) if activity else {}
    hits = tuple(found.hit(number) for number, tier in enumerate(tiers) for found in tier.values())
    return KeywordSignals(hits, "ranked", activity=MappingProxyType(credited))


@dataclass
class _Activity:
    """A row of what the agent did or saw while the passes read it: the row first seen, and each
    pass's bm25 in it (``activity``: words; ``activity_code``: an identifier as written)."""

    row: dict[str, Any]
    parts: dict[PartKind, float] = field(default_factory=dict)


def _credit_activity(
    reader: FullTextReader,
    activity: Mapping[int, _Activity],
    in_scope: Mapping[str, str],
    main: dict[int, _Found],
) -> dict[int, int]:
    """What the agent did or saw is evidence for its conversation (issue 30.1): a Hermes turn keeps
    the key written into a config in an assistant row's ``tool_calls`` and the error a test run
    printed in a ``tool`` row, where the flat export kept them in the assistant's text. Such a
    row is never a result (results are user/assistant messages, spec 19.4); what the passes found
    in it goes, as ``activity`` parts, to the user message that opened its turn
    (:meth:`FullTextReader.turn_openers`, which leaves out the plugin's own calls and results),
    whose result then carries the reply that followed. A turn's rows count once, by the best.
    Returns each credited opener's best row (what its result shows)."""
    try:
        openers = reader.turn_openers(activity, OWN_TOOLS)
    except sqlite3.Error as error:
        if not (isinstance(error, sqlite3.OperationalError) and reader.stopped(error)):
            logger.debug("reading the turns of tool activity failed", exc_info=True)
        return {}
    best: dict[int, tuple[float, int, _Activity]] = {}
    for row_id, seen in activity.items():
        if row_id not in openers or seen.row["session_id"] not in in_scope:
            continue
        opener = openers[row_id][0]
        total = sum(seen.parts.values())
        if opener not in best or total > best[opener][0]:
            best[opener] = (total, row_id, seen)
    for opener, (_, _, seen) in best.items():
        session_id = seen.row["session_id"]
        shown = {
            "message_id": opener,
            "session_id": session_id,
            "timestamp": openers[seen.row["message_id"]][1],
        }
        found = main.setdefault(opener, _Found(shown, in_scope[session_id]))
        found.parts.extend(seen.parts.items())
    return {opener: row_id for opener, (_, row_id, _) in best.items()}


def boolean_hits(
    reader: FullTextReader,
    plan: QueryPlan,
    in_scope: Mapping[str, str],
    policy: RankingPolicy,
    *,
    only_best: bool = False,
) -> KeywordSignals:
    """Messages matching the user's own ``AND``/``OR``/``NOT`` query as FTS5 reads it, best bm25
    first (the ranking keeps that order).

    Latin terms search ``messages_fts``, then, when too few conversations match, the trigram table
    (words glued to CJK text); CJK terms use the trigram table when every term has three or more
    characters, else LIKE, with the operators kept (else "归属 NOT 项目" would mean AND). An FTS
    error of any kind falls back to LIKE. A match only in a row's tool-call columns is no match: the
    user's own operators read messages only.
    ``only_best``: only the best message of the first ``gather_conversations`` conversations
    matters, so FTS reading stops there.
    """
    want = policy.gather_conversations
    hits: list[KeywordHit] = []
    seen: set[int] = set()
    long_terms = all(len(t.text) >= 3 for t in plan.terms)
    expression = plan.like_expression()
    enough_groups = want if only_best else None
    checked_terms = [as_written(t) for t in plan.terms]

    def like() -> list[dict[str, Any]]:
        return reader.like_messages(
            plan.needles(), list(in_scope), True, policy.scan_limit, expression=expression
        )

    def fts(table: str) -> list[dict[str, Any]]:
        try:
            rows = reader.fts_messages(
                table, plan.match_all(), in_scope, policy.scan_limit, enough_groups=enough_groups
            )
            return [row for row in _checked(reader, rows, checked_terms) if not row.get("activity")]
        except sqlite3.OperationalError as error:
            if reader.stopped(error):
                raise
            logger.debug("FTS query %r failed (%s); using LIKE", plan.match_all(), error)
            return like()

    def add(rows: Iterable[dict[str, Any]]) -> None:
        for row in rows:
            if row["message_id"] not in seen:
                seen.add(row["message_id"])
                found = _Found(row, in_scope[row["session_id"]])
                if "rank" in row:  # LIKE rows carry no bm25
                    found.parts.append(("bm25", -float(row["rank"])))
                hits.append(found.hit(0))

    schema = reader.schema
    try:  # at the deadline: what was read so far
        if plan.has_cjk or not schema.fts_columns:
            add(fts("messages_fts_trigram") if schema.has_trigram and long_terms else like())
        else:
            add(fts("messages_fts"))
            enough = len({hit.message.conversation for hit in hits}) >= want
            if not enough and schema.has_trigram and long_terms:
                add(fts("messages_fts_trigram"))
    except sqlite3.OperationalError as error:
        if not reader.stopped(error):
            raise
    return KeywordSignals(tuple(hits), "boolean")
