"""The keyword engine beside :mod:`search`: the query as FTS5 takes it (``query.py``), reads of
Hermes's full-text tables through the scope's message ids (``reader.py``), and the ranking with
its relaxed pass, neighbours and common words (``rank.py``)."""

from __future__ import annotations

from .query import QueryPlan, Term, clean_query, date_windows, keyword_terms, plan_query, without_words
from .rank import common_words, keyword_messages, sole_holder
from .reader import FullTextReader, ScopeIdRegisters

__all__ = [
    "FullTextReader",
    "QueryPlan",
    "ScopeIdRegisters",
    "Term",
    "clean_query",
    "common_words",
    "date_windows",
    "keyword_messages",
    "keyword_terms",
    "plan_query",
    "sole_holder",
    "without_words",
]
