"""Which fusion settings hold up across models and index variants (reads tune.py's JSON files).

    .venv/bin/python bench/compare.py bench/results/grid/*.json
    .venv/bin/python bench/compare.py bench/results/grid/*.json --setting session,5,2.5,50

For every setting (strategy, rrf_k, keyword_weight, top_k) and every file (model x index), the
margin is hybrid minus the better single mode on the worst of the six metrics; a setting is
robust when the margin is >= 0 on the tune split, the held-out check split and all questions in
every file. One question is 1/495 (tune), 1/502 (check) or 1/997 (all).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import metrics

SPLITS = ("tune", "check", "all")


def key(entry: dict) -> tuple:
    return (entry["strategy"], entry["rrf_k"], entry["keyword_weight"], entry["top_k"])


def name(setting: tuple) -> str:
    strategy, k, wk, top_k = setting
    return f"{strategy} k={k} wk={wk:g} top_k={top_k}"


def variant(path: Path, data: dict) -> str:
    return data.get("key") or path.stem


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--show", type=int, default=12)
    parser.add_argument("--setting", action="append", default=[], help="strategy,k,wk,top_k to detail")
    args = parser.parse_args(argv)

    runs = {}
    for path in args.files:
        data = json.loads(path.read_text())
        runs[variant(path, data)] = {key(e): e for e in data["results"]}
    settings = set.intersection(*(set(r) for r in runs.values()))

    def worst(setting: tuple) -> float:
        return min(run[setting][split]["margin"] for run in runs.values() for split in SPLITS)

    def mean_gain(setting: tuple) -> float:
        cols = ("any@5", "all@10")
        values = [run[setting]["all"]["hybrid"][c] for run in runs.values() for c in cols]
        return sum(values) / len(values)

    ranked = sorted(
        settings, key=lambda s: (worst(s) >= -1e-9, round(worst(s), 4), mean_gain(s)), reverse=True
    )
    names = list(runs)
    print("Worst margin (hybrid - better single mode, worst metric) over tune/check/all, per variant;")
    print("mean = hybrid any@5 and all@10 averaged over all variants, all questions.")
    print()
    print("| setting | " + " | ".join(names) + " | worst | mean any@5/all@10 |")
    print("|---|" + "---:|" * (len(names) + 2))
    for setting in ranked[: args.show]:
        cells = [f"{min(runs[n][setting][s]['margin'] for s in SPLITS):+.3f}" for n in names]
        print(
            f"| {name(setting)} | "
            + " | ".join(cells)
            + f" | {worst(setting):+.3f} | {mean_gain(setting):.3f} |"
        )
    robust = [s for s in settings if worst(s) >= -1e-9]
    print(f"\n{len(robust)} of {len(settings)} settings are robust (margin >= 0 everywhere).")

    for text in args.setting:
        strategy, k, wk, top_k = text.split(",")
        setting = (strategy, int(k), float(wk), int(top_k))
        print(f"\n{name(setting)}, all questions\n")
        rows, labels = [], []
        first = True
        for n, run in runs.items():
            entry = run[setting]["all"]
            for mode in ("keyword", "semantic", "hybrid"):
                if mode == "keyword" and not first:
                    continue
                score = metrics.Score(questions=1, leaks=None)
                score.hits = dict(entry[mode])
                rows.append((f"{n} {mode}" if mode != "keyword" else "keyword", score))
                labels.append("yes" if mode == "hybrid" and entry["dominates"] else "")
            first = False
        print(metrics.table(rows, {"dominates": labels}))


if __name__ == "__main__":
    main()
