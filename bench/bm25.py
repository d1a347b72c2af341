"""The anchor baseline for bench/devsessions.py: BM25 over whole sessions, words + CJK bigrams.

Each session of a project is one document (the text of all its user/assistant messages). Tokens
are lowercase words (``\\w+`` runs with the CJK characters taken out) plus the character bigrams
of every CJK run (a run of one character is that character). Standard Okapi BM25 (k1 1.2, b
0.75, idf ``ln(1 + (N - n + 0.5) / (n + 0.5))``), each query token counted once, ranking only
the sessions of the question's project. Pure Python, no Hermes: the number a retriever over
Hermes's tables has to beat (dataset README: any@1 0.486, any@5 0.808).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping

K1 = 1.2
B = 0.75
CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ebef"
_CJK_RUN = re.compile(f"[{CJK_CHARS}]+")
_WORD = re.compile(r"\w+")


def tokens(text: str) -> list[str]:
    """Lowercase non-CJK words, then the bigrams of each CJK run (a lone CJK character as itself)."""
    out = _WORD.findall(_CJK_RUN.sub(" ", text).lower())
    for run in _CJK_RUN.findall(text):
        out.extend([run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)])
    return out


class SessionBM25:
    """One project's sessions as BM25 documents."""

    def __init__(self, documents: Mapping[str, Iterable[str]]) -> None:
        """``documents``: session id -> its messages' texts."""
        self.tf = {sid: Counter(tokens("\n".join(texts))) for sid, texts in documents.items()}
        self.length = {sid: sum(tf.values()) for sid, tf in self.tf.items()}
        self.avg = sum(self.length.values()) / max(len(self.tf), 1)
        self.df: Counter[str] = Counter(term for tf in self.tf.values() for term in tf)

    def idf(self, term: str) -> float:
        n = self.df.get(term, 0)
        return math.log(1 + (len(self.tf) - n + 0.5) / (n + 0.5))

    def scores(self, query: str) -> dict[str, float]:
        terms = [t for t in dict.fromkeys(tokens(query)) if t in self.df]
        out = {}
        for sid, tf in self.tf.items():
            norm = K1 * (1 - B + B * self.length[sid] / self.avg) if self.avg else K1
            s = sum(self.idf(t) * tf[t] * (K1 + 1) / (tf[t] + norm) for t in terms if t in tf)
            if s > 0:
                out[sid] = s
        return out

    def rank(self, query: str, limit: int = 10) -> list[str]:
        """Best sessions first (ties: session id), only sessions sharing a token with the query."""
        scored = self.scores(query)
        return sorted(scored, key=lambda sid: (-scored[sid], sid))[:limit]
