"""The keyword engine beside :mod:`search`: the query as FTS5 takes it (``query.py``), reads of
Hermes's full-text tables through the scope's message ids (``reader.py``), and the ranking with
the passes that gather each message's signals, with common words and the sole phrase holder
(``retrieval.py``); ``ranking`` weighs them."""

from __future__ import annotations

from .query import (
    QueryPlan,
    Term,
    clean_query,
    date_windows,
    keyword_terms,
    named_things,
    plan_query,
    without_words,
)
from .reader import FullTextReader, ScopeIdRegisters
from .retrieval import absent_names, common_words, keyword_signals, recall_citations, sole_holder

__all__ = [
    "FullTextReader",
    "QueryPlan",
    "ScopeIdRegisters",
    "Term",
    "absent_names",
    "clean_query",
    "common_words",
    "date_windows",
    "keyword_signals",
    "keyword_terms",
    "named_things",
    "plan_query",
    "recall_citations",
    "sole_holder",
    "without_words",
]
