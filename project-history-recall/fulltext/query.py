"""The query as the keyword engine reads it: terms and operators (:func:`plan_query`), the terms a
natural-language question is ranked by (:func:`keyword_terms`: English words and their stems,
identifiers as phrases, CJK text as character n-grams), and calendar dates named in it. Pure: no
I/O.

Hermes's ``_sanitize_fts5_query`` lets ``@ / # , ; ! ? ' %`` through to FTS5 as syntax errors;
here every token becomes a quoted phrase, so no input can break ``MATCH`` (docs/design.md,
"Where this differs from the spec").
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass
from datetime import datetime

from ..text import CJK_CHARS, without_controls

MAX_QUERY_CHARS = 2048
MAX_TERMS = 32
# A question's ranking terms (:func:`keyword_terms`): a long CJK run yields one 3-gram per
# character; past this many the ranking learns nothing more and only reads longer.
MAX_KEYWORD_TERMS = 64

_CJK = re.compile(f"[{CJK_CHARS}]")
_CJK_RUN = re.compile(f"[{CJK_CHARS}]+")
# A word as Hermes's unicode61 tokenizer cuts one: letters and digits; "_" and every other
# punctuation separate.
_LATIN_WORD = re.compile(r"[^\W_]+")
_WORD_CHAR = re.compile(r"\w")
_OPERATORS = ("AND", "OR", "NOT")
#: What a prefix search drops before its `*`: `osprey:*` searches `osprey*`.
_TRAILING_PUNCTUATION = re.compile(r"\W+$")
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
    chars_cut: int = 0  # characters past MAX_QUERY_CHARS, not read
    terms_cut: int = 0  # terms past MAX_TERMS, not searched

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

    @staticmethod
    def word_match(term: Term) -> str:
        """One topical term as the word-tokenised table is searched: a plain English word as its
        stem's prefix (``"paint"*`` finds painted, painting and paints, which unicode61, with no
        stemmer in Hermes's table, keeps apart); identifiers, paths, numbers, user phrases and
        prefixes exact."""
        stem = stem_prefix(term)
        return Term(stem, prefix=True).fts if stem else term.fts

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
    ``*`` stays a prefix search (of the word before it: ``osprey:*`` is ``osprey*``), every other
    token becomes a quoted phrase (so ``@ / # , ; ! ? ' %`` and friends are literal), and tokens
    with no letter or digit are dropped.
    """
    items: list[Term | str] = []
    terms_cut = 0
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
            prefix = token.endswith("*")
            if prefix:  # `osprey:*` is the prefix `osprey*`: the tables index no punctuation
                core = _TRAILING_PUNCTUATION.sub("", core)
            if _WORD_CHAR.search(core):
                items.append(Term(core, prefix=prefix))
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
        else:
            terms_cut += 1
    while cleaned and isinstance(cleaned[-1], str):
        cleaned.pop()
    return QueryPlan(
        items=tuple(cleaned),
        terms=tuple(i for i in cleaned if isinstance(i, Term)),
        chars_cut=max(0, len(query) - MAX_QUERY_CHARS),
        terms_cut=terms_cut,
    )


def without_words(query: str, words: frozenset[str]) -> str:
    """The query's text without the whitespace-separated tokens whose bare word is in ``words``
    (what the semantic side embeds when :func:`common_words` found some)."""
    if not words:
        return query
    return " ".join(token for token in query.split() if bare_word(token) not in words)


# --------------------------------------------------------------------------- terms a question is ranked by

# Words of a Chinese question that frame it rather than name its topic: pronouns, question words,
# time and memory phrases ("上次我们是怎么…的？", "还记得…吗"), conjunctions, sentence-final
# particles. A CJK question is one run of characters, so they are cut out of the run before it is
# split into n-grams (longest first). General Chinese function words only, several characters long
# where possible: a single character is also part of content words (会 in 会话, 能 in 功能), and
# cutting it would break them; 是 and 把 are the exceptions (是否 但是 还是 就是 are cut
# before 是; 把 frames an object: 把部署脚本放在哪里). A question written as a sentence
# ("上次那个数据库迁移的报错是怎么解决的", "那个…的问题后来怎么样了") frames its topic with
# how it was solved and what became of it: 解决 问题 结果 结论 办法 具体 来着 name no
# topic. Words of the project's own subject are left to bm25's idf.
CJK_STOP_PHRASES = tuple(
    sorted(
        set(
            """上次 上回 之前 以前 当时 那次 这次 后来 最后 最近 刚才 时候
            我们 你们 他们 咱们 大家 什么 怎么 怎样 怎么样 如何 为什么 为何 哪个 哪些 哪里 哪儿
            多少 是否 有没有 是不是 能不能 可不可以 还记得 记得 记不记得 提醒 回忆 一下 讨论 讨论过
            聊过 说过 提到 提过 谈过 这个 那个 这些 那些 这里 那里 这样 那样 可以 应该 需要 已经
            然后 因为 所以 但是 如果 还是 就是 或者 以及 关于 对于 帮我 告诉 请问
            在哪 在哪里 在哪儿 放在哪 放在哪里 放在哪儿 具体 来着 解决 解决的 问题 结果 结论 办法
            吗 呢 吧 啊 呀 嘛 的 了 是 把""".split()
        ),
        key=lambda phrase: (-len(phrase), phrase),
    )
)
#: CJK n-grams searched in ``messages_fts_trigram``, whose terms need three characters.
GRAM = 3


def without_cjk_stop_phrases(text: str) -> str:
    """``text`` with :data:`CJK_STOP_PHRASES` replaced by spaces, longest first."""
    if not _CJK.search(text):
        return text
    for phrase in CJK_STOP_PHRASES:
        text = text.replace(phrase, " ")
    return text


def cjk_grams(run: str, size: int = GRAM) -> list[str]:
    """Every window of ``size`` characters of a CJK run, in order, each once (none when shorter)."""
    return list(dict.fromkeys(run[i : i + size] for i in range(len(run) - size + 1)))


@dataclass(frozen=True)
class KeywordTerm:
    """One term a question is ranked by, and where it is searched.

    ``word``: an exact word (``messages_fts``); ``prefix``: a stem or the user's ``word*``
    (``messages_fts``); ``phrase``: words in sequence, an identifier's parts or the user's quoted
    words (``messages_fts``); ``gram``: three CJK characters (``messages_fts_trigram``);
    ``literal``: an identifier as written, its joining characters too (``messages_fts_trigram``,
    :func:`as_identifier_literal`); ``pair``: a two-character CJK word, which neither table can
    search (counted in the candidates' text, or found with LIKE when nothing else matched).
    ``source`` is the bare query word it comes from (what :func:`rank.common_words` names).
    """

    text: str
    kind: str
    source: str = ""

    @property
    def table(self) -> str | None:
        if self.kind in ("gram", "literal"):
            return "messages_fts_trigram"
        return None if self.kind == "pair" else "messages_fts"

    @property
    def fts(self) -> str:
        return Term(self.text, prefix=self.kind == "prefix").fts

    @property
    def code_joined(self) -> bool:
        """An identifier as written the way only code writes it: joined by ``_ \\ @ #`` or ``::``
        (``health_endpoint``, ``Foo::bar``), or a path (``src/app/page.tsx``, ``lib/db.ts``). Prose
        joins two words with a slash (``and/or``, ``min/max``) or a dot (``Next.js``, ``ASP.NET``);
        only these weigh more (``rank.LITERAL_WEIGHT``, ``search.Question.names_exactly``)."""
        if self.kind != "literal":
            return False
        text = self.text
        return _CODE_JOINER.search(text) is not None or (
            "/" in text and (text.count("/") >= 2 or "." in text)
        )

    def occurs_in(self, text: str) -> bool:
        """Would this term match ``text`` alone, as its table tokenizes it? (A word or stem
        against unicode61's words, a gram or pair as a case-insensitive substring.)"""
        folded = text.casefold()
        if self.kind in ("gram", "pair", "literal"):
            return self.text.casefold() in folded
        words = _LATIN_WORD.findall(folded)
        wanted = self.text.casefold().split()
        if self.kind == "prefix":
            return any(word.startswith(wanted[0]) for word in words) if wanted else False
        if len(wanted) == 1:
            return wanted[0] in words
        return any(words[i : i + len(wanted)] == wanted for i in range(len(words) - len(wanted) + 1))


@dataclass(frozen=True)
class KeywordQuery:
    """A natural-language question as the keyword ranking reads it: its terms, and the texts a
    snippet is centred on."""

    terms: tuple[KeywordTerm, ...]
    needles: tuple[str, ...]
    cut: int = 0  # terms past MAX_KEYWORD_TERMS, not searched

    def match(self, table: str) -> str:
        """The OR of this table's terms, as FTS5 takes it ('' when it has none)."""
        return " OR ".join(t.fts for t in self.terms if t.table == table)

    @property
    def pairs(self) -> list[str]:
        return [t.text for t in self.terms if t.kind == "pair"]

    def every_word(self) -> str | None:
        """The FTS5 query for messages holding every term (an identifier's phrase and its parts
        too): the OR ranking's terms ANDed. None unless every term is on ``messages_fts`` and there
        are two or more (one: the ranking is already that)."""
        terms = [t for t in self.terms if t.kind != "literal"]
        if len(terms) < 2 or any(t.table != "messages_fts" for t in terms):
            return None
        return " AND ".join(t.fts for t in terms)

    @property
    def latin_words(self) -> list[str]:
        """The question's Latin words of three characters or more, as written (for a substring
        search of words that unicode61 glued to CJK text: ``修改youer服务端``)."""
        return list(
            dict.fromkeys(t.source for t in self.terms if t.kind in ("word", "prefix") and len(t.source) >= 3)
        )


def as_written(term: Term) -> KeywordTerm:
    """A term of the user's boolean query as its table matches it (for checking a row's text):
    CJK as a substring, a prefix as one, other text as the phrase of its words."""
    if term.has_cjk:
        return KeywordTerm(term.text, "gram", term.text)
    if term.prefix:
        return KeywordTerm(term.text, "prefix", term.text)
    words = " ".join(_LATIN_WORD.findall(term.text.casefold()))
    return KeywordTerm(words, "phrase" if " " in words else "word", term.text)


# Characters that join an identifier's parts (``GEMINI_MODEL``, ``user_service.py``, ``a/b``,
# ``Foo::bar``, ``@scope/pkg``), and never prose's: not a hyphen (``C-side``) or an apostrophe
# (``can't``, ``l'historique``).
_JOINED = re.compile(r"[A-Za-z0-9](?:[_./\\@#]|::)+[A-Za-z0-9]")
_CODE_JOINER = re.compile(r"[_\\@#]|::")


def as_identifier_literal(chunk: str) -> str | None:
    """An identifier as written, for the trigram table (a substring index that keeps ``_`` and
    ``.``), or None for anything else. The word table reads ``GEMINI_MODEL`` as the phrase
    ``gemini model``, which prose ("the Gemini model") matches too; the characters between the
    parts tell the conversation that holds the key itself."""
    literal = chunk.casefold().strip(".,;:!?()[]{}<>\"'`")
    return literal if len(literal) >= 3 and _JOINED.search(literal) else None


def _latin_terms(chunk: str, leave_out: frozenset[str]) -> list[KeywordTerm]:
    """The terms of one whitespace-free piece of Latin text: its words (stopwords out, plain English
    words as their stem's prefix) and, for an identifier (``user_service.get``, ``ERR-42``), the
    phrase of its parts, and as written when characters such as ``_`` or ``.`` join them."""
    parts = _LATIN_WORD.findall(chunk.casefold())
    terms: list[KeywordTerm] = []
    if len(parts) >= 2:
        terms.append(KeywordTerm(" ".join(parts), "phrase", chunk.casefold()))
        literal = as_identifier_literal(chunk)
        if literal:
            terms.append(KeywordTerm(literal, "literal", chunk.casefold()))
    for part in parts:
        if part in _STOPWORDS or part in leave_out or (len(part) == 1 and not part.isdigit()):
            continue
        stem = light_stem(part) if len(part) > 3 and part.isascii() and part.isalpha() else None
        terms.append(KeywordTerm(stem, "prefix", part) if stem else KeywordTerm(part, "word", part))
    return terms


def _cjk_terms(text: str) -> tuple[list[KeywordTerm], list[str]]:
    """The grams and pairs of the CJK runs of ``text`` once its stop phrases are out, and the runs."""
    terms: list[KeywordTerm] = []
    runs = _CJK_RUN.findall(without_cjk_stop_phrases(text))
    for run in runs:
        if len(run) >= GRAM:
            terms.extend(KeywordTerm(gram, "gram", run) for gram in cjk_grams(run))
        elif len(run) == 2:
            terms.append(KeywordTerm(run, "pair", run))
    return terms, [run for run in runs if len(run) >= 2]


def keyword_terms(plan: QueryPlan, leave_out: frozenset[str] = frozenset()) -> KeywordQuery:
    """The terms a natural-language question (no operators) is ranked by, each searched on its own
    and the matches' bm25 added up (``rank.keyword_messages``).

    Every token of the plan is split as the tables tokenize text: Latin words by regex, so a word
    glued to CJK text (``把UserService的缓存``) or to punctuation is still a word; English
    stopwords out (unless nothing else is left) and plain words of four letters or more as their
    stem's prefix (:func:`light_stem`); an identifier also as the phrase of its parts and as
    written (:func:`as_identifier_literal`); CJK runs,
    once :data:`CJK_STOP_PHRASES` are out, as their 3-character windows (:func:`cjk_grams`), a
    2-character run as a pair; single CJK characters dropped. The user's quoted phrases and
    ``word*`` prefixes are kept as they are. ``leave_out``: bare words left out of the ranking
    (:func:`rank.common_words`).
    """
    terms: list[KeywordTerm] = []
    needles: list[str] = []
    for term in plan.terms:
        if term.prefix:
            terms.append(KeywordTerm(term.text, "prefix", term.text.casefold()))
            needles.append(term.text)
            continue
        if " " in term.text and not term.has_cjk:  # the user's quoted phrase
            terms.append(KeywordTerm(term.text, "phrase", term.text.casefold()))
            needles.append(term.text)
            continue
        word = bare_word(term.text)
        if word in _STOPWORDS:
            continue
        cjk, runs = _cjk_terms(word)
        terms.extend(cjk)
        needles.extend(runs)
        for chunk in _CJK_RUN.sub(" ", word).split():
            found = _latin_terms(chunk, leave_out)
            terms.extend(found)
            if found:
                needles.append(chunk)
    if not terms and not leave_out:  # only English stopwords: search them after all
        for term in plan.terms:
            for part in _LATIN_WORD.findall(_CJK_RUN.sub(" ", term.text.casefold())):
                terms.append(KeywordTerm(part, "word", part))
                needles.append(part)
    unique = tuple(dict.fromkeys(terms))
    return KeywordQuery(
        terms=unique[:MAX_KEYWORD_TERMS],
        needles=tuple(dict.fromkeys(needles)),
        cut=max(0, len(unique) - MAX_KEYWORD_TERMS),
    )


# --------------------------------------------------------------------------- errors in the query

# A quoted error, whatever the language around it (ASCII edges, so ``错误TS2353`` counts): an
# exception's name (``TypeError``, ``ReflectionTypeLoadException``), a compiler's code (TypeScript
# ``TS2353``, C# ``CS0246``, Rust ``E0382``), Node's ``ERR_MODULE_NOT_FOUND`` codes, a log line's
# ``error:``, ``fatal:`` (git) or ``panic:``, Python's ``Traceback``, Node's and webpack's
# ``Cannot find module`` / ``Module not found``; an errno name (``ENOENT``) when the platform's
# list has it (``errno.errorcode``).
_EDGE_BEFORE, _EDGE_AFTER = r"(?<![A-Za-z0-9_])", r"(?![A-Za-z0-9_])"
_ERROR_SIGNS = re.compile(
    rf"{_EDGE_BEFORE}(?:[A-Za-z]+(?:Error|Exception)|(?:TS|CS|E)\d{{4}}|ERR_[A-Z0-9_]+|Traceback){_EDGE_AFTER}"
    rf"|{_EDGE_BEFORE}(?i:error|fatal|panic):|(?i:cannot find module|module not found)"
)
_ERRNO_LIKE = re.compile(rf"{_EDGE_BEFORE}E[A-Z0-9]{{2,}}{_EDGE_AFTER}")
_ERRNO_NAMES = frozenset(errno.errorcode.values())


def quotes_error(text: str) -> bool:
    """Does the question quote an error (an exception, an error code, a log's ``error:``)?

    Such a question is named by its exact words: the error line is in the conversation that hit
    it, while conversations about other errors are near it in meaning. Hybrid search then keeps
    keyword's order (``search.keyword_order_first``; docs/benchmarks.md)."""
    if _ERROR_SIGNS.search(text):
        return True
    return any(name in _ERRNO_NAMES for name in _ERRNO_LIKE.findall(text))


# --------------------------------------------------------------------------- what the question names

_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
# A capitalised Latin word, possibly with inner dots, hyphens or digits (``Next.js``, ``CI``,
# ``Vite``, ``O'Brien``), and what ends a sentence before the next one starts.
# (Code points by number: Hermes's install scan counts a chain of \u escapes as obfuscation.)
_RIGHT_QUOTE = chr(0x2019)
_FULL_STOPS = "".join(map(chr, (0x3002, 0xFF1F, 0xFF01)))  # the ideographic full stop, ？ and ！
_NAME_TOKEN = re.compile(rf"[A-Z][\w.\-'{_RIGHT_QUOTE}]*")
_SENTENCE_END = re.compile(rf"[.?!{_FULL_STOPS}]$")


def named_things(query: str) -> tuple[str, ...]:
    """The proper names the question uses, bare (``Caroline's`` -> ``caroline``): capitalised
    Latin words that do not open a sentence, months, weekdays and stopwords aside.

    A question that names someone or something the project never mentions is about another
    project; its other words ("paint", "support group") then match conversations that are not
    about it (``RankingPolicy.absent_names_answer_nothing``). Where a sentence starts, a capital
    says nothing, so the first word of each is left out; so are the user's quoted phrases (a
    title or an error line is matched as a phrase already). Pure; no CJK (a Chinese question's
    names are not capitalised)."""
    names: list[str] = []
    opening = True
    for chunk, is_phrase in _split_phrases(clean_query(query)):
        if is_phrase:
            opening = False
            continue
        for token in chunk.split():
            starts = opening
            opening = bool(_SENTENCE_END.search(token))
            core = token.strip(".,;:!?()[]{}<>\"'`*")
            if starts or not _NAME_TOKEN.fullmatch(core) or _CJK.search(core):
                continue
            word = bare_word(core)
            if (
                word
                and word not in _STOPWORDS
                and not any(word.startswith(m[:3]) and m.startswith(word) for m in _MONTH_NAMES + _WEEKDAYS)
                and word not in names
            ):
                names.append(word)
    return tuple(names)


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


# --------------------------------------------------------------------------- an explicit time window

#: What a bad ``since`` / ``until`` is told to look like (the tool's error and the CLI's line).
TIME_BOUND_FORM = "use a date like 2026-11-20 or a span like 7d or 2w"
_PLAIN_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_SPAN = re.compile(r"(\d{1,4})([dw])", re.IGNORECASE)


class TimeBoundError(ValueError):
    """A ``since`` / ``until`` that is not a date, a datetime or a span; its text names which."""


def _time_bound(name: str, raw: object, now: float, day_end: bool) -> float | None:
    """One bound as a timestamp: a plain date is its day's start (``day_end``: the next day's start,
    so ``until`` includes the day), a datetime its instant (local time when it names no zone), a
    span (``7d``, ``2w``) that long before ``now``."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    if not isinstance(raw, str):
        raise TimeBoundError(f"{name}: must be a string ({TIME_BOUND_FORM})")
    text = raw.strip()
    span = _SPAN.fullmatch(text)
    if span:
        days = int(span.group(1)) * (7 if span.group(2).lower() == "w" else 1)
        return now - days * 86400.0
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise TimeBoundError(f"{name}: {text[:40]!r} is not a date or a span ({TIME_BOUND_FORM})") from None
    if _PLAIN_DATE.fullmatch(text) and day_end:
        return when.timestamp() + 86400.0
    return when.timestamp()


def time_window(since: object, until: object, now: float) -> tuple[float, float] | None:
    """The tool's ``since`` / ``until`` (issue 32) as one (start, end) window, end exclusive, or
    None when neither is given. Unlike :func:`date_windows`, which only promotes sessions of a date
    the query names, this window is a filter: nothing outside it is returned. Raises
    :class:`TimeBoundError` naming the bad bound."""
    start = _time_bound("since", since, now, day_end=False)
    end = _time_bound("until", until, now, day_end=True)
    if start is None and end is None:
        return None
    if start is not None and end is not None and start >= end:
        raise TimeBoundError(f"since: it is not before until ({TIME_BOUND_FORM})")
    return (start if start is not None else 0.0, end if end is not None else float("inf"))
