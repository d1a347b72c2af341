"""Fusion sweep: every fusion setting scored from one pass over the questions.

    .venv/bin/python bench/tune.py --model minilm
    .venv/bin/python bench/tune.py --model e5 --context-messages 0

Fusion settings do not change what the keyword path or the index return, so each question's
keyword messages, query vector and in-scope vector matrix are computed once, through the loaded
plugin's own functions (``fulltext.keyword_signals``, the process's ``MatrixCache.matrix``,
``semantic.matrix.nearest``, and the ranking's ``keyword_order``, ``semantic_order``, ``fuse`` and
``one_per_conversation`` under a policy per setting), and every setting is a cheap recombination
of them. It scores the fusion alone: issue 11's date promotion,
relevance floor and clear-keyword-winner rule (``search.run_search``) are not applied, so its
figures sit below ``quality.py``'s and ``--verify`` can disagree. ``--verify`` replays one
setting through the tool dispatcher and checks the rankings are identical, so the sweep stands
for the real path.

Settings are chosen on the tune split (conv-26/30/41) and reported on the held-out check split
(conv-42/43) and on all questions. Two fusions are scored: ``message``, the spec's RRF over
message ids (the policy's ``fuse_conversations`` off), and ``session``, RRF over each path's
conversation order (the plugin's); ``quality.py --fusion`` runs either end to end.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import layout
import locomo
import metrics
import models_setup
import quality
import world

LIMIT = 10
SPLITS = {"tune": set(locomo.TUNE_SPLIT), "check": set(locomo.CHECK_SPLIT)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    models_setup.add_model_args(parser)
    parser.add_argument("--rrf-ks", default="0,1,2,5,10,20,60")
    parser.add_argument("--keyword-weights", default="1,1.5,2,3,4")
    parser.add_argument("--top-ks", default="10,20,50,100,200")
    parser.add_argument("--strategies", default="message,session", help="fusions: message, session")
    parser.add_argument("--show", type=int, default=15, help="rows of the ranked table")
    parser.add_argument("--verify", action="store_true", help="replay the chosen setting end to end")
    parser.add_argument("--json", type=Path)
    return parser.parse_args(argv)


class Inputs:
    """Per question: keyword signals, and semantic hits per top_k (via the plugin's functions)."""

    def __init__(
        self, plugin: Any, built: world.Built, settings: Any, questions: list[locomo.Question], top_ks
    ):
        fulltext, matrix_math, ranking = plugin.fulltext, layout.matrix_math(plugin), plugin.ranking
        env = layout.env(plugin)
        embedder = layout.embedder(plugin, settings.embedding, env.api_key())
        self.ranking, self.rank = ranking, plugin.ranking.rank
        self.policy = plugin.process_state().policy.with_settings(settings.embedding)
        self.by_key = {(c, n): s for s, (c, n) in built.sessions.items()}
        self.own = {conv: {s for s, (c, _) in built.sessions.items() if c == conv} for conv in built.fresh}
        self.keyword: list[list[Any]] = []  # ranking.Scored, in keyword order
        self.semantic: list[dict[int, list[Any]]] = []
        started = time.perf_counter()
        with layout.open_db(plugin, env) as db:
            project_map = layout.project_map(plugin, db)
            scopes = {c: project_map.resolve_scope(f, "") for c, f in built.fresh.items()}
            with layout.index_store(plugin).IndexStore.open_readonly(env.index_path) as store:
                fingerprint = embedder.fingerprint
                matrices = {
                    c: layout.scope_matrix(plugin, db, store, fingerprint, s) for c, s in scopes.items()
                }
            for q in questions:
                in_scope = scopes[q.conversation].conversation_of
                reader = layout.fulltext_reader(plugin, db)
                plan = fulltext.plan_query(q.text)
                # As run_search: words nearly every conversation has are left out of the relaxed
                # keyword pass and of the semantic query (fulltext.common_words).
                common = fulltext.common_words(reader, plan, in_scope, self.policy)
                signals = fulltext.keyword_signals(reader, plan, in_scope, self.policy, leave_out=common)
                self.keyword.append(self.rank.keyword_order(signals, self.policy))
                vector = embedder.embed_query(fulltext.without_words(q.text, common))
                per_k = {}
                for top_k in top_ks:
                    hits, mean, background = matrix_math.nearest(matrices[q.conversation], vector, top_k)
                    semantic = [
                        ranking.SemanticHit(
                            ranking.Message(m, s, in_scope[s]), score, chunk, mean, background
                        )
                        for m, s, chunk, score in hits
                        if s in in_scope
                    ]
                    per_k[top_k] = self.rank.semantic_order(semantic, self.policy)
                self.semantic.append(per_k)
        self.seconds = time.perf_counter() - started
        self.questions = questions

    def rank_all(self, rank: Callable[[int], list[str]]) -> list[list[str]]:
        return [rank(i) for i in range(len(self.questions))]

    def score(self, ranked: list[list[str]], split: str) -> metrics.Score:
        score = metrics.Score()
        for i, q in enumerate(self.questions):
            if split != "all" and q.conversation not in SPLITS[split]:
                continue
            gold = {self.by_key[(q.conversation, n)] for n in q.gold}
            score.add(ranked[i], gold, self.own[q.conversation])
        return score


def sessions_of(hits: list[Any]) -> list[str]:
    seen: dict[str, None] = {}
    for hit in hits:
        seen.setdefault(hit.message.session_id, None)
    return list(seen)


def rankers(inputs: Inputs, strategy: str, k: int, wk: float, ws: float, top_k: int):
    policy = replace(
        inputs.policy,
        fuse_conversations=strategy != "message",
        rrf_k=k,
        keyword_weight=wk,
        semantic_weight=ws,
    )

    def keyword(i: int) -> list[str]:
        return sessions_of(inputs.keyword[i])[:LIMIT]

    def semantic(i: int) -> list[str]:
        return sessions_of(inputs.semantic[i][top_k])[:LIMIT]

    def hybrid(i: int) -> list[str]:
        kw, sem = inputs.keyword[i], inputs.semantic[i][top_k]
        if not sem:
            return keyword(i)
        needed = policy.evidence_needed(None)
        fused = inputs.rank.fuse(kw, sem, policy, needed)
        return [h.message.session_id for h in inputs.rank.one_per_conversation(fused, LIMIT)]

    return keyword, semantic, hybrid


def label(strategy: str, k: int, wk: float, ws: float, top_k: int) -> str:
    return f"{strategy} k={k} wk={wk:g} ws={ws:g} top_k={top_k}"


def sweep(inputs: Inputs, strategies, ks, wks, top_ks) -> list[dict]:
    results = []
    keyword_ranked = inputs.rank_all(rankers(inputs, "message", 0, 1.0, 1.0, top_ks[0])[0])
    semantic_ranked = {t: inputs.rank_all(rankers(inputs, "message", 0, 1.0, 1.0, t)[1]) for t in top_ks}
    for strategy, k, wk, top_k in itertools.product(strategies, ks, wks, top_ks):
        hybrid = inputs.rank_all(rankers(inputs, strategy, k, wk, 1.0, top_k)[2])
        lists = (keyword_ranked, semantic_ranked[top_k], hybrid)
        entry = {"strategy": strategy, "rrf_k": k, "keyword_weight": wk, "semantic_weight": 1.0}
        entry["top_k"] = top_k
        for split in ("tune", "check", "all"):
            kw, sem, hyb = (inputs.score(r, split).row() for r in lists)
            best_single = {c: max(kw[c], sem[c]) for c in metrics.COLUMNS}
            entry[split] = {
                "keyword": kw,
                "semantic": sem,
                "hybrid": hyb,
                "dominates": metrics.dominates(hyb, kw, sem),
                "margin": min(hyb[c] - best_single[c] for c in metrics.COLUMNS),
            }
        results.append(entry)

    # Rank on the tune split only: does hybrid dominate, by how much at worst, then any@5 + all@10.
    def tune_key(e: dict) -> tuple:
        t = e["tune"]
        return (t["dominates"], round(t["margin"], 4), t["hybrid"]["any@5"] + t["hybrid"]["all@10"])

    results.sort(key=tune_key, reverse=True)
    return results


def print_ranked(results: list[dict], show: int) -> None:
    print()
    print("Ranked on the tune split (conv-26/30/41); hybrid scores on tune / check; margin = worst")
    print("metric of hybrid minus the better single mode (>= 0: hybrid at least as good everywhere)")
    print()
    print("| setting | tune any@5 | tune all@10 | tune margin | check any@5 | check all@10 | check margin |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for e in results[:show]:
        t, c = e["tune"], e["check"]
        print(
            f"| {label(e['strategy'], e['rrf_k'], e['keyword_weight'], 1.0, e['top_k'])} "
            f"| {t['hybrid']['any@5']:.3f} | {t['hybrid']['all@10']:.3f} | {t['margin']:+.3f} "
            f"| {c['hybrid']['any@5']:.3f} | {c['hybrid']['all@10']:.3f} | {c['margin']:+.3f} |"
        )


def verify(plugin: Any, built: world.Built, inputs: Inputs, embedding: dict, entry: dict) -> None:
    """Replay ``entry`` through the tool dispatcher: the rankings must be identical."""
    fusion = {name: entry[name] for name in ("rrf_k", "keyword_weight", "semantic_weight", "top_k")}
    world.configure(plugin, {**embedding, **fusion})
    state = plugin.process_state()
    original = state.policy
    state.policy = replace(original, fuse_conversations=entry["strategy"] != "message")
    try:
        *_, asked = quality.ask(built, inputs.questions, "hybrid", LIMIT)
    finally:
        state.policy = original
    _, _, hybrid = rankers(
        inputs, entry["strategy"], entry["rrf_k"], entry["keyword_weight"], 1.0, entry["top_k"]
    )
    by_number = {sid: n for sid, (_, n) in built.sessions.items()}
    differ = sum(1 for i, (_, _, ranked) in enumerate(asked) if ranked != [by_number[s] for s in hybrid(i)])
    print(f"verify {entry['strategy']} {fusion}: {differ} of {len(asked)} rankings differ from the tool's")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    ks = [int(x) for x in args.rrf_ks.split(",")]
    wks = [float(x) for x in args.keyword_weights.split(",")]
    top_ks = [int(x) for x in args.top_ks.split(",")]
    strategies = args.strategies.split(",")
    conversations = locomo.load()
    questions = [q for c in conversations for q in c.questions]

    with models_setup.embedding_config(args) as (key, embedding):
        built = world.build_home(key, conversations)
        plugin = world.activate(built.home)
        settings = world.configure(plugin, embedding)
        index = quality.build_index(plugin, built, settings)
        inputs = Inputs(plugin, built, settings, questions, top_ks)
        print(
            f"model={args.model} index={key}: {index['chunks_written']} chunks "
            f"embedded in {index['seconds']:.1f}s; inputs for {len(questions)} questions in "
            f"{inputs.seconds:.1f}s"
        )
        results = sweep(inputs, strategies, ks, wks, top_ks)
        print_ranked(results, args.show)
        if args.verify:
            for strategy in strategies:  # the best setting of each strategy
                verify(
                    plugin, built, inputs, embedding, next(e for e in results if e["strategy"] == strategy)
                )
    out = {"model": args.model, "key": key, "index": index, "results": results}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
