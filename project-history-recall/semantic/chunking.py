"""How a message becomes the texts a model embeds: windows of estimated tokens, framed by the end
of the conversation before them (spec §4.4's chunk_size/chunk_overlap). Pure: no I/O.

The token estimate needs no tokenizer and holds for English and CJK alike: one token per CJK
character, one per four other characters of a word, rounded up.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..text import CJK_CHARS, redact_secrets

#: Bumped when text.redact changes what it replaces (remote providers then re-check every message).
REDACTION_VERSION = 3  # 2: gitleaks' rules; 3: JWK private members, hex seeds (issue 31)

_CJK_CHAR = re.compile(f"[{CJK_CHARS}]")
# A unit is one CJK character, or a run of other non-space characters with its trailing space.
_UNIT = re.compile(f"[{CJK_CHARS}]\\s*|[^\\s{CJK_CHARS}]+\\s*")
# Up to four characters of a run of non-space, non-CJK text: a run of n characters holds
# ceil(n / 4) of them, which is its estimated tokens (counted in C, see estimate_tokens).
_QUAD = re.compile(f"[^\\s{CJK_CHARS}]{{1,4}}")


def _unit_tokens(unit: str) -> int:
    """Tokens of one unit: a CJK character is about one token, other text about four characters."""
    core = unit.rstrip()
    if _CJK_CHAR.match(core):
        return 1
    return max(1, math.ceil(len(core) / 4))


def chunk_text(text: str, chunk_size: int, overlap: int) -> list[str]:
    """Windows of at most ``chunk_size`` estimated tokens, neighbours sharing ``overlap``.

    The estimate needs no tokenizer and holds for English and CJK alike (docs/benchmarks.md).
    """
    return [chunk for chunk, _ in chunks_with_tokens(text, chunk_size, overlap)]


def chunks_with_tokens(text: str, chunk_size: int, overlap: int) -> list[tuple[str, int | None]]:
    """:func:`chunk_text` with each chunk's estimated tokens (None where the text was so short
    that nobody counted: a unit costs at most its length)."""
    text = text.strip()
    if not text:
        return []
    if len(text) <= chunk_size:
        return [(text, None)]
    tokens = estimate_tokens(text)
    if tokens <= chunk_size:
        return [(text, tokens)]
    units = _UNIT.findall(text)
    cjk = _CJK_CHAR.match
    costs = [1 if cjk(u) else (len(u.rstrip()) + 3) // 4 for u in units]  # = _unit_tokens, inlined
    chunks: list[tuple[str, int | None]] = []
    start = 0
    while start < len(units):
        end, used = start, 0
        while end < len(units) and (used + costs[end] <= chunk_size or end == start):
            used += costs[end]
            end += 1
        chunks.append(("".join(units[start:end]).strip(), used))
        if end >= len(units):
            break
        back, shared = end, 0
        while back > start + 1 and shared + costs[back - 1] <= overlap:
            back -= 1
            shared += costs[back]
        start = back
    return chunks


# --------------------------------------------------------------------------- what is embedded

# A fenced block (``` or ~~~, closed by the same fence or the end of the text).
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[^\n]*\n.*?(?:^[ \t]*\1[ \t]*$|\Z)", re.M | re.S)
# A run of 32+ base64 / hex / URL-safe characters holding a digit: keys, hashes, encoded blobs.
_BLOB = re.compile(r"(?<![\w/+=-])(?=[A-Za-z0-9+/=_-]*\d)[A-Za-z0-9+/=_-]{32,}(?![\w/+=-])")
#: A line is prose when letters and spaces are at least this share of it (code, logs, paths,
#: tables of numbers fall below it), and a line of 40+ characters also needs a space.
PROSE_LETTER_SHARE = 0.75
_CJK_ANY = re.compile(f"[{CJK_CHARS}]")


def _prose_line(line: str) -> bool:
    core = line.strip()
    if not core or _CJK_ANY.search(core):
        return True
    if len(core) >= 40 and " " not in core:
        return False  # a path, a URL, a minified line
    letters = sum(1 for c in core if c.isalpha() or c == " ")
    return letters >= PROSE_LETTER_SHARE * len(core)


def prose(text: str) -> str:
    """The prose of a message: without fenced code blocks, blobs, and lines that are mostly not
    words (code, logs, stack traces, paths). A message with no prose left keeps nothing."""
    text = _FENCE.sub("\n", text)
    text = _BLOB.sub(" ", text)
    return "\n".join(line for line in text.splitlines() if _prose_line(line)).strip()


def head(text: str, budget_tokens: int) -> str:
    """The start of ``text``, at most ``budget_tokens`` estimated tokens (whole units)."""
    if budget_tokens <= 0 or len(text) <= budget_tokens:
        return text
    units = _UNIT.findall(text[: 8 * budget_tokens + 8])
    cjk = _CJK_CHAR.match
    used, end = 0, 0
    for unit in units:
        used += 1 if cjk(unit) else (len(unit.rstrip()) + 3) // 4
        if used > budget_tokens:
            break
        end += 1
    return "".join(units[:end]).strip()


def embeddable(text: str, framing: Any) -> str:
    """What of a message is embedded at all: the message as :meth:`Framing.message` gives it
    (redacted whole for a remote model), all of it or its prose (``embed_text``)."""
    framing = Framing.of(framing)
    text = framing.message(text)
    return prose(text) if framing.embed_text == "prose" else text.strip()


def message_chunks(text: str, framing: Any) -> list[tuple[str, int | None]]:
    """A message's chunks as the index embeds them: its embeddable text, cut to
    ``message_tokens`` from its start, in windows of ``chunk_size`` (with their token estimates)."""
    framing = Framing.of(framing)
    body = head(embeddable(text, framing), framing.message_tokens)
    return chunks_with_tokens(body, framing.chunk_size, framing.chunk_overlap)


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def estimate_tokens(text: str) -> int:
    """The plugin's token estimate of a text: the sum of :func:`_unit_tokens` over its units."""
    return len(_CJK_CHAR.findall(text)) + len(_QUAD.findall(text))


def _fitting_tail(units: Sequence[str], budget_tokens: int) -> tuple[int, bool]:
    """Where the longest run of ``units`` ending at the last one and within the budget starts, and
    whether the budget cut it (False: every unit fits)."""
    cjk = _CJK_CHAR.match
    used, first = 0, len(units)
    while first > 0:
        unit = units[first - 1]
        used += 1 if cjk(unit) else (len(unit.rstrip()) + 3) // 4
        if used > budget_tokens:
            return first, True
        first -= 1
    return 0, False


def context_tail(previous: Sequence[str], budget_tokens: int) -> str:
    """The end of the preceding messages, at most ``budget_tokens`` estimated tokens."""
    if budget_tokens <= 0:
        return ""
    joined = " ".join(" ".join(text.split()) for text in previous)
    if len(joined) <= budget_tokens:  # all of it fits (a unit costs at most its length)
        return joined.strip()
    # Once spaces are single, a unit is at most 5 characters per token: what fits lies within the
    # last 5 * budget characters. Read only those (the first unit there may be cut, so it is
    # never kept); should everything there fit, read it all.
    window = 5 * budget_tokens + 8
    partial = len(joined) > window
    units = _UNIT.findall(joined[-window:])[1:] if partial else _UNIT.findall(joined)
    first, cut = _fitting_tail(units, budget_tokens)
    if partial and not cut:
        units = _UNIT.findall(joined)
        first, _ = _fitting_tail(units, budget_tokens)
    return "".join(units[first:]).strip()


@dataclass(frozen=True)
class Framing:
    """How messages become the texts a model embeds: chunk size and overlap, and how much of the
    preceding conversation frames each chunk.

    For the ``local`` provider the model's token limit is known (at most
    :data:`LOCAL_INPUT_TOKENS`), and nothing past it is ever read, so chunks are cut to
    :data:`MODEL_TOKEN_SHARE` of it (estimated tokens: code runs about 1.4 word-pieces per
    estimated token, so a chunk this size still fits) and a chunk's context only takes what is
    left of that budget. Remote models keep the configured sizes.

    For a model that is not in-process (``openai``, ``voyage``), every message is redacted whole
    (:func:`text.redact_secrets`) before it is cut or frames another chunk (``redact``): a key
    spanning two chunks is still one span, and no message reaches the provider as context unredacted.
    The in-process model reads messages as they are: nothing leaves the machine.
    """

    chunk_size: int
    chunk_overlap: int
    context_messages: int
    context_tokens: int  # at most this much preceding text (estimated tokens)
    input_tokens: int = 0  # context + chunk budget in estimated tokens; 0: no model limit known
    embed_text: str = "all"  # "all" or "prose" (:func:`prose`)
    message_tokens: int = 0  # estimated tokens embedded per message, from its start; 0: all
    redact: bool = False  # messages are redacted before they are cut (a remote provider)

    @classmethod
    def of(cls, embedding: Any, embedder: Any = None) -> Framing:
        if isinstance(embedding, Framing):
            return embedding
        chunk_size, overlap = embedding.chunk_size, embedding.chunk_overlap
        limit = int(getattr(embedder, "max_input_tokens", 0) or 0)
        if embedder is not None and embedding.provider == "local":
            limit = min(limit or LOCAL_INPUT_TOKENS, LOCAL_INPUT_TOKENS)
        budget = int(limit * MODEL_TOKEN_SHARE) if limit else 0
        if budget and chunk_size > budget:
            chunk_size = budget
            overlap = min(overlap, chunk_size // 8)
        return cls(
            chunk_size=chunk_size,
            chunk_overlap=overlap,
            context_messages=embedding.context_messages,
            context_tokens=embedding.chunk_size // 4,
            input_tokens=budget,
            embed_text=getattr(embedding, "embed_text", "all"),
            message_tokens=getattr(embedding, "message_tokens", 0),
            redact=embedding.provider != "local",
        )

    @property
    def key(self) -> str:
        """The framing as text: part of :func:`vectors_key`."""
        base = f"chunk={self.chunk_size}/{self.chunk_overlap}|context={self.context_messages}"
        if self.context_tokens != self.chunk_size // 4:
            base += f"/{self.context_tokens}"
        base += f"|input={self.input_tokens}" if self.input_tokens else ""
        base += f"|text={self.embed_text}" if self.embed_text != "all" else ""
        base += f"|cap={self.message_tokens}" if self.message_tokens else ""
        # A change of the redaction rules changes what is sent: the next check reads every message.
        return base + (f"|redact={REDACTION_VERSION}" if self.redact else "")

    def message(self, text: str) -> str:
        """A message's text as it is cut into chunks: redacted whole for a remote model."""
        return redact_secrets(text) if self.redact else text


#: Word-pieces a local model is given per text, context included, whatever more it could read:
#: MiniLM's own limit. multilingual-e5 reads 512, but a text twice as long costs it more than
#: twice the time (attention), and beyond a 128-token message the preceding one adds no recall
#: (docs/benchmarks.md, "Indexing a real history"): so e5 frames texts as MiniLM does.
LOCAL_INPUT_TOKENS = 256
#: Share of a local model's token limit (word-pieces) a chunk and its context may take, in the
#: plugin's estimated tokens: code runs more word-pieces per estimated token than prose, and at
#: this share nine chunks of code in ten are read to their end (the densest lose their last lines,
#: never their start; docs/benchmarks.md, "Code choices").
MODEL_TOKEN_SHARE = 0.64


def embedded_text(chunk: str, previous: Sequence[str], framing: Any, tokens: int | None = None) -> str:
    """What the model sees for a chunk: the conversation just before it, then the chunk.

    A turn is often a short reply ("Yes, let's do that") whose topic lives in the turn before
    it; one preceding message lifts semantic recall markedly (docs/benchmarks.md).
    ``tokens`` is the chunk's estimate when the caller has it already.
    """
    if not previous:
        return chunk
    framing = Framing.of(framing)
    budget = framing.context_tokens
    if framing.input_tokens and len(chunk) + budget > framing.input_tokens:
        tokens = estimate_tokens(chunk) if tokens is None else tokens
        budget = min(budget, framing.input_tokens - tokens)
    context = context_tail(previous, budget)
    return f"{context}\n{chunk}" if context else chunk


def vectors_key(fingerprint: str, framing: Any) -> str:
    """Everything that shapes the stored vectors: the model, and how text is cut and framed (the
    ``recipe`` column of embeddings.db's watermarks)."""
    return f"{fingerprint}|{Framing.of(framing).key}"
