"""Ranking levers replayed on LoCoMo: the plugin's own retrieval gathers each question's signals
once, then the plugin's own ``ranking.rank`` orders them under each variant policy.

    .venv/bin/python bench/replay.py --model minilm --verify bench/results/quality-minilm.json
    .venv/bin/python bench/replay.py --model e5 --variants semantic_spread=0.3,add_the_rest=false
    .venv/bin/python bench/replay.py --variants strength_weight=0+clear_winner_ratio=10

A variant is ``base`` or ``field=value`` changes of ``ranking.RankingPolicy`` joined by ``+``.
Nothing of the pipeline is copied here: each question is asked through ``search._Search`` (scope,
the question read once, both paths, the sole phrase holder, the dates) exactly as
``run_search`` asks it, and ranked through ``ranking.rank`` and ``search.settle``; the question as
asked, which the floor may need, is read once too. A variant that changes what retrieval reads
(``RETRIEVAL_FIELDS``) gathers its own signals again. ``--verify FILE`` compares ``base`` with
a ``quality.py --json`` run: every ranking of every mode and every off-topic count must be
equal, or the replay does not stand for the tool (it exits 1).

Figures: hybrid, keyword and semantic on all / tune / check, the off-topic mean and share of none
(each question asked in the next conversation's project, at limit 3 or ``--offtopic-limit``), and
per variant the change in questions against ``base`` (any@1/3/5/10, all@5/10).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
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
#: Policy fields that change what retrieval reads (the rest only how it is ranked).
RETRIEVAL_FIELDS = frozenset(
    {
        "scan_limit",
        "ranked_per_session",
        "gather_conversations",
        "every_word_first_above",
        "common_share",
        "common_min_conversations",
        "common_recent_conversations",
        "exact_names_keep_keyword_order",
        "sole_holder_wins",
    }
)


@dataclass
class Asked:
    """One question asked in one project in one mode: what the ranking gets, read once."""

    search: Any  # the _Search that gathered it (its scope and databases)
    question: Any  # search.Question
    found: Any  # search.Found
    dated: frozenset[str]
    as_asked: dict[str, Any] = field(default_factory=dict)  # keyword / semantic signals, once needed


def parse_variant(name: str, policy_class: Any) -> dict[str, Any]:
    """``base`` -> {}; ``a=1+b=false`` -> {"a": 1, "b": False}, typed as the policy's fields."""
    return {} if name == "base" else models_setup.policy_changes(name, policy_class)


class Replay:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.conversations = locomo.load()
        self.questions = quality.select(self.conversations, args.split, args.limit_questions)
        self._stack = models_setup.embedding_config(args)
        key, embedding = self._stack.__enter__()
        self.built = world.build_home(key, self.conversations)
        self.plugin = plugin = world.activate(self.built.home)
        self.settings = world.configure(plugin, embedding)
        quality.build_index(plugin, self.built, self.settings)
        self.process = plugin.process_state()
        self.base = models_setup.install_policy(plugin, args)  # --policy: the run's own base
        self.env = layout.env(plugin)
        self.db = layout.open_db(plugin, self.env)
        project_map = layout.project_map(plugin, self.db)
        self.scopes = {c: project_map.resolve_scope(f, "") for c, f in self.built.fresh.items()}
        self.own = {c: {s for s, (cc, _) in self.built.sessions.items() if cc == c} for c in self.built.fresh}
        self.by_key = {(c, n): s for s, (c, n) in self.built.sessions.items()}
        self.number = {s: n for s, (_, n) in self.built.sessions.items()}
        self.gathered: dict[tuple, Asked] = {}
        self.gather_seconds = 0.0

    def close(self) -> None:
        self.db.close()
        self._stack.__exit__(None, None, None)

    # ------------------------------------------------------------------ the plugin's own steps

    def ask(self, text: str, conversation: str, mode: str, policy: Any, retrieval_key: tuple) -> Asked:
        """Retrieval for ``text`` from ``conversation``'s project, as run_search does it (cached per
        retrieval policy)."""
        key = (text, conversation, mode, retrieval_key)
        if key not in self.gathered:
            started = time.monotonic()
            search = self.plugin.search._Search(
                self.process, self.env, self.db, self.scopes[conversation], False, started
            )
            search.policy = policy.with_settings(self.settings.embedding)
            question = search.understand(text, mode, LIMIT)
            found = search.retrieve(question)
            self.gathered[key] = Asked(search, question, found, search.dated(question, found))
            self.gather_seconds += time.monotonic() - started
        return self.gathered[key]

    def answer(self, asked: Asked, policy: Any, limit: int) -> list[str]:
        ranking, search = self.plugin.ranking, self.plugin.search
        effective = policy.with_settings(self.settings.embedding)
        features = asked.question.features()
        ranked = ranking.rank(features, asked.found.signals, effective, limit, asked.dated)

        def as_asked() -> bool:
            if "keyword" not in asked.as_asked:
                asked.as_asked["keyword"] = asked.search.keyword_as_asked(asked.question)
            if ranking.evidence_as_asked(
                features, ranking.Signals(keyword=asked.as_asked["keyword"]), effective
            ):
                return True
            if "semantic" not in asked.as_asked:
                asked.as_asked["semantic"] = asked.search.semantic_as_asked(asked.question)
            semantic = ranking.Signals(semantic=asked.as_asked["semantic"])
            return bool(ranking.evidence_as_asked(features, semantic, effective))

        results, _ = search.settle(ranked, as_asked)
        return [r.message.session_id for r in results]

    def run(self, changes: dict[str, Any]) -> dict:
        policy = dataclasses.replace(self.base, **changes)
        retrieval_key = tuple(sorted((k, v) for k, v in changes.items() if k in RETRIEVAL_FIELDS))
        out: dict[str, Any] = {}
        for mode in MODES:
            ranked, offtopic = [], []
            for q in self.questions:
                asked = self.ask(q.text, q.conversation, mode, policy, retrieval_key)
                ranked.append(self.answer(asked, policy, LIMIT))
                where = quality.other_project(self.built, q.conversation)
                elsewhere = self.ask(q.text, where, mode, policy, retrieval_key)
                offtopic.append(len(self.answer(elsewhere, policy, self.args.offtopic_limit)))
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    models_setup.add_model_args(parser)
    parser.add_argument("--split", default="all", help="all | tune | check | conversation ids")
    parser.add_argument("--limit-questions", type=int, default=0, help="first N questions of each project")
    parser.add_argument("--variants", default="", help="comma-separated variants (see the docstring)")
    parser.add_argument("--verify", type=Path, help="a quality.py --json run of the same code")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--offtopic-limit", type=int, default=OFFTOPIC_LIMIT, help="results asked for off-topic (%(default)s)"
    )
    return parser.parse_args(argv)


def differences(replay: Replay, base: dict, recorded: dict) -> list[str]:
    """Where the replay's ``base`` and a ``quality.py --json`` run disagree (empty: nowhere)."""
    said = []
    for mode in MODES:
        want = [r[2] for r in recorded[mode]["ranked"]]
        got = [[replay.number[s] for s in r] for r in base[mode]["ranked"]]
        differ = sum(1 for a, b in zip(want, got, strict=True) if a != b)
        off = replay.offtopic(base[mode]["offtopic"])["all"][0]
        want_off = recorded[mode]["offtopic"]["all"]["mean_results"]
        if differ or abs(off - want_off) > 1e-9:
            said.append(
                f"{mode}: {differ} of {len(want)} rankings differ; off-topic {off:.4f} vs {want_off:.4f}"
            )
    return said


def deltas(replay: Replay, result: dict, base: dict, mode: str) -> dict[str, list[int]]:
    now, was = replay.scores(result[mode]["ranked"]), replay.scores(base[mode]["ranked"])
    return {s: [now[s].hits[c] - was[s].hits[c] for c in metrics.COLUMNS] for s in ("tune", "check", "all")}


def report(replay: Replay, name: str, result: dict, base: dict) -> dict:
    rates = {m: {s: sc.row() for s, sc in replay.scores(result[m]["ranked"]).items()} for m in MODES}
    off = {m: replay.offtopic(result[m]["offtopic"]) for m in MODES}
    d = {m: deltas(replay, result, base, m) for m in MODES}
    cells = " ".join(f"{rates['hybrid']['all'][c]:.3f}" for c in metrics.COLUMNS)
    print(f"{name:40s} hybrid {cells} off {off['hybrid']['all'][0]:.3f}/{off['hybrid']['all'][1]:.3f}")
    for m in MODES:
        if any(any(v) for v in d[m].values()):
            print(f"{'':40s}   {m:8s} Δ tune {d[m]['tune']} check {d[m]['check']}")
    return {"rates": rates, "offtopic": off, "deltas": d}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    replay = Replay(args)
    names = [v for v in args.variants.split(",") if v]
    if not names or names[0] != "base":
        names.insert(0, "base")
    changes = {name: parse_variant(name, replay.plugin.ranking.RankingPolicy) for name in names}
    results: dict[str, Any] = {}
    failed = False
    try:
        base = replay.run({})
        print(
            f"model={args.model} questions={len(replay.questions)}; gathered in {replay.gather_seconds:.1f}s"
        )
        if args.verify:
            said = differences(replay, base, json.loads(args.verify.read_text())["modes"])
            print(
                "verify: every ranking and off-topic count equal"
                if not said
                else "verify FAILED: " + "; ".join(said)
            )
            failed = bool(said)
        for name in names:
            started = time.perf_counter()
            result = base if name == "base" else replay.run(changes[name])
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
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
