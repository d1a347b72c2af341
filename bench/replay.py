"""Ranking levers replayed on LoCoMo without the dispatcher: ``run_search``'s body, step by step.

    .venv/bin/python bench/replay.py --model minilm --verify bench/results/quality-minilm.json
    .venv/bin/python bench/replay.py --model e5 --variants base,no_common,sem_agg:0.3

Scope resolution, the index check and the query embedding do not change with a ranking lever, so
they are done once per process (each question's vector is embedded once, on the provider the
plugin uses); every variant then re-runs the keyword path (``fulltext``), ``hits_with_lift``
(``semantic.matrix``) and ``semantic._rows`` on the live databases, fusion, the clear-winner rule,
the relevance floor, the date promotion and ``best_per_session``, each of them the loaded plugin's
own function unless the variant replaces it (``VARIANTS`` below). ``--verify FILE`` compares the
``base`` variant with a ``quality.py --json`` run of the same code: every ranking of every mode and
every off-topic count must be equal, or the replay does not stand for the tool.

Figures: hybrid, keyword and semantic on all / tune / check, the off-topic mean and share of none
(each question asked in the next conversation's project at limit 3), and per variant the change in
questions against ``base`` (any@1/3/5/10, all@5/10).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import layout
import locomo
import metrics
import models_setup
import quality
import world

MODES = ("keyword", "semantic", "hybrid")
LIMIT = 10
OFFTOPIC_LIMIT = 3


@dataclass
class Hooks:
    """The steps of ``run_search`` a variant may replace (None: the plugin's own)."""

    keyword_messages: Callable | None = None  # (reader, plan, in_scope, want, **) as fulltext's
    semantic_rows: Callable | None = None  # (replay, matrix, vector, top_k, db) -> rows (before scope)
    fuse: Callable | None = None
    clear_winner: Callable | None = None
    has_evidence: Callable | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # embedding.* overrides (top_k, rrf_k, ...)
    patches: list[tuple[Any, str, Any]] = field(default_factory=list)  # (object, attribute, value) while run
    modes: tuple[str, ...] = MODES  # the modes the variant can change (others are copied from base)
    floor_union: bool = False
    no_as_asked: bool = False  # the floor judges only the ranking's rows (without the common words)
    no_common: bool | str = False  # common_words off: True / "keyword" / "semantic" side only


class Replay:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.conversations = locomo.load()
        self.questions = quality.select(self.conversations, args.split, 0)
        self._stack = models_setup.embedding_config(args)
        key, embedding = self._stack.__enter__()
        self.built = world.build_home(key, self.conversations)
        self.plugin = plugin = world.activate(self.built.home)
        self.settings = world.configure(plugin, embedding)
        quality.build_index(plugin, self.built, self.settings)
        # run_search's steps live in search (fusion, floor, shape), fulltext.query (the plan),
        # fulltext.rank (keyword ranking, common words), semantic.matrix (top-k) and semantic (rows).
        self.search, self.semantic = plugin.search, plugin.semantic
        self.query, self.rank = plugin.fulltext.query, plugin.fulltext.rank
        self.matrix_math = layout.matrix_math(plugin)
        self.config_schema = world.module("config_schema")
        env = layout.env(plugin)
        self.embedder = layout.embedder(plugin, self.settings.embedding, env.api_key())
        self.db = layout.open_db(plugin, env)
        project_map = layout.project_map(plugin, self.db)
        self.scopes = {c: project_map.resolve_scope(f, "") for c, f in self.built.fresh.items()}
        with layout.index_store(plugin).IndexStore.open_readonly(env.index_path) as store:
            self.matrices = {
                c: layout.scope_matrix(plugin, self.db, store, self.embedder.fingerprint, s)
                for c, s in self.scopes.items()
            }
        started = time.perf_counter()
        self.vectors = {}
        for q in self.questions:
            if q.text not in self.vectors:
                self.vectors[q.text] = self.embedder.embed_query(q.text)
        self.embed_seconds = time.perf_counter() - started
        self.own = {c: {s for s, (cc, _) in self.built.sessions.items() if cc == c} for c in self.built.fresh}
        self.by_key = {(c, n): s for s, (c, n) in self.built.sessions.items()}
        self.number = {s: n for s, (_, n) in self.built.sessions.items()}
        self.asked = {"keyword": 0, "embedded": 0}  # evidence_as_asked: calls, and query embeddings

    def reader(self) -> Any:
        """A search's full-text reader over the replay's connection (one per search, as
        ``run_search`` makes one per call; the scope ids it loads are the process's)."""
        return layout.fulltext_reader(self.plugin, self.db)

    def vector(self, text: str) -> Any:
        if text not in self.vectors:
            self.vectors[text] = self.embedder.embed_query(text)
        return self.vectors[text]

    def close(self) -> None:
        self.db.close()
        self._stack.__exit__(None, None, None)

    # ------------------------------------------------------------------ run_search, step by step

    def answer(self, text: str, conversation: str, mode: str, limit: int, hooks: Hooks) -> list[str]:
        S, Q, R, M, sem, db = self.search, self.query, self.rank, self.matrix_math, self.semantic, self.db
        self.current_text, self.current_conversation = text, conversation
        embedding = replace(self.settings.embedding, **hooks.settings)
        keyword_messages = hooks.keyword_messages or R.keyword_messages
        reader = self.reader()
        scope = self.scopes[conversation]
        plan = Q.plan_query(text)
        in_scope = scope.conversation_of
        windows = Q.date_windows(text)
        common = frozenset()
        if hooks.no_common not in (True, "both"):
            common = R.common_words(reader, plan, in_scope)
        narrowed = {"leave_out": common} if common and hooks.no_common != "keyword" else {}
        keyword: list[dict] = []
        if mode != "semantic":
            keyword = keyword_messages(
                reader, plan, in_scope, limit, only_best=mode == "keyword" and not windows, **narrowed
            )
        semantic_rows: list[dict] = []
        semantic_evidence = None
        if mode != "keyword":
            matrix = self.matrices[conversation]
            narrow_vector = common and hooks.no_common != "semantic"
            vector = self.vector(Q.without_words(text, common)) if narrow_vector else self.vectors[text]
            if hooks.semantic_rows:
                rows = hooks.semantic_rows(self, matrix, vector, embedding.top_k, db)
            else:
                hits, mean, judged = M.hits_with_lift(matrix, vector, embedding.top_k)
                rows = sem._rows(db, hits, mean, judged)
            semantic_evidence = getattr(rows, "evidence_rows", None)
            semantic_rows = [
                {**row, "conversation": in_scope[row["session_id"]]}
                for row in rows
                if row["session_id"] in in_scope
            ]
        if mode == "semantic" and not semantic_rows:
            keyword = keyword_messages(reader, plan, in_scope, limit, only_best=not windows, **narrowed)
        if mode == "keyword" or not semantic_rows:
            ranked = keyword
        elif mode == "semantic":
            ranked = semantic_rows
        else:
            fuse = hooks.fuse or S.fuse_rankings
            ranked = fuse(
                keyword, semantic_rows, embedding.rrf_k, embedding.keyword_weight, embedding.semantic_weight
            )
            floor = self.config_schema.relevance_floor(embedding)
            terms = getattr(keyword, "terms", None) or len(plan.topical())
            if hasattr(S, "with_strength"):  # as _Search.rank: the margins, then keyword's clear winner
                needed = S.keyword_evidence(terms)
                words, meaning = S.evidence_by_conversation(keyword, semantic_rows)
                ranked = S.with_strength(ranked, words, meaning, needed, floor)
                ranked = (hooks.clear_winner or S.keep_clear_keyword_winner)(ranked, keyword, needed)
            else:
                ranked = (hooks.clear_winner or S.keep_clear_keyword_winner)(ranked, keyword)
            evidence = hooks.has_evidence or S.has_evidence
            judged = getattr(keyword, "evidence_rows", None) or keyword
            judged_semantic = semantic_evidence or semantic_rows
            if hooks.floor_union:  # what the narrowed query found counts too
                judged, judged_semantic = [*keyword, *judged], [*semantic_rows, *judged_semantic]
            if (
                not plan.has_cjk
                and not evidence(judged, judged_semantic, floor, terms)
                and not (
                    common
                    and not hooks.no_as_asked
                    and self._evidence_as_asked(reader, text, conversation, plan, limit, floor, terms)
                )
            ):
                ranked = []
        best = S.best_per_session(S.promote_dated(db, ranked, windows), limit)
        return [row["session_id"] for row in best]

    def _evidence_as_asked(self, reader, text, conversation, plan, limit, floor, terms) -> bool:
        """``_Search.evidence_as_asked`` on the recorded matrix and vector of the query as asked."""
        S, R, M, sem = self.search, self.rank, self.matrix_math, self.semantic
        in_scope = self.scopes[conversation].conversation_of
        self.asked["keyword"] += 1
        if S.has_evidence(R.keyword_messages(reader, plan, in_scope, limit), [], floor, terms):
            return True
        self.asked["embedded"] += 1
        top_k = self.settings.embedding.top_k
        hits, mean, judged = M.hits_with_lift(self.matrices[conversation], self.vectors[text], top_k)
        rows = [r for r in sem._rows(self.db, hits, mean, judged) if r["session_id"] in in_scope]
        return S.has_evidence([], rows, floor, terms)

    def run(self, hooks: Hooks, modes=MODES) -> dict:
        saved = [(obj, name, getattr(obj, name)) for obj, name, _ in hooks.patches]
        for obj, name, value in hooks.patches:
            setattr(obj, name, value)
        try:
            return self._run(hooks, modes)
        finally:
            for obj, name, value in reversed(saved):
                setattr(obj, name, value)

    def _run(self, hooks: Hooks, modes=MODES) -> dict:
        out: dict[str, Any] = {}
        for mode in modes:
            ranked, offtopic = [], []
            for q in self.questions:
                ranked.append(self.answer(q.text, q.conversation, mode, LIMIT, hooks))
                where = quality.other_project(self.built, q.conversation)
                offtopic.append(len(self.answer(q.text, where, mode, OFFTOPIC_LIMIT, hooks)))
            out[mode] = {"ranked": ranked, "offtopic": offtopic}
        return out

    # ------------------------------------------------------------------ scoring

    def split_of(self, q: locomo.Question) -> str:
        return "tune" if q.conversation in locomo.TUNE_SPLIT else "check"

    def scores(self, ranked: list[list[str]]) -> dict[str, metrics.Score]:
        scores = {"all": metrics.Score(), "tune": metrics.Score(), "check": metrics.Score()}
        for q, r in zip(self.questions, ranked, strict=True):
            gold = {self.by_key[(q.conversation, n)] for n in q.gold}
            for name in ("all", self.split_of(q)):
                scores[name].add(r, gold, self.own[q.conversation])
        return scores

    def offtopic(self, counts: list[int]) -> dict[str, tuple[float, float]]:
        by: dict[str, list[int]] = {"all": [], "tune": [], "check": []}
        for q, n in zip(self.questions, counts, strict=True):
            by["all"].append(n)
            by[self.split_of(q)].append(n)
        return {s: (statistics.fmean(v), sum(1 for n in v if n == 0) / len(v)) for s, v in by.items() if v}


# --------------------------------------------------------------------------- variants


def _float(arg: str, default: float) -> float:
    return float(arg) if arg else default


VARIANTS: dict[str, Callable[[Replay, str], Hooks]] = {}


def variant(name: str):
    def register(make):
        VARIANTS[name] = make
        return make

    return register


@variant("base")
def _base(replay: Replay, arg: str) -> Hooks:
    return Hooks()


@variant("top_k")
def _top_k(replay: Replay, arg: str) -> Hooks:
    """embedding.top_k: how many semantic chunks feed fusion."""
    return Hooks(settings={"top_k": int(arg)}, modes=("semantic", "hybrid"))


@variant("no_as_asked")
def _no_as_asked(replay: Replay, arg: str) -> Hooks:
    """search._Search.evidence_as_asked off: the floor judges the rows ranked without the common words."""
    return Hooks(no_as_asked=True, modes=("hybrid",))


@variant("floor")
def _floor(replay: Replay, arg: str) -> Hooks:
    """embedding.relevance_floor (0: none)."""
    return Hooks(settings={"relevance_floor": float(arg)}, modes=("hybrid",))


@variant("rrf_k")
def _rrf_k(replay: Replay, arg: str) -> Hooks:
    return Hooks(settings={"rrf_k": int(arg)}, modes=("hybrid",))


@variant("kw_weight")
def _kw_weight(replay: Replay, arg: str) -> Hooks:
    return Hooks(settings={"keyword_weight": float(arg)}, modes=("hybrid",))


def _args(arg: str, *defaults: float) -> list[float]:
    """``a/b/c`` -> floats, the missing ones from ``defaults``."""
    given = [float(x) for x in arg.split("/") if x] if arg else []
    return given + list(defaults[len(given) :])


@variant("stopfix")
def _stopfix(replay: Replay, arg: str) -> Hooks:
    """``QueryPlan.topical`` compares the bare word with the stopwords: "in?", "for?", "at?" (the
    question's last word carries its "?") are stopwords too (122 of 997 LoCoMo questions)."""
    Q = replay.query

    def topical(self):
        return [t for t in self.terms if Q.bare_word(t.text) not in Q._STOPWORDS] or list(self.terms)

    return Hooks(patches=[(Q.QueryPlan, "topical", topical)])


def _reorder_sessions(rows: list[dict], key, keep: int = 0) -> list[dict]:
    """Rows grouped by conversation, conversations sorted by ``key(conversation, its rows)`` (higher
    first, stable), the first ``keep`` conversations left where they are."""
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row.get("conversation") or row["session_id"], []).append(row)
    order = list(groups)
    head, tail = order[:keep], order[keep:]
    tail.sort(key=lambda g: -key(g, groups[g]))
    return [row for g in head + tail for row in groups[g]]


def _strengths(search: Any, rows: list[dict]) -> list[float]:
    values = [search._strength(r) for r in rows]
    return sorted((v for v in values if v is not None), reverse=True)


@variant("kw_session")
def _kw_session(replay: Replay, arg: str) -> Hooks:
    """Keyword conversations by best + λ·2nd + λ²·3rd message strength; ``λ/keep/hybrid_only``."""
    lam, keep, hybrid_only = _args(arg, 0.3, 0, 0)
    S = replay.search

    def key_for(plan):
        def key(group, members):
            st = _strengths(S, members)
            return sum(v * lam**i for i, v in enumerate(st[:3]))

        return key

    return _keyword_reordered(replay, key_for, int(keep), bool(hybrid_only))


def _keyword_reordered(replay: Replay, key_for, keep: int, hybrid_only: bool) -> Hooks:
    """Hooks whose keyword pass reorders its conversations by ``key_for(plan)`` (see
    :func:`_reorder_sessions`); with ``hybrid_only`` keyword mode's own pass is left alone."""
    plain = replay.rank.keyword_messages

    def keyword_messages(reader, plan, in_scope, want, *, only_best=False, **narrowed):
        rows = plain(reader, plan, in_scope, want, only_best=only_best, **narrowed)
        if hybrid_only and only_best:
            return rows
        return _reorder_sessions(rows, key_for(plan), keep)

    return Hooks(keyword_messages=keyword_messages)


def _term_patterns(query: Any, plan: Any) -> list[Any]:
    import re

    patterns = []
    for term in plan.topical():
        word, stem = query.bare_word(term.text), query.stem_prefix(term)
        if stem:
            patterns.append(re.compile(r"\b" + re.escape(stem), re.IGNORECASE))
        elif word:
            patterns.append(re.compile(r"\b" + re.escape(word) + r"\b", re.IGNORECASE))
    return patterns


@variant("kw_cover")
def _kw_cover(replay: Replay, arg: str) -> Hooks:
    """Keyword conversations by best strength × (1 + γ·(distinct query words the conversation's
    matching messages cover − those of its best message)); ``γ/keep/hybrid_only``."""
    gamma, keep, hybrid_only = _args(arg, 0.2, 0, 0)
    S = replay.search

    def key_for(plan):
        patterns = _term_patterns(replay.query, plan)

        def covered(row):
            text = S.message_text(row.get("content"))
            return {i for i, p in enumerate(patterns) if p.search(text or "")}

        def key(group, members):
            best = S._strength(members[0]) or 0.0
            union = set().union(*(covered(r) for r in members))
            return best * (1 + gamma * (len(union) - len(covered(members[0]))))

        return key

    return _keyword_reordered(replay, key_for, int(keep), bool(hybrid_only))


@variant("sem_agg")
def _sem_agg(replay: Replay, arg: str) -> Hooks:
    """Semantic conversations by c1 + β·(c2 − mean) + β²·(c3 − mean) over their messages' cosines,
    from the first ``depth`` chunks; the top_k rows reordered; ``β/depth``."""
    beta, depth = _args(arg, 0.3, 200)
    sem, M = replay.semantic, replay.matrix_math

    def semantic_rows(rp, matrix, vector, top_k, db):
        hits, mean, judged = M.hits_with_lift(matrix, vector, max(top_k, int(depth)))
        by: dict[str, list[float]] = {}
        for _, session_id, _, score in hits:
            by.setdefault(session_id, []).append(score)
        rows = sem._rows(db, M.top_messages(matrix, vector, top_k), mean, judged)
        m = mean or 0.0

        def key(group, members):
            c = by.get(group, [members[0]["score"]])
            return c[0] + sum(beta ** (i + 1) * (v - m) for i, v in enumerate(c[1:3]))

        return _reorder_sessions(rows, key)

    return Hooks(semantic_rows=semantic_rows, modes=("semantic", "hybrid"))


@variant("neighbour_scan")
def _neighbour_scan(replay: Replay, arg: str) -> Hooks:
    return Hooks(patches=[(replay.rank, "NEIGHBOUR_SCAN", int(arg))])


@variant("neighbour_weight")
def _neighbour_weight(replay: Replay, arg: str) -> Hooks:
    return Hooks(patches=[(replay.rank, "NEIGHBOUR_WEIGHT", float(arg))])


_SPREAD: dict[tuple, float] = {}


def _spread(replay: Replay, term: Any, in_scope: dict) -> float:
    """Share of the scope's conversations with a message matching ``term`` (as the relaxed pass
    searches it: a plain word as its stem's prefix)."""
    key = (term.fts, id(in_scope))
    if key not in _SPREAD:
        match = replay.query.QueryPlan.word_match(term)
        try:
            rows = replay.reader().fts_messages("messages_fts", match, in_scope, 10**6, per_session=1)
        except Exception:
            rows = []
        _SPREAD[key] = len({in_scope[r["session_id"]] for r in rows}) / max(1, len(set(in_scope.values())))
    return _SPREAD[key]


@variant("sem_dropcommon")
def _sem_dropcommon(replay: Replay, arg: str) -> Hooks:
    """The semantic query without the words found in more than ``share`` of the scope's
    conversations (what kw_dropcommon leaves out of the relaxed pass); ``share``."""
    share, own_floor, beta, depth = _args(arg, 0.9, 0, 0, 200)
    Q, M, sem = replay.query, replay.matrix_math, replay.semantic

    def aggregate(rows, matrix, vector, db):
        if not beta:
            return rows
        hits, mean, _ = M.hits_with_lift(matrix, vector, int(depth))
        by: dict[str, list[float]] = {}
        for _, session_id, _, score in hits:
            by.setdefault(session_id, []).append(score)
        m = mean or 0.0

        def key(group, members):
            c = by.get(group, [members[0]["score"]])
            return c[0] + sum(beta ** (i + 1) * (v - m) for i, v in enumerate(c[1:3]))

        out = Rows(_reorder_sessions(rows, key))
        out.evidence_rows = getattr(rows, "evidence_rows", None)
        return out

    owner = {}

    def semantic_rows(rp, matrix, vector, top_k, db):
        conversation = owner[id(matrix)]
        text = rp.current_text
        in_scope = rp.scopes[conversation].conversation_of
        plan = Q.plan_query(text)
        topical = plan.topical()
        dropped = {Q.bare_word(t.text) for t in topical if _spread(rp, t, in_scope) > share}
        if dropped and len(dropped) < len(topical):
            words = [w for w in text.split() if Q.bare_word(w) not in dropped]
            narrow = rp.vector(" ".join(words))
            hits, mean, judged = M.hits_with_lift(matrix, narrow, top_k)
            rows = Rows(sem._rows(db, hits, mean, judged))
            if not own_floor:  # the floor judges the query as asked
                hits, mean, judged = M.hits_with_lift(matrix, vector, top_k)
                rows.evidence_rows = sem._rows(db, hits, mean, judged)
            return aggregate(rows, matrix, narrow, db)
        hits, mean, judged = M.hits_with_lift(matrix, vector, top_k)
        return aggregate(sem._rows(db, hits, mean, judged), matrix, vector, db)

    for conversation, matrix in replay.matrices.items():
        owner[id(matrix)] = conversation
    return Hooks(semantic_rows=semantic_rows, modes=("semantic", "hybrid"))


@variant("no_common")
def _no_common(replay: Replay, arg: str) -> Hooks:
    """fulltext.common_words off (the code before round 4): the keyword pass and the semantic query
    keep every word; ``keyword`` / ``semantic``: on that side only (the floor as in the plugin)."""
    return Hooks(no_common=arg or True)


@variant("noclear")
def _noclear(replay: Replay, arg: str) -> Hooks:
    """Without keep_clear_keyword_winner."""
    return Hooks(clear_winner=lambda fused, keyword, *_: fused, modes=("hybrid",))


@variant("floor_union")
def _floor_union(replay: Replay, arg: str) -> Hooks:
    return Hooks(floor_union=True, modes=("hybrid",))


@variant("floor_common")
def _floor_common(replay: Replay, arg: str) -> Hooks:
    """A word found in more than ``share`` of the scope's conversations is itself evidence that the
    project discussed the question (the floor lets the answer through)."""
    (share,) = _args(arg, 0.9)
    S = replay.search

    def has_evidence(keyword, semantic, floor, terms=None):
        if S.has_evidence(keyword, semantic, floor, terms):
            return True
        in_scope = replay.scopes[replay.current_conversation].conversation_of
        plan = replay.query.plan_query(replay.current_text)
        return any(_spread(replay, t, in_scope) > share for t in plan.topical())

    return Hooks(has_evidence=has_evidence, modes=("hybrid",))


class Rows(list):
    """Keyword rows that may say how many topical words the pass that found them searched."""

    terms: int | None = None
    evidence_rows: list | None = None


@variant("kw_dropcommon")
def _kw_dropcommon(replay: Replay, arg: str) -> Hooks:
    """The relaxed pass leaves out topical words found in more than ``share`` of the scope's
    conversations (a word in every conversation cannot tell them apart); ``share/also_floor``."""
    share, narrow_floor = _args(arg, 0.8, 0)
    plain = replay.rank.keyword_messages

    class Narrow(replay.query.QueryPlan):
        pass

    def keyword_messages(reader, plan, in_scope, want, *, only_best=False, **narrowed):
        topical = plan.topical()
        kept = [t for t in topical if _spread(replay, t, in_scope) <= share]
        if kept and len(kept) < len(topical):
            narrow = Narrow(items=plan.items, terms=plan.terms)
            object.__setattr__(narrow, "_kept", kept)
            rows = Rows(plain(reader, narrow, in_scope, want, only_best=only_best))
            full = None
            if len({r["conversation"] for r in rows}) < want:
                # too few without the common words: the full relaxed pass after them
                full = plain(reader, plan, in_scope, want, only_best=only_best)
                seen = {r["message_id"] for r in rows}
                rows.extend(r for r in full if r["message_id"] not in seen)
            if narrow_floor == 1:
                rows.terms = len(kept)  # the floor's per-word evidence counts the words searched
            elif narrow_floor == 2:  # the floor judges the rows of the whole query
                rows.evidence_rows = full or plain(reader, plan, in_scope, want, only_best=only_best)
            return rows
        return plain(reader, plan, in_scope, want, only_best=only_best)

    def topical(self):
        return self._kept

    Narrow.topical = topical
    return Hooks(keyword_messages=keyword_messages)


@variant("sem_prf")
def _sem_prf(replay: Replay, arg: str) -> Hooks:
    """Rocchio in embedding space: the query plus α × the mean of its ``m`` best chunks' vectors;
    lift (the floor) still from the query alone; ``α/m``."""
    import numpy as np

    alpha, m = _args(arg, 0.3, 3)
    sem, M = replay.semantic, replay.matrix_math

    def semantic_rows(rp, matrix, vector, top_k, db):
        vectors = matrix.matrix.vectors
        q = np.asarray(vector, dtype=np.float32)
        scores = np.einsum("ij,j->i", vectors, q)
        if len(matrix.excluded):
            scores[matrix.excluded] = -np.inf
        best = np.argsort(-scores, kind="stable")[: int(m)]
        centroid = np.asarray(vectors[best], dtype=np.float32).mean(axis=0)
        q2 = q + alpha * centroid
        q2 /= np.linalg.norm(q2)
        _, mean, judged = M.hits_with_lift(matrix, vector, 1)
        hits = M.top_messages(matrix, q2, top_k)
        # each hit's cosine with the query itself, so lift and the floor mean what they did
        rows_by_message = {}
        qs = np.einsum("ij,j->i", vectors, q)
        mids = matrix.matrix.rows["message_id"]
        for pos in np.flatnonzero(np.isin(mids, [h[0] for h in hits])):
            mid = int(mids[pos])
            rows_by_message[mid] = max(rows_by_message.get(mid, -1.0), float(qs[pos]))
        hits = [(mid, sid, ci, rows_by_message.get(mid, score)) for mid, sid, ci, score in hits]
        return sem._rows(db, hits, mean, judged)

    return Hooks(semantic_rows=semantic_rows, modes=("semantic", "hybrid"))


def make_hooks(replay: Replay, name: str) -> Hooks:
    """``a:1+b:2``: the variants together (a later one's step wins where both replace it)."""
    merged = Hooks(modes=())
    for part in name.split("+"):
        kind, _, arg = part.partition(":")
        hooks = VARIANTS[kind](replay, arg)
        for step in ("keyword_messages", "semantic_rows", "fuse", "clear_winner", "has_evidence"):
            if getattr(hooks, step):
                setattr(merged, step, getattr(hooks, step))
        merged.settings.update(hooks.settings)
        merged.patches += hooks.patches
        merged.floor_union = merged.floor_union or hooks.floor_union
        merged.no_as_asked = merged.no_as_asked or hooks.no_as_asked
        merged.no_common = hooks.no_common or merged.no_common
        merged.modes = tuple(m for m in MODES if m in merged.modes or m in hooks.modes)
    return merged


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    models_setup.add_model_args(parser)
    parser.add_argument("--split", default="all")
    parser.add_argument("--variants", default="base", help="comma-separated NAME[:ARG]; base first")
    parser.add_argument("--verify", type=Path, help="a quality.py --json file of the same code")
    parser.add_argument("--json", type=Path, help="per-variant rankings and figures")
    return parser.parse_args(argv)


def verify(replay: Replay, base: dict, path: Path) -> None:
    data = json.loads(path.read_text())["modes"]
    for mode in MODES:
        want = [r[2] for r in data[mode]["ranked"]]
        got = [[replay.number[s] for s in r] for r in base[mode]["ranked"]]
        differ = sum(1 for a, b in zip(want, got, strict=True) if a != b)
        off = replay.offtopic(base[mode]["offtopic"])["all"][0]
        want_off = data[mode]["offtopic"]["all"]["mean_results"]
        print(
            f"verify {mode}: {differ} of {len(want)} rankings differ; "
            f"off-topic mean {off:.4f} vs {want_off:.4f}"
        )


def deltas(replay: Replay, result: dict, base: dict, mode: str) -> dict[str, list[int]]:
    now, was = replay.scores(result[mode]["ranked"]), replay.scores(base[mode]["ranked"])
    return {s: [now[s].hits[c] - was[s].hits[c] for c in metrics.COLUMNS] for s in ("tune", "check", "all")}


def report(replay: Replay, name: str, result: dict, base: dict) -> dict:
    rates = {m: {s: sc.row() for s, sc in replay.scores(result[m]["ranked"]).items()} for m in MODES}
    off = {m: replay.offtopic(result[m]["offtopic"]) for m in MODES}
    dominates = {
        s: metrics.dominates(rates["hybrid"][s], rates["keyword"][s], rates["semantic"][s])
        for s in ("all", "tune", "check")
    }
    d = {m: deltas(replay, result, base, m) for m in MODES}
    cells = " ".join(f"{rates['hybrid']['all'][c]:.3f}" for c in metrics.COLUMNS)
    print(
        f"{name:32s} hybrid {cells} off {off['hybrid']['all'][0]:.3f}/{off['hybrid']['all'][1]:.3f} "
        f"dom {''.join('Y' if dominates[s] else 'n' for s in ('all', 'tune', 'check'))}"
    )
    for split in ("all", "tune", "check"):
        if not dominates[split]:
            short = [
                f"{c} {rates['hybrid'][split][c]:.3f}<{m[0]} {rates[m][split][c]:.3f}"
                for m in ("keyword", "semantic")
                for c in metrics.COLUMNS
                if rates["hybrid"][split][c] + 1e-9 < rates[m][split][c]
            ]
            print(f"{'':32s}   hybrid < single on {split}: {', '.join(short)}")
    for m in MODES:
        if any(any(v) for v in d[m].values()):
            line = f"{'':32s}   {m:8s} Δ tune {d[m]['tune']} check {d[m]['check']}"
            if m != "hybrid":
                line += " | all " + " ".join(f"{rates[m]['all'][c]:.3f}" for c in metrics.COLUMNS)
            print(line)
    return {"rates": rates, "offtopic": off, "dominates": dominates, "deltas": d}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    replay = Replay(args)
    print(f"model={args.model} questions={len(replay.questions)} embedded in {replay.embed_seconds:.1f}s")
    names = [v for v in args.variants.split(",") if v]
    if names[0] != "base":
        names.insert(0, "base")
    results: dict[str, Any] = {}
    try:
        base = replay.run(Hooks())
        print(
            f"base: floor judged the query as asked {replay.asked['keyword']} times "
            f"({replay.asked['embedded']} query embeddings) in {2 * len(replay.questions)} hybrid searches"
        )
        if args.verify:
            verify(replay, base, args.verify)
        for name in names:
            hooks = make_hooks(replay, name)
            started = time.perf_counter()
            result = base if name == "base" else {**base, **replay.run(hooks, hooks.modes)}
            summary = report(replay, name, result, base)
            summary["seconds"] = time.perf_counter() - started
            summary["ranked"] = {
                m: [[replay.number[s] for s in r] for r in result[m]["ranked"]] for m in MODES
            }
            results[name] = summary
    finally:
        replay.close()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results))


if __name__ == "__main__":
    main()
