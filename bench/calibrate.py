"""The relevance calibration: how often a result at each relevance is right, and the fit behind
``RankingPolicy.relevance_*``.

    .venv/bin/python bench/calibrate.py --model minilm            # tables for the current policy
    .venv/bin/python bench/calibrate.py --model minilm --fit      # refit on the tune half first

Every LoCoMo question is asked in its own project and in the next one (off-topic) at limit 10,
through the plugin's own retrieval and ``ranking.rank`` (``replay.Replay``, which asks as
``run_search`` does); what the floor holds back is not shown. A result is right when its session
is one of the question's gold sessions (off-topic: never). ``--fit`` fits the logistic model of
``ranking.rank.relevance`` (Newton's method, a small L2 penalty) on the tune half's hybrid results,
and keyword mode's own model on its keyword results, and ranks again under them; the tables
then show both halves, each mode: of results at >= 0.5 how many are right, of those below how
many, and per tenth.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
import quality
import replay

MODES = ("hybrid", "keyword", "semantic")
FIELDS = (
    "relevance_intercept",
    "relevance_per_log_strength",
    "relevance_first",
    "relevance_per_log_lead",
    "relevance_per_log_share_of_first",
)
#: Keyword mode's own model (``RankingPolicy.relevance_model``), fitted on its own results.
KEYWORD_FIELDS = tuple(f"keyword_{name}" for name in FIELDS)


def features(position: int, strengths: Sequence[float | None]) -> list[float]:
    """The model's inputs for one result, as ``ranking.rank.relevance`` combines them."""
    weakest = 1e-3
    own = max(strengths[position] or 0.0, weakest)
    first = max(strengths[0] or own, weakest)
    if position == 0:
        second = max((strengths[1] if len(strengths) > 1 else None) or 0.0, weakest)
        return [1.0, math.log(own), 1.0, math.log(own / second), 0.0]
    return [1.0, math.log(own), 0.0, 0.0, math.log(own / first)]


def shown(rp: replay.Replay, mode: str, policy: Any) -> list[dict[str, Any]]:
    """Each question's shown results (in its project and off-topic): right or not, its relevance,
    and the strengths of the ranking's first results, which the fit needs."""
    ranking = rp.plugin.ranking
    rank = sys.modules[ranking.__name__ + ".rank"]
    effective = policy.with_settings(rp.settings.embedding)
    rows = []
    for q in rp.questions:
        gold = {rp.by_key[(q.conversation, n)] for n in q.gold}
        for where, own in ((q.conversation, True), (quality.other_project(rp.built, q.conversation), False)):
            asked = rp.ask(q.text, where, mode, policy, ())
            ids = rp.answer(asked, policy, replay.LIMIT)
            features_ = asked.question.features()
            signals = asked.found.signals
            ranked = ranking.rank(features_, signals, effective, replay.LIMIT, asked.dated)
            keyword = rank.keyword_order(signals.keyword, effective)
            semantic = rank.semantic_order(signals.semantic, effective)
            words, meaning = rank.evidence_by_conversation(keyword, semantic)
            needed = effective.evidence_needed(features_.topical_terms)
            results = ranked.results[: len(ids)]
            strengths = [
                rank.match_strength(
                    words.get(r.message.conversation), needed, meaning.get(r.message.conversation), effective
                )
                for r in ranked.results
            ]
            for position, result in enumerate(results):
                rows.append(
                    {
                        "split": rp.split_of(q),
                        "own": own,
                        "right": own and result.message.session_id in gold,
                        "relevance": result.relevance,
                        "x": features(position, strengths) if strengths[position] is not None else None,
                    }
                )
    return rows


def fit(rows: list[dict[str, Any]], penalty: float = 1e-3) -> list[float]:
    judged = [r for r in rows if r["x"] is not None]
    x = np.array([r["x"] for r in judged])
    y = np.array([float(r["right"]) for r in judged])
    w = np.zeros(x.shape[1])
    for _ in range(100):
        p = 1 / (1 + np.exp(-x @ w))
        gradient = x.T @ (p - y) / len(y) + penalty * w
        hessian = (x.T * (p * (1 - p))) @ x / len(y) + penalty * np.eye(len(w))
        w -= np.linalg.solve(hessian, gradient)
        if np.abs(gradient).max() < 1e-10:
            break
    return [round(float(v), 2) for v in w]


def table(rows: list[dict[str, Any]], split: str) -> str:
    mine = [r for r in rows if r["split"] == split and r["relevance"] is not None]
    high = [r for r in mine if r["relevance"] >= 0.5]
    low = [r for r in mine if r["relevance"] < 0.5]

    def share(part: list[dict[str, Any]]) -> str:
        return f"{sum(r['right'] for r in part)}/{len(part)}" + (
            f" ({sum(r['right'] for r in part) / len(part):.2f})" if part else ""
        )

    tenths = []
    for tenth in range(10):
        part = [r for r in mine if min(int(r["relevance"] * 10), 9) == tenth]
        tenths.append(f"{sum(r['right'] for r in part) / len(part):.2f}:{len(part)}" if part else "-")
    offtopic = sum(1 for r in mine if not r["own"])
    return (
        f"{split:5s} >=0.5 right {share(high):18s} <0.5 right {share(low):20s} "
        f"off-topic results {offtopic:4d} | per tenth (right:n) {' '.join(tenths)}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fit", action="store_true", help="refit the relevance_* fields on the tune half")
    parser.add_argument("--modes", default=",".join(MODES))
    args, rest = parser.parse_known_args(argv)
    rp = replay.Replay(replay.parse_args(rest))
    try:
        policy = rp.base
        if args.fit:
            for mode, fields in (("hybrid", FIELDS), ("keyword", KEYWORD_FIELDS)):
                fitted = fit([r for r in shown(rp, mode, policy) if r["split"] == "tune"])
                print(
                    f"fitted on the tune half, {mode}: "
                    + ", ".join(f"{f}={v}" for f, v in zip(fields, fitted, strict=True))
                )
                policy = dataclasses.replace(policy, **dict(zip(fields, fitted, strict=True)))
        for mode in args.modes.split(","):
            rows = shown(rp, mode, policy)
            for split in ("tune", "check"):
                print(f"{mode:8s} {table(rows, split)}")
    finally:
        rp.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
