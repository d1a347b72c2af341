"""What retrieval hands the ranking: typed records, read once, no database behind them (named
tuples for the many per search, which are cheap to make; dataclasses for the few).

Keyword retrieval (``fulltext``) reports each message it found with what each of its passes
contributed, raw (``parts``); the ranking weighs them under the policy. The semantic side
reports each message's best chunk cosine and the scope's background (its mean cosine and how many
chunks it averages); the ranking turns them into lift. The question's features are what the plan
and the scope say about it (dates, common words, an error quoted, identifiers written as code).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, NamedTuple

#: What one keyword pass added to a message: ``bm25`` (minus FTS5's rank, scaled by the share of
#: the match in the message's text), ``code`` (the same for an identifier written as code),
#: ``glued`` (the same for the question's Latin words read as substrings of the trigram table, a
#: pass that fills the list when few conversations match), ``like`` (how many terms a LIKE scan
#: found), ``pairs`` (two-character CJK words in its text), ``activity`` and ``activity_code``
#: (``bm25`` and ``code`` of what the agent did or saw in the turn the message opened: the best of
#: its tool calls and tool output).
PartKind = Literal["bm25", "code", "glued", "like", "pairs", "activity", "activity_code"]


class Message(NamedTuple):
    """A message as a result shows it."""

    message_id: int
    session_id: str
    conversation: str  # the conversation it is part of (a compression chain's first session)
    timestamp: float | None = None
    content: str | None = None  # None: not read yet (the keyword ranking reads no text)


class KeywordHit(NamedTuple):
    message: Message
    #: The passes' contributions, in the order retrieval read them (sums keep that order).
    parts: tuple[tuple[PartKind, float], ...] = ()
    #: 0: the question's own terms; 1, 2...: the fallback passes that only add conversations.
    tier: int = 0
    #: Of a LIKE match, the share of the terms it holds (the relevance shown when nothing else can
    #: judge it).
    like_share: float | None = None


class TitleHit(NamedTuple):
    """A conversation whose session's title (Hermes's one-line summary, ``sessions.title``) holds
    terms of the question. ``share``: of the question's ranking terms (those not in nearly every
    title of the scope), the share the title holds. ``message``: the message shown when nothing
    else of the conversation matched (its session's first user message)."""

    conversation: str
    share: float
    message: Message | None = None


@dataclass(frozen=True)
class KeywordSignals:
    """``ranked``: a question, ranked by the policy's conversation scores. ``boolean``: the user's
    own AND/OR/NOT, kept in FTS5's order (a hit's evidence: its own bm25, none for LIKE).
    ``as_written``: nothing but punctuation and single CJK characters, found by LIKE, kept in
    that order (evidence 0)."""

    hits: tuple[KeywordHit, ...] = ()
    kind: Literal["ranked", "boolean", "as_written"] = "ranked"
    #: Conversations whose title holds the question's terms (a question's ``ranked`` kind only).
    titles: tuple[TitleHit, ...] = ()
    #: A turn's opening message -> the row of what the agent did or saw in that turn whose match
    #: it was credited with (its ``activity`` part): the result shows that row's matching words.
    activity: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))


class SemanticHit(NamedTuple):
    message: Message
    cosine: float  # of the message's best chunk
    chunk: int  # which chunk the model matched
    #: The scope's mean cosine for the query, and how many chunks it averages (the background).
    mean: float | None = None
    background: int = 0


@dataclass(frozen=True)
class Question:
    """What the ranking needs to know of the question."""

    mode: Literal["keyword", "semantic", "hybrid"]
    topical_terms: int  # what its keyword evidence is judged by
    has_cjk: bool = False  # the floor is calibrated on word-tokenised bm25: CJK questions skip it
    names_exactly: bool = False  # quotes an error or names an identifier written as code
    has_common_words: bool = False  # the ranking left words out that the question as asked has
    names_absent: bool = False  # it names things, and the scope mentions none of them


@dataclass(frozen=True)
class Signals:
    keyword: KeywordSignals = field(default_factory=KeywordSignals)
    semantic: tuple[SemanticHit, ...] = ()
    #: The one conversation holding every exact phrase of the question (None: none, several, or
    #: not asked); retrieval reads it in hybrid mode.
    sole_holder: str | None = None
    #: Recall chats among the candidates: conversation -> the conversations of the scope its own
    #: ``project_history_search`` answers link (second-hand: what they cite is the answer).
    cites: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))
