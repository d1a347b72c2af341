"""The ranking, in one place: retrieval (``fulltext``, ``semantic``) gathers typed signals
(``signals.py``); :func:`rank` orders them (``rank.py``, pure) under one frozen
:class:`RankingPolicy` that holds every tuned constant and rule switch (``policy.py``)."""

from __future__ import annotations

from .policy import DEFAULT_POLICY, SEMANTIC_FLOORS, RankingPolicy
from .rank import Ranking, Result, Scored, evidence_as_asked, keyword_order, rank
from .signals import KeywordHit, KeywordSignals, Message, Question, SemanticHit, Signals, TitleHit

__all__ = [
    "DEFAULT_POLICY",
    "SEMANTIC_FLOORS",
    "KeywordHit",
    "KeywordSignals",
    "Message",
    "Question",
    "Ranking",
    "RankingPolicy",
    "Result",
    "Scored",
    "SemanticHit",
    "Signals",
    "TitleHit",
    "evidence_as_asked",
    "keyword_order",
    "rank",
]
