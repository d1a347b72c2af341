"""semantic/chunking.py: windows within ``chunk_size`` estimated tokens, neighbours sharing about
``chunk_overlap``, nothing lost or altered, CJK included; and the framing a chunk is embedded in."""

from __future__ import annotations

import math
import re

import pytest

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ebef"
_TOKEN = re.compile(f"[{_CJK}]|[^\\s{_CJK}]+")


def tokens(text: str) -> list[str]:
    """A CJK character is one unit; so is any other run of non-space characters."""
    return _TOKEN.findall(text)


def cost(token: str) -> int:
    """The README's estimate: a CJK character is about one token, other text about four chars."""
    return 1 if re.fullmatch(f"[{_CJK}]", token) else max(1, math.ceil(len(token) / 4))


def estimate(text: str) -> int:
    return sum(cost(t) for t in tokens(text))


def shared_tokens(before: list[str], after: list[str]) -> int:
    """How many units end ``before`` and also start ``after`` (the longest such run)."""
    for k in range(min(len(before), len(after)), 0, -1):
        if before[-k:] == after[:k]:
            return k
    return 0


@pytest.fixture
def chunk_text(phr):
    return phr.module("semantic.chunking").chunk_text


# --------------------------------------------------------------------------- chunk_text

ENGLISH = " ".join(f"w{n:03d}" for n in range(300))  # 300 distinct one-token words
MIXED_COST = " ".join(  # one-, three- and five-token words, all distinct
    (f"w{n:03d}", f"token{n:04d}", f"reconfiguration{n:04d}")[n % 3] for n in range(240)
)
CJK = "".join(chr(0x4E00 + n) for n in range(260))  # 260 distinct characters, no spaces
MIXED_SCRIPT = " ".join(f"修改{n}号服务端 config{n:03d} 已完成。" for n in range(60))

TEXTS = {"english": ENGLISH, "mixed_cost": MIXED_COST, "cjk": CJK, "mixed_script": MIXED_SCRIPT}
WINDOWS = [(32, 8), (50, 12), (24, 0)]


@pytest.mark.parametrize(("chunk_size", "overlap"), WINDOWS, ids=[f"{s}-{o}" for s, o in WINDOWS])
@pytest.mark.parametrize("kind", list(TEXTS))
def test_chunks_fit_overlap_and_rebuild_the_text(chunk_text, kind, chunk_size, overlap):
    text = TEXTS[kind]
    chunks = chunk_text(text, chunk_size, overlap)
    assert len(chunks) >= 3, chunks
    slack = max(cost(t) for t in tokens(text))  # "about": within one unit of the overlap

    rebuilt = list(tokens(chunks[0]))
    for number, chunk in enumerate(chunks):
        assert chunk in text, f"chunk {number} is not a verbatim part of the text: {chunk!r}"
        assert estimate(chunk) <= chunk_size, (number, estimate(chunk), chunk)
        if number == 0:
            continue
        before, after = tokens(chunks[number - 1]), tokens(chunk)
        k = shared_tokens(before, after)
        shared = sum(cost(t) for t in after[:k])
        assert abs(shared - overlap) <= slack, (
            f"chunks {number - 1} and {number} share {shared} tokens, not about {overlap}"
        )
        assert k < len(after), f"chunk {number} adds nothing after its overlap"
        rebuilt += after[k:]
    assert rebuilt == tokens(text), "the chunks minus their overlaps do not give the text back"


def test_short_and_empty_texts(chunk_text):
    assert chunk_text("  The invoice export writes CSV.  ", 32, 8) == ["The invoice export writes CSV."]
    assert chunk_text("短い文章です", 32, 8) == ["短い文章です"]
    assert chunk_text("   \n ", 32, 8) == []


# --------------------------------------------------------------------------- end to end
