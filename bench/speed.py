"""Semantic query time at 10k / 100k / 300k in-scope chunks, and the indexing overhead.

    .venv/bin/python bench/speed.py                       # everything (a few minutes)
    .venv/bin/python bench/speed.py --sizes 10000,100000  # smaller
    .venv/bin/python bench/speed.py --skip-index          # query timings only

Query timings: one synthetic Hermes home (``.cache/bench/speed-v<N>/home``) with three projects
of 10k, 100k and 300k messages (one chunk each). Sessions are made with Hermes's ``SessionDB``;
the messages go in with one ``executemany`` on ``state.db``'s own ``messages`` table (Hermes's FTS
triggers fill both FTS indexes as usual), because ``SessionDB.append_message`` commits one
transaction per message (its rate is measured on a sample and printed). The vectors are random
384-dimensional unit vectors written with the plugin's ``IndexStore.write_chunks`` under the real
MiniLM model's fingerprint for exactly the chunks and content hashes ``pending_chunks`` asks for;
then ``index_scope`` runs once per project, as ``hermes project-history index`` would (watermarks,
matrix file), so the plugin takes them as a complete index and a full ``run_search`` works.

Each size is measured in a fresh process: *cold* is the first query of the process (the project's
matrix file mapped and the mask built, ``semantic.MATRICES.matrix``, plus ``top_messages``), then
with the in-process cache cleared; *warm* is a query against the cached matrix; both through the
plugin's functions, plus a full ``search.run_search`` (scope, index check, query embedding,
keyword path, fusion). Memory: ru_maxrss growth over the cold load and the tracemalloc peak of
one cold load (a mapped file is not a Python allocation: tracemalloc sees the masks only).

Indexing overhead: ``indexer.build_index`` over LoCoMo sessions holding about 2,000 messages with a
real model, against the provider's own time (``embedder.provider_seconds``). bench/scale.py has
the realistic home (50 projects, 300k messages) and the comparisons with bare references.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo
import models_setup
import scale
import world

SPEED_VERSION = 3  # 3: the module API (IndexStore, HermesDB, index_scope), float16 vectors
HOME_KEY = f"speed-v{SPEED_VERSION}"
DIM = 384
WORDS = [f"w{i:04d}" for i in range(5000)]
COMMON = "build test deploy database cache index query error fix release config user".split()
QUERIES = [
    "database cache error after the release",
    "how did we fix the index query",
    "w0042 w1234 config",
    "deploy test user",
    "w0007 build",
]


def synthetic_text(rng: random.Random) -> str:
    words = [
        rng.choice(COMMON) if rng.random() < 0.2 else rng.choice(WORDS) for _ in range(rng.randint(8, 30))
    ]
    return " ".join(words)


def mib(kib: int) -> float:
    return kib / 1024


# --------------------------------------------------------------------------- building the home


def build_speed_home(sizes: list[int], per_session: int, seed: int = 7) -> dict:
    """The synthetic home (cached); returns the manifest."""
    root = world.CACHE / HOME_KEY
    home = root / "home"
    manifest_path = root / "world.json"
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if manifest.get("sizes") == sizes and manifest.get("per_session") == per_session:
            return manifest
    import shutil

    if root.exists():
        shutil.rmtree(root)
    home.mkdir(parents=True)
    world.activate_env(home)
    manifest: dict = {"sizes": sizes, "per_session": per_session, "projects": {}, "timings": {}}
    w = world.harness.World(home, root / "work")
    rng = random.Random(seed)

    # What building through SessionDB.append_message would cost: one sample session.
    sample_dir = w.folder("sample")
    sid = world.harness.new_session_id()
    w.db.create_session(sid, "cli", cwd=sample_dir)
    sample = 2000
    started = time.perf_counter()
    for i in range(sample):
        w.db.append_message(sid, "user" if i % 2 == 0 else "assistant", synthetic_text(rng))
    per_message = (time.perf_counter() - started) / sample
    manifest["timings"]["append_message_per_message_ms"] = 1000 * per_message
    manifest["timings"]["append_message_extrapolated_s"] = per_message * sum(sizes)

    started = time.perf_counter()
    session_seconds = 0.0
    for size in sizes:
        folder = w.folder(f"p{size}")
        w.project(f"speed {size}", folder)
        sessions = []
        t0 = time.perf_counter()
        for _ in range(-(-size // per_session)):
            sid = world.harness.new_session_id()
            w.db.create_session(sid, "cli", cwd=folder)
            sessions.append(sid)
        fresh = world.harness.new_session_id()
        w.db.create_session(fresh, "cli", cwd=folder)
        session_seconds += time.perf_counter() - t0
        manifest["projects"][str(size)] = {"folder": folder, "sessions": sessions, "fresh": fresh}
    w.close()

    # Messages in bulk, into Hermes's table (its FTS triggers run), one transaction per project.
    import sqlite3

    conn = sqlite3.connect(home / "state.db")
    t0 = time.perf_counter()
    base_ts = time.time() - 86400 * 365
    for size in sizes:
        sessions = manifest["projects"][str(size)]["sessions"]
        rows = []
        for i in range(size):
            session = sessions[i // per_session]
            role = "user" if i % 2 == 0 else "assistant"
            rows.append((session, role, synthetic_text(rng), base_ts + i))
        with conn:
            conn.executemany(
                "INSERT INTO messages (session_id, role, content, timestamp, active) VALUES (?, ?, ?, ?, 1)",
                rows,
            )
            conn.execute(
                "UPDATE sessions SET message_count = (SELECT count(*) FROM messages m "
                "WHERE m.session_id = sessions.id)"
            )
    conn.close()
    manifest["timings"]["bulk_messages_s"] = time.perf_counter() - t0
    manifest["timings"]["sessions_via_sessiondb_s"] = session_seconds
    world.harness.enable_plugin(home)
    manifest_path.write_text(json.dumps(manifest))
    manifest["timings"].update(child(["--child-vectors"]))
    manifest["timings"]["total_build_s"] = time.perf_counter() - started
    manifest_path.write_text(json.dumps(manifest))
    return manifest


def write_vectors(seed: int = 7) -> dict:
    """In a child: random unit vectors under the real MiniLM fingerprint, for exactly the chunks
    (and content hashes) the plugin's own pending_chunks asks for; then one index_scope per project."""
    import numpy as np

    plugin = scale.activate(world.CACHE / HOME_KEY / "home", None)
    env = scale.configure(plugin)
    embedder = plugin.embedders.make_embedder(env.settings.embedding, None)
    framing = plugin.indexer.Framing.of(env.settings.embedding, embedder)
    vrng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    with plugin.hermes_db.HermesDB.open(env) as db:
        groups = plugin.scope.ProjectMap(db).groups()
        with (
            plugin.index_db.indexer_lock(env.data_dir),
            plugin.index_db.IndexStore.open_writable(env.index_path) as store,
        ):
            for group in groups:
                todo = plugin.indexer.pending_chunks(
                    db, store, group["session_ids"], embedder.fingerprint, framing
                ).todo
                for start in range(0, len(todo), 10_000):
                    batch = todo[start : start + 10_000]
                    vectors = vrng.standard_normal((len(batch), DIM)).astype(np.float32)
                    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                    scale.write_vectors(plugin, store, embedder.fingerprint, batch, vectors)
    write_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for group in groups:
        written, complete = plugin.indexer.index_scope(env, group["identity"], group["session_ids"], embedder)
        assert complete and written == 0, (written, complete)
    return {"write_chunks_s": write_s, "first_pass_s": time.perf_counter() - t0}


# --------------------------------------------------------------------------- one size, fresh process


def _median_ms(values: list[float]) -> float:
    return 1000 * statistics.median(values)


def measure_size(size: int, repeats: int) -> dict:
    import tracemalloc

    manifest = json.loads((world.CACHE / HOME_KEY / "world.json").read_text())
    project = manifest["projects"][str(size)]
    plugin = scale.activate(world.CACHE / HOME_KEY / "home", None)
    env = plugin.hermes_env.HermesEnv.current()
    semantic, search = plugin.semantic, plugin.search
    embedder = plugin.embedders.make_embedder(env.settings.embedding, None)
    query_vectors = [embedder.embed_query(q) for q in QUERIES]
    t0 = time.perf_counter()
    for q in QUERIES:
        embedder.embed_query(q)
    embed_ms = 1000 * (time.perf_counter() - t0) / len(QUERIES)
    top_k = env.settings.embedding.top_k
    out: dict = {"size": size, "top_k": top_k, "query_embedding_ms": embed_ms}

    def semantic_path(vector) -> tuple[float, float, float, float]:
        """(matrix, top_messages, total, resolve_scope) seconds, via the plugin's functions."""
        started = time.perf_counter()
        with plugin.hermes_db.HermesDB.open(env) as db:
            t0 = time.perf_counter()
            scope = plugin.scope.ProjectMap(db).resolve_scope(project["fresh"])
            t_scope = time.perf_counter() - t0
            with plugin.index_db.IndexStore.open_readonly(env.index_path) as store:
                t1 = time.perf_counter()
                matrix = semantic.MATRICES.matrix(
                    db, store, embedder.fingerprint, scope.session_ids, semantic.scope_file_key(scope)
                )
                t2 = time.perf_counter()
            hits = semantic.top_messages(matrix, vector, top_k)
            t3 = time.perf_counter()
        assert len(matrix) == size and hits, (len(matrix), size)
        return t2 - t1, t3 - t2, t3 - started, t_scope

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    load, top, total, _ = semantic_path(query_vectors[0])  # first query of the process
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out["cold_first_ms"] = {"matrix": 1000 * load, "top_messages": 1000 * top, "total": 1000 * total}
    out["rss_growth_mib"] = mib(rss1 - rss0)
    out["matrix_mib"] = size * DIM * 4 / 2**20

    colds = []
    for i in range(repeats):
        semantic.MATRICES.clear()
        colds.append(semantic_path(query_vectors[i % len(query_vectors)]))
    out["cold_cleared_ms"] = {
        "matrix": _median_ms([c[0] for c in colds]),
        "top_messages": _median_ms([c[1] for c in colds]),
        "total": _median_ms([c[2] for c in colds]),
    }
    warms = [semantic_path(query_vectors[i % len(query_vectors)]) for i in range(repeats * 2)]
    out["warm_ms"] = {
        "matrix (freshness check)": _median_ms([w[0] for w in warms]),
        "top_messages": _median_ms([w[1] for w in warms]),
        "total": _median_ms([w[2] for w in warms]),
        "resolve_scope": _median_ms([w[3] for w in warms]),
    }

    semantic.MATRICES.clear()
    tracemalloc.start()
    semantic_path(query_vectors[0])
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out["tracemalloc_peak_cold_mib"] = peak / 2**20

    # The index check a search runs first, nothing new: first of the process (watermarks read
    # from embeddings.db) and later ones.
    with plugin.hermes_db.HermesDB.open(env) as db:
        scope = plugin.scope.ProjectMap(db).resolve_scope(project["fresh"])
    checks = []
    for _ in range(3):
        started = time.perf_counter()
        written, complete = plugin.indexer.index_scope(env, scope.identity, scope.session_ids, embedder)
        checks.append(time.perf_counter() - started)
        assert complete and written == 0, (written, complete)
    out["index_check_first_ms"] = 1000 * checks[0]
    out["index_check_warm_ms"] = _median_ms(checks[1:])

    for mode in ("semantic", "hybrid"):
        times = []
        for i in range(repeats):
            started = time.perf_counter()
            result = search.run_search(QUERIES[i % len(QUERIES)], mode, 10, project["fresh"])
            times.append(time.perf_counter() - started)
            assert result["success"] and result.get("semantic_status") == "ready", result.get(
                "semantic_status"
            )
        out[f"run_search_{mode}_ms"] = _median_ms(times)
    out["peak_rss_mib"] = mib(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return out


# --------------------------------------------------------------------------- indexing overhead


def measure_index(model: str, messages_wanted: int) -> dict:
    """build_index over LoCoMo sessions with ~``messages_wanted`` messages, from an empty index."""
    conversations = locomo.load()
    built = world.build_home("speed-index", conversations)
    args = argparse.Namespace(model=model, **dict.fromkeys(models_setup.TUNABLES), fusion="message")
    with models_setup.embedding_config(args) as (_, embedding):
        plugin = scale.activate(built.home, None)
        env = scale.configure(plugin, embedding)
        plugin.index_db.purge(env.index_path)
        plugin.semantic.MATRICES.clear()
        chosen, count = [], 0
        with plugin.hermes_db.HermesDB.open(env) as db:
            for sid in built.sessions:
                if count >= messages_wanted:
                    break
                chosen.append(sid)
                count += len(db.live_messages([sid]))
        embedder = plugin.embedders.make_embedder(env.settings.embedding, env.api_key())
        embedder.embed_query("warm up the model")  # model load is not indexing

        def build() -> tuple[int, bool]:
            with (
                plugin.index_db.indexer_lock(env.data_dir),
                plugin.hermes_db.HermesDB.open(env) as db,
                plugin.index_db.IndexStore.open_writable(env.index_path) as store,
            ):
                return plugin.indexer.build_index(db, store, chosen, env.settings.embedding, embedder)

        before = embedder.provider_seconds
        started = time.perf_counter()
        written, complete = build()
        total = time.perf_counter() - started
        provider = embedder.provider_seconds - before
        again_started = time.perf_counter()
        rewritten, _ = build()
        again = time.perf_counter() - again_started
    return {
        "model": model,
        "messages": count,
        "chunks": written,
        "complete": complete,
        "build_index_s": total,
        "provider_s": provider,
        "ratio": total / provider if provider else float("nan"),
        "overhead_s": total - provider,
        "second_run_s": again,
        "second_run_chunks": rewritten,
        "texts_per_s": written / total if total else float("nan"),
    }


# --------------------------------------------------------------------------- main


def child(argv: list[str]) -> dict:
    done = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True, env=os.environ)
    if done.returncode:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-8000:])
        raise SystemExit(f"child {argv} failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000,300000")
    parser.add_argument("--per-session", type=int, default=100, help="messages per synthetic session")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--index-models", default="minilm", help="comma-separated: minilm,e5")
    parser.add_argument("--index-messages", type=int, default=2000)
    parser.add_argument("--skip-index", action="store_true")
    parser.add_argument("--skip-query", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child-size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-index", help=argparse.SUPPRESS)
    parser.add_argument("--child-vectors", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child_size:
        print(json.dumps(measure_size(args.child_size, args.repeats)))
        return
    if args.child_index:
        print(json.dumps(measure_index(args.child_index, args.index_messages)))
        return
    if args.child_vectors:
        print(json.dumps(write_vectors()))
        return

    sizes = [int(s) for s in args.sizes.split(",")]
    report: dict = {"cpus": os.cpu_count(), "load_average": os.getloadavg()}
    if not args.skip_query:
        manifest = build_speed_home(sizes, args.per_session)
        t = manifest["timings"]
        print(
            f"synthetic home built in {t['total_build_s']:.0f}s, cached under .cache/bench/{HOME_KEY} "
            f"(sessions via SessionDB {t['sessions_via_sessiondb_s']:.1f}s, bulk messages "
            f"{t['bulk_messages_s']:.1f}s, vectors via IndexStore.write_chunks {t['write_chunks_s']:.1f}s, "
            f"first index_scope pass {t['first_pass_s']:.1f}s; SessionDB.append_message costs "
            f"{t['append_message_per_message_ms']:.2f} ms/message, "
            f"{t['append_message_extrapolated_s']:.0f}s for all {sum(sizes)} messages)"
        )
        report["build"] = t
        rows = [child(["--child-size", str(size), "--repeats", str(args.repeats)]) for size in sizes]
        report["query"] = rows
        print()
        print(
            "| in-scope chunks | cold first query ms (matrix / top-k) | cold, cache cleared ms | "
            "warm ms (resolve_scope / freshness / top-k) | index check ms, first / later | "
            "run_search semantic ms | run_search hybrid ms | "
            "query embedding ms | matrix MiB | RSS growth, cold MiB | tracemalloc peak, cold MiB |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            c, cc, w = r["cold_first_ms"], r["cold_cleared_ms"], r["warm_ms"]
            print(
                f"| {r['size']:,} | {c['total']:.0f} ({c['matrix']:.0f} / {c['top_messages']:.1f}) "
                f"| {cc['total']:.0f} | {w['total']:.1f} ({w['resolve_scope']:.1f} / "
                f"{w['matrix (freshness check)']:.1f} / "
                f"{w['top_messages']:.1f}) | {r['index_check_first_ms']:.0f} / "
                f"{r['index_check_warm_ms']:.1f} "
                f"| {r['run_search_semantic_ms']:.0f} | "
                f"{r['run_search_hybrid_ms']:.0f} | {r['query_embedding_ms']:.1f} | {r['matrix_mib']:.0f} "
                f"| {r['rss_growth_mib']:.0f} | {r['tracemalloc_peak_cold_mib']:.0f} |"
            )
    if not args.skip_index:
        rows = [
            child(["--child-index", m, "--index-messages", str(args.index_messages)])
            for m in args.index_models.split(",")
        ]
        report["index"] = rows
        print()
        print(
            "| model | messages | chunks | build_index s | provider s | ratio | overhead s | texts/s "
            "| 2nd run s |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(
                f"| {r['model']} | {r['messages']} | {r['chunks']} | {r['build_index_s']:.1f} | "
                f"{r['provider_s']:.1f} | {r['ratio']:.3f} | {r['overhead_s']:.2f} | "
                f"{r['texts_per_s']:.1f} | {r['second_run_s']:.2f} |"
            )
    print(f"\nload average at start: {report['load_average']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
