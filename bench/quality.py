"""Retrieval quality on LoCoMo and on developer-agent transcripts, end to end through Hermes's
tool dispatcher.

    .venv/bin/python bench/quality.py --model minilm            # LoCoMo, all questions, three modes
    .venv/bin/python bench/quality.py --model e5 --split check  # held-out conversations only
    .venv/bin/python bench/quality.py --limit-questions 50      # a quick look
    .venv/bin/python bench/quality.py --data transcripts --modes keyword,hybrid   # devsessions
    .venv/bin/python bench/quality.py --data both               # one after the other

``--data transcripts`` asks devsessions.py's 500 questions (its home, split and index, built
through the plugin's own commands) in each mode, beside the session-level BM25 baseline computed
in the same run, per half, question type and language (devsessions.py's docstring).

A real Hermes home (``.cache/bench/<model>-cs<size>-co<overlap>-cm<context>/home``) holds LoCoMo as
five projects; the plugin is installed, enabled and given consent as a user would; the index is
built once per model and chunk settings and reused. Fusion settings (rrf_k, weights, top_k) do not
change the index, so re-runs with other values embed nothing but the questions.
Every question is asked as ``project_history_search`` from a fresh session of its project via
``model_tools.handle_function_call``. Scores are session-level any@k/all@k; leaks count results
from another project.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import devsessions
import layout
import locomo
import metrics
import models_setup
import world

MODES = ("keyword", "semantic", "hybrid")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    models_setup.add_model_args(parser)
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of %(default)s")
    parser.add_argument(
        "--split",
        default="all",
        help="all | tune (conv-26/30/41) | check (conv-42/43) | comma-separated conversation ids",
    )
    parser.add_argument("--limit-questions", type=int, default=0, help="first N questions of each project")
    parser.add_argument("--limit", type=int, default=10, help="sessions asked for per question (max 10)")
    parser.add_argument(
        "--offtopic-limit",
        type=int,
        default=3,
        help="off-topic measure: every question also asked from the next conversation's project "
        "with this limit (the tool's default 3); 0 skips it",
    )
    parser.add_argument(
        "--data", default="locomo", choices=("locomo", "transcripts", "both"), help="which questions"
    )
    devsessions.add_shape_arg(parser)  # --data transcripts only
    parser.add_argument("--rebuild", action="store_true", help="rebuild the cached home and index")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    return parser.parse_args(argv)


def select(conversations: list[locomo.Conversation], split: str, limit: int) -> list[locomo.Question]:
    wanted = {
        "all": {c.sample_id for c in conversations},
        "tune": set(locomo.TUNE_SPLIT),
        "check": set(locomo.CHECK_SPLIT),
    }.get(split, set(split.split(",")))
    questions = []
    for conv in conversations:
        if conv.sample_id in wanted:
            questions.extend(conv.questions[:limit] if limit else conv.questions)
    return questions


def build_index(plugin, built: world.Built, settings) -> dict:
    """Index every project through ``index_scope`` (as ``hermes project-history index`` does), with
    the embedder searches use; timing and provider time."""
    env = layout.env(plugin)
    embedder = layout.embedder(plugin, settings.embedding, env.api_key())
    before_seconds, before_texts = embedder.provider_seconds, embedder.texts_embedded
    started = time.perf_counter()
    written = 0
    with layout.open_db(plugin, env) as db:
        project_map = layout.project_map(plugin, db)
        scopes = [project_map.resolve_scope(fresh, "") for fresh in built.fresh.values()]
    for found in scopes:
        n, complete = layout.indexer(plugin).index_scope(env, found.identity, found.session_ids, embedder)
        assert complete, "index incomplete"
        written += n
    return {
        "chunks_written": written,
        "seconds": time.perf_counter() - started,
        "provider_seconds": embedder.provider_seconds - before_seconds,
        "texts_embedded": embedder.texts_embedded - before_texts,
        "fingerprint": embedder.fingerprint,
    }


def ask(built: world.Built, questions: list[locomo.Question], mode: str, limit: int) -> tuple:
    import model_tools

    own = {conv: {s for s, (c, _) in built.sessions.items() if c == conv} for conv in built.fresh}
    by_key = {(c, n): s for s, (c, n) in built.sessions.items()}
    scores = {"all": metrics.Score(), "tune": metrics.Score(), "check": metrics.Score()}
    latencies, statuses, per_question = [], {}, []
    for q in questions:
        started = time.perf_counter()
        raw = model_tools.handle_function_call(
            "project_history_search",
            {"query": q.text, "mode": mode, "limit": limit},
            session_id=built.fresh[q.conversation],
        )
        latencies.append(time.perf_counter() - started)
        result = json.loads(raw)
        if not result.get("success"):
            raise SystemExit(f"search failed: {result}")
        status = result.get("semantic_status", "-")
        statuses[status] = statuses.get(status, 0) + 1
        ranked = [r["session_id"] for r in result["results"]]
        gold = {by_key[(q.conversation, n)] for n in q.gold}
        split = "tune" if q.conversation in locomo.TUNE_SPLIT else "check"
        for name in ("all", split):
            scores[name].add(ranked, gold, own[q.conversation])
        per_question.append([q.conversation, q.index, [built.sessions.get(s, ("?", -1))[1] for s in ranked]])
    return scores, latencies, statuses, per_question


def other_project(built: world.Built, conversation: str) -> str:
    """The conversation whose project an off-topic question is asked in: the next one, cyclically."""
    order = sorted(built.fresh)
    return order[(order.index(conversation) + 1) % len(order)]


def ask_offtopic(built: world.Built, questions: list[locomo.Question], mode: str, limit: int) -> dict:
    """Each question asked where it was never discussed: how many results come back anyway.

    Nothing in another LoCoMo conversation answers the question, so every result is noise the
    agent has to read; the measure is the mean number of results and the share answered with none.
    """
    import model_tools

    counts: dict[str, list[int]] = {"all": [], "tune": [], "check": []}
    for q in questions:
        where = other_project(built, q.conversation)
        raw = model_tools.handle_function_call(
            "project_history_search",
            {"query": q.text, "mode": mode, "limit": limit},
            session_id=built.fresh[where],
        )
        result = json.loads(raw)
        if not result.get("success"):
            raise SystemExit(f"search failed: {result}")
        n = len(result["results"])
        split = "tune" if q.conversation in locomo.TUNE_SPLIT else "check"
        counts["all"].append(n)
        counts[split].append(n)
    return {
        split: {
            "questions": len(ns),
            "mean_results": statistics.fmean(ns) if ns else 0.0,
            "share_none": sum(1 for n in ns if n == 0) / len(ns) if ns else 0.0,
        }
        for split, ns in counts.items()
    }


def timing_cells(latencies: list[float]) -> tuple[str, str]:
    ordered = sorted(latencies)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"{1000 * statistics.median(ordered):.1f}", f"{1000 * p95:.1f}"


def transcripts(args: argparse.Namespace, modes: list[str], embedding: dict) -> dict:
    """devsessions.py's questions in each mode and the BM25 baseline, in this run."""
    projects, all_questions = devsessions.load(devsessions.SHAPES[args.shape])
    split = args.split if args.split in ("tune", "check") else "all"
    questions = devsessions.select(all_questions, split, args.limit_questions)
    built = devsessions.build_home(projects, rebuild=args.rebuild, shape=args.shape)
    models_setup.install_policy(world.activate(built.home), args)
    index = None
    if modes == ["keyword"]:
        devsessions.keyword_only()
    else:
        index = devsessions.build_index(built, embedding, sorted({q.project for q in questions}))
    ranked, latency = {}, {}
    for mode in modes:
        ranked[mode], latency[mode] = devsessions.ask_plugin(built, questions, args.limit, mode)
    ranked["bm25"], latency["bm25"] = devsessions.ask_bm25(projects, questions, args.limit)
    own = {p.id: {t.id for t in p.sessions} for p in projects}
    scores = {name: devsessions.score(questions, r, own) for name, r in ranked.items()}
    print(f"transcripts: model={args.model} shape={args.shape} split={split} questions={len(questions)}")
    if index is not None:
        print(f"index built/checked in {index['seconds']:.1f}s")
    print(
        "latency p50/p95 ms: "
        + ", ".join(
            f"{name} {devsessions.percentile_ms(lat, 0.5):.1f}/{devsessions.percentile_ms(lat, 0.95):.1f}"
            for name, lat in latency.items()
        )
    )
    print()
    print(devsessions.side_by_side(scores))
    return {
        "index": index,
        "figures": {name: devsessions.figures(scores[name], latency[name]) for name in ranked},
        "ranked": {name: {str(i): r for i, r in by_q.items()} for name, by_q in ranked.items()},
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if args.data == "transcripts":
        with models_setup.embedding_config(args) as (_, embedding):
            found = transcripts(args, modes, embedding)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"transcripts": found}, indent=1))
        return found
    conversations = locomo.load()
    questions = select(conversations, args.split, args.limit_questions)
    semantic_wanted = any(m != "keyword" for m in modes)

    with models_setup.embedding_config(args) as (key, embedding):
        built = world.build_home(key, conversations, rebuild=args.rebuild)
        plugin = world.activate(built.home)
        models_setup.install_policy(plugin, args)
        settings = world.configure(plugin, embedding if semantic_wanted else None)
        index = build_index(plugin, built, settings) if semantic_wanted else None

        rows, report = [], {}
        extra = {"median ms": [], "p95 ms": [], "semantic_status": []}
        if args.offtopic_limit:
            extra.update({f"off-topic mean@{args.offtopic_limit}": [], "off-topic none": []})
        by_split: dict[str, dict[str, metrics.Score]] = {}
        for mode in modes:
            scores, latencies, statuses, per_question = ask(built, questions, mode, args.limit)
            score = scores["all"]
            rows.append((mode, score))
            by_split[mode] = scores
            median, p95 = timing_cells(latencies)
            extra["median ms"].append(median)
            extra["p95 ms"].append(p95)
            extra["semantic_status"].append(",".join(f"{k}:{v}" for k, v in sorted(statuses.items())))
            offtopic = (
                ask_offtopic(built, questions, mode, args.offtopic_limit) if args.offtopic_limit else None
            )
            if offtopic:
                extra[f"off-topic mean@{args.offtopic_limit}"].append(
                    f"{offtopic['all']['mean_results']:.2f}"
                )
                extra["off-topic none"].append(f"{offtopic['all']['share_none']:.3f}")
            report[mode] = {
                **score.row(),
                "leaks": score.leaks,
                "questions": score.questions,
                "median_ms": float(median),
                "p95_ms": float(p95),
                "statuses": statuses,
                "ranked": per_question,
                "offtopic": offtopic,
            }

    e = settings.embedding
    print(
        f"model={args.model} split={args.split} questions={len(questions)} "
        f"home built/loaded in {built.build_seconds:.1f}s"
    )
    if semantic_wanted:
        print(
            f"settings: rrf_k={e.rrf_k} keyword_weight={e.keyword_weight} "
            f"semantic_weight={e.semantic_weight} top_k={e.top_k} chunk_size={e.chunk_size} "
            f"chunk_overlap={e.chunk_overlap} context_messages={e.context_messages} fusion={args.fusion}"
        )
        print(
            f"index: {index['chunks_written']} chunks embedded in {index['seconds']:.1f}s "
            f"(provider {index['provider_seconds']:.1f}s; 0 chunks = reused from the cache)"
        )
    print()
    print(metrics.table(rows, extra))
    if set(MODES) <= set(by_split):
        split_rows, verdicts = [], {}
        for split in ("all", "tune", "check"):
            if not by_split["hybrid"][split].questions:
                continue
            rates = {m: by_split[m][split].row() for m in MODES}
            verdicts[split] = metrics.dominates(rates["hybrid"], rates["keyword"], rates["semantic"])
            if split != "all":
                split_rows += [(f"{split} {m}", by_split[m][split]) for m in MODES]
        if split_rows:
            split_extra = None
            if args.offtopic_limit:
                split_extra = {
                    "off-topic mean": [
                        f"{report[label.split()[1]]['offtopic'][label.split()[0]]['mean_results']:.2f}"
                        for label, _ in split_rows
                    ],
                    "off-topic none": [
                        f"{report[label.split()[1]]['offtopic'][label.split()[0]]['share_none']:.3f}"
                        for label, _ in split_rows
                    ],
                }
            print()
            print(metrics.table(split_rows, split_extra))
        print()
        print(
            "hybrid >= the better single mode on every metric: "
            + ", ".join(f"{split} {'yes' if ok else 'NO'}" for split, ok in verdicts.items())
        )
        report["hybrid_dominates"] = verdicts
    result = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "index": index,
        "modes": report,
    }
    if args.data == "both":
        print()
        with models_setup.embedding_config(args) as (_, embedding):
            result["transcripts"] = transcripts(args, modes, embedding)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
