"""Where indexing runs: turn latency, and recall of the first search after a conversation ends.

    .venv/bin/python bench/freshness.py                  # MiniLM in process, 10 trials per project
    .venv/bin/python bench/freshness.py --trials 4 --json bench/results/freshness.json

On the LoCoMo home (``world.py``, 5 projects): semantic search on (MiniLM int8, in process), every
project indexed. A trial takes a question whose gold is one session S and makes S "just ended and
not indexed yet" (its vectors and watermark removed, as before any indexer saw it), then asks the
question once from the project's fresh session, as the agent's first search after S ended, under
each strategy:

* ``inline``: the search embeds what is new within ``index_budget_seconds`` (5 s), through the
  dispatcher (``model_tools.handle_function_call``);
* ``session-end``: the plugin's ``on_session_finalize`` hook ran for S when it ended (its time is
  the ending process's, reported apart), then the search (``index_budget_seconds`` 0: it embeds
  nothing itself);
* ``background``: ``index_budget_seconds`` 0: the search starts a background indexer and answers
  at once (the indexer is let finish before the next trial);
* ``index-only``: the search reads what is indexed and embeds nothing (``build_index=False``,
  the terminal's search), as if only ``hermes project-history index`` ever indexed.

Reported per strategy: search p50 / p95 (ms), hook p50 (ms), S in the hybrid top 5, and S found by
the semantic side at all (``score_source`` semantic or both).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import world  # noqa: I001  (before anything imports Hermes: harness pins HERMES_HOME)
import harness
import indexing
import locomo

STRATEGIES = ("inline", "session-end", "background", "index-only")
TOOL = "project_history_search"


def forget(home: Path, session_id: str) -> None:
    """S as no indexer has seen it: its vectors and watermarks gone, the store's generation moved."""
    db = home / "plugins" / world.PLUGIN_KEY / "embeddings.db"
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM chunks WHERE session_id = ?", (session_id,))
        conn.execute("DELETE FROM watermarks WHERE session_id = ?", (session_id,))
        conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")


def trials(built: world.Built, per_project: int) -> list[tuple[locomo.Question, str]]:
    """(question, its one gold session), distinct sessions, ``per_project`` per conversation."""
    chosen: list[tuple[locomo.Question, str]] = []
    for conv in locomo.load():
        seen: set[str] = set()
        for q in conv.questions:
            if (
                len(q.gold) != 1
                or len([c for c in chosen if c[0].conversation == conv.sample_id]) >= per_project
            ):
                continue
            sid = built.session_of(conv.sample_id, next(iter(q.gold)))
            if sid not in seen:
                seen.add(sid)
                chosen.append((q, sid))
    return chosen


def ask(plugin: Any, built: world.Built, q: locomo.Question, strategy: str) -> dict[str, Any]:
    session = built.fresh[q.conversation]
    if strategy == "index-only":
        return plugin.search.run_search(
            plugin.process_state(), q.text, "hybrid", 10, session, build_index=False
        )
    import model_tools

    raw = model_tools.handle_function_call(
        TOOL, {"query": q.text, "mode": "hybrid", "limit": 10}, session_id=session
    )
    return json.loads(raw)


def run(per_project: int, strategies: list[str]) -> dict[str, Any]:
    built = world.build_home("locomo")
    plugin = world.activate(built.home)
    import importlib

    for name in ("store", "semantic", "projects", "search", "handlers"):
        setattr(plugin, name, importlib.import_module(f"{harness.PLUGIN_MODULE}.{name}"))
    embedding = indexing.model_settings("minilm")
    env = indexing.configure(plugin, embedding)
    state = plugin.process_state()
    door = plugin.semantic.Semantic(env, state.semantic, state.schemas)
    embedder = door.embedder()
    with plugin.store.HermesDB.open(env, state.schemas) as db:
        groups = plugin.projects.ProjectMap(db, state.projects).groups()
    for group in groups:
        door.index(group["identity"], group["session_ids"], embedder)
    chosen = trials(built, per_project)
    report: dict[str, Any] = {"trials": len(chosen)}
    for strategy in strategies:
        budget = 0 if strategy in ("background", "session-end") else 5
        indexing.configure(plugin, {**embedding, "index_budget_seconds": budget})
        latencies, hooks, top5, semantic_found, statuses = [], [], 0, 0, {}
        for q, sid in chosen:
            forget(built.home, sid)
            if strategy == "session-end":
                started = time.perf_counter()
                plugin.handlers.session_ended(plugin.process_state(), session_id=sid)
                hooks.append(time.perf_counter() - started)
            started = time.perf_counter()
            result = ask(plugin, built, q, strategy)
            latencies.append(time.perf_counter() - started)
            statuses[result.get("semantic_status")] = statuses.get(result.get("semantic_status"), 0) + 1
            ranked = [r["session_id"] for r in result["results"]]
            top5 += sid in ranked[:5]
            semantic_found += any(
                r["session_id"] == sid and r["score_source"] in ("semantic", "both")
                for r in result["results"]
            )
            plugin.process_state().semantic.background.wait()
            door.index(*_group_of(groups, sid), embedder)  # complete again for the next trial
        n = len(chosen)
        report[strategy] = {
            "search_p50_ms": 1000 * statistics.median(latencies),
            "search_p95_ms": 1000 * sorted(latencies)[int(0.95 * (n - 1))],
            "hook_p50_ms": 1000 * statistics.median(hooks) if hooks else None,
            "top5": top5 / n,
            "semantic_found": semantic_found / n,
            "statuses": statuses,
        }
        print(strategy, json.dumps(report[strategy]), flush=True)
    return report


def _group_of(groups: list[dict[str, Any]], session_id: str) -> tuple[dict[str, Any], list[str]]:
    group = next(g for g in groups if session_id in g["session_ids"])
    return group["identity"], group["session_ids"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--trials", type=int, default=10, help="questions (distinct gold sessions) per project"
    )
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = run(args.trials, args.strategies.split(","))
    print(
        "| strategy | search p50 / p95 ms | hook p50 ms | S in hybrid top 5 | S found by semantic | status |"
    )
    print("|---|---:|---:|---:|---:|---|")
    for strategy in [s for s in STRATEGIES if s in report]:
        r = report[strategy]
        hook = f"{r['hook_p50_ms']:.0f}" if r["hook_p50_ms"] is not None else "-"
        print(
            f"| {strategy} | {r['search_p50_ms']:.0f} / {r['search_p95_ms']:.0f} | {hook} | "
            f"{r['top5']:.2f} | {r['semantic_found']:.2f} | {r['statuses']} |"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
