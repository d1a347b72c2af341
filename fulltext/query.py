"""The query as the keyword engine reads it: terms and operators (:func:`plan_query`), English
stems searched as prefixes, and calendar dates named in it. Pure: no I/O.

Hermes's ``_sanitize_fts5_query`` lets ``@ / # , ; ! ? ' %`` through to FTS5 as syntax errors;
here every token becomes a quoted phrase, so no input can break ``MATCH`` (docs/design.md,
"Where this differs from the spec").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from ..text import CJK_CHARS, without_controls

MAX_QUERY_CHARS = 2048
MAX_TERMS = 32

_CJK = re.compile(f"[{CJK_CHARS}]")
_WORD_CHAR = re.compile(r"\w")
_OPERATORS = ("AND", "OR", "NOT")
# Words that carry no topic; dropped only when a natural-language query is relaxed to OR,
# where they would otherwise match nearly every message.
_STOPWORDS = frozenset(
    """a about above after again all am an and any are as at be been before being below between
    both but by can could did do does doing done down during each few for from further had has
    have having he her here hers him his how i if in into is it its itself just me more most my
    no nor not now of off on once only or other our ours out over own same she should so some
    such than that the their theirs them then there these they this those through to too under
    until up very was we were what when where which while who whom why will with would you your
    yours yourself let lets us we've i'm it's don't didn't""".split()
)


# --------------------------------------------------------------------------- query planning


def bare_word(text: str) -> str:
    """A term as a word: surrounding punctuation and a possessive 's dropped ("Joanna's?" -> joanna)."""
    word = text.strip(".,;:!?()[]{}<>\"'`").casefold()
    for tail in ("'s", "\u2019s"):
        if word.endswith(tail):
            word = word[: -len(tail)]
    return word


_VOWELS = frozenset("aeiou")


def light_stem(word: str) -> str:
    """English inflection off a lowercase ASCII word, as a prefix to search (Porter's step 1, cut).

    painted / painting / paints -> paint, running -> run, classes -> class, studies -> stud. The
    stem is searched as a prefix, so it need not be a word; words of 3 letters or fewer, and
    anything that is not plain ASCII letters, are left alone.
    """
    w = word
    if len(w) <= 3 or not (w.isascii() and w.isalpha()):
        return w
    if w.endswith("sses"):
        w = w[:-2]
    elif w.endswith(("ies", "ied")):
        w = w[:-3] + "i"
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]
    for suffix in ("ing", "ed"):
        stem = w[: -len(suffix)]
        if w.endswith(suffix) and len(stem) >= 3 and _VOWELS & set(stem):
            w = stem
            if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "lsz":
                w = w[:-1]
            break
    if w.endswith("i") and len(w) > 3:
        w = w[:-1]
    return w


@dataclass(frozen=True)
class Term:
    text: str
    prefix: bool = False

    @property
    def fts(self) -> str:
        """One FTS5 phrase: quoting makes every character literal, so nothing can break MATCH."""
        return '"' + self.text.replace('"', '""') + '"' + ("*" if self.prefix else "")

    @property
    def has_cjk(self) -> bool:
        return bool(_CJK.search(self.text))


@dataclass(frozen=True)
class QueryPlan:
    """The query as FTS5 can take it: terms (words or user phrases) and the user's operators."""

    items: tuple[Term | str, ...]
    terms: tuple[Term, ...]

    @property
    def has_operators(self) -> bool:
        return any(isinstance(item, str) for item in self.items)

    @property
    def has_cjk(self) -> bool:
        return any(term.has_cjk for term in self.terms)

    def match_all(self) -> str:
        return " ".join(item.fts if isinstance(item, Term) else item for item in self.items)

    def topical(self) -> list[Term]:
        """The terms that carry a topic: stopwords dropped, unless nothing else is left."""
        return [t for t in self.terms if t.text.casefold() not in _STOPWORDS] or list(self.terms)

    def match_any(self) -> str:
        return " OR ".join(t.fts for t in self.topical())

    @staticmethod
    def word_match(term: Term) -> str:
        """One topical term as the word-tokenised table is searched: a plain English word as its
        stem's prefix (``"paint"*`` finds painted, painting and paints, which unicode61, with no
        stemmer in Hermes's table, keeps apart); identifiers, paths, numbers, user phrases and
        prefixes exact."""
        stem = stem_prefix(term)
        return Term(stem, prefix=True).fts if stem else term.fts

    def match_words(self, leave_out: frozenset[str] = frozenset()) -> str:
        """:meth:`match_any` for the word-tokenised table (:meth:`word_match` per term), without the
        topical words in ``leave_out`` (bare words, :func:`common_words`)."""
        parts = [self.word_match(t) for t in self.topical() if bare_word(t.text) not in leave_out]
        return " OR ".join(dict.fromkeys(parts))

    def needles(self) -> list[str]:
        return [t.text for t in self.terms]

    def like_expression(self) -> list[tuple[str, str]]:
        """The query for :meth:`reader.FullTextReader.like_messages` when it carries the user's operators."""
        return [("term", i.text) if isinstance(i, Term) else ("op", i) for i in self.items]


def clean_query(query: str) -> str:
    """The query without control characters, its length bounded like Hermes does."""
    return without_controls(query[:MAX_QUERY_CHARS])


def _split_phrases(text: str) -> list[tuple[str, bool]]:
    """(chunk, is_phrase): balanced "..." stay phrases; an unpaired quote is a space."""
    pieces: list[tuple[str, bool]] = []
    rest = text
    while rest:
        start = rest.find('"')
        end = rest.find('"', start + 1) if start >= 0 else -1
        if start < 0 or end < 0:
            pieces.append((rest.replace('"', " "), False))
            break
        pieces.append((rest[:start], False))
        pieces.append((rest[start + 1 : end], True))
        rest = rest[end + 1 :]
    return pieces


def stem_prefix(term: Term) -> str | None:
    """The stem a plain English word is searched by, as a prefix, in the word-tokenised table
    (:meth:`QueryPlan.word_match`); None for identifiers, paths, numbers, phrases and prefixes."""
    word = bare_word(term.text)
    if not term.prefix and " " not in term.text and len(word) > 3 and word.isascii() and word.isalpha():
        return light_stem(word)
    return None


def plan_query(query: str) -> QueryPlan:
    """Hermes's ``_sanitize_fts5_query`` rules, made total: no input reaches FTS5 unquoted.

    Balanced phrases are kept, ``AND``/``OR``/``NOT`` between terms stay operators, a trailing
    ``*`` stays a prefix search, every other token becomes a quoted phrase (so ``@ / # , ; ! ?
    ' %`` and friends are literal), and tokens with no letter or digit are dropped.
    """
    items: list[Term | str] = []
    for chunk, is_phrase in _split_phrases(clean_query(query)):
        if is_phrase:
            if _WORD_CHAR.search(chunk):
                items.append(Term(" ".join(chunk.split())))
            continue
        for token in chunk.split():
            if token in _OPERATORS:
                items.append(token)
                continue
            core = token.strip("*")
            if _WORD_CHAR.search(core):
                items.append(Term(core, prefix=token.endswith("*")))
    # Operators only between two terms: drop leading/trailing ones and collapse runs.
    cleaned: list[Term | str] = []
    for item in items:
        if isinstance(item, str):
            if cleaned and isinstance(cleaned[-1], str):
                cleaned[-1] = item
            elif cleaned:
                cleaned.append(item)
        elif len([i for i in cleaned if isinstance(i, Term)]) < MAX_TERMS:
            cleaned.append(item)
    while cleaned and isinstance(cleaned[-1], str):
        cleaned.pop()
    return QueryPlan(items=tuple(cleaned), terms=tuple(i for i in cleaned if isinstance(i, Term)))


def without_words(query: str, words: frozenset[str]) -> str:
    """The query's text without the whitespace-separated tokens whose bare word is in ``words``
    (what the semantic side embeds when :func:`common_words` found some)."""
    if not words:
        return query
    return " ".join(token for token in query.split() if bare_word(token) not in words)


# --------------------------------------------------------------------------- dates in the query

_MONTH_NAMES = "january february march april may june july august september october november december".split()
_MONTH = (
    r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
)
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d{2})"
_DAY_MONTH_YEAR = re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.IGNORECASE)
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.IGNORECASE)
_ISO_DAY = re.compile(r"\b((?:19|20)\d{2})-(\d{2})-(\d{2})\b")
_MONTH_YEAR = re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.IGNORECASE)
DAY_SLACK_SECONDS = 86400.0  # a day named in the query also matches the days either side (time zones)


def _month_number(name: str) -> int:
    return next(i for i, month in enumerate(_MONTH_NAMES, start=1) if month.startswith(name.lower()[:3]))


def date_windows(query: str) -> list[tuple[float, float]]:
    """Calendar dates named in the query, as (start, end) timestamps in local time.

    "9 November, 2022", "November 9th 2022" and "2022-11-09" are that day (± one day); "November
    2022" is the month. A date needs its year: "may 3" alone is too often not a date.
    """
    text = clean_query(query)
    days: list[datetime] = []
    spans: list[tuple[int, int]] = []
    for pattern, order in ((_DAY_MONTH_YEAR, "dmy"), (_MONTH_DAY_YEAR, "mdy"), (_ISO_DAY, "iso")):
        for match in pattern.finditer(text):
            a, b, c = match.groups()
            try:
                if order == "dmy":
                    day = datetime(int(c), _month_number(b), int(a))
                elif order == "mdy":
                    day = datetime(int(c), _month_number(a), int(b))
                else:
                    day = datetime(int(a), int(b), int(c))
            except ValueError:
                continue
            days.append(day)
            spans.append(match.span())
    windows = [(d.timestamp() - DAY_SLACK_SECONDS, d.timestamp() + 2 * DAY_SLACK_SECONDS) for d in days]
    for match in _MONTH_YEAR.finditer(text):
        if any(start <= match.start() < end for start, end in spans):
            continue
        month, year = _month_number(match.group(1)), int(match.group(2))
        first = datetime(year, month, 1)
        following = datetime(year + (month == 12), month % 12 + 1, 1)
        windows.append((first.timestamp(), following.timestamp()))
    return windows
