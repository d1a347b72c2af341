"""Scope resolution and the keyword path, side by side with Hermes's own search, in one run.

    .venv/bin/python bench/scope_speed.py                 # 4,100 sessions, 5 queries x 30 rounds
    .venv/bin/python bench/scope_speed.py --sessions 2000 --rounds 10
    .venv/bin/python bench/scope_speed.py --rebuild       # build the home again

The home is built with Hermes's own ``SessionDB`` (``create_session``, ``update_session_cwd`` for
the gateway-style rows that carry a git root, ``append_message`` for two messages per session) and
``projects_db``, under ``/tmp/phr-bench-scope-v<N>-<sessions>/`` (reused while intact; nothing is
written into the repository). It holds four explicit projects (50 sub-folders each), three git
repositories with 50 package folders each (CLI rows: cwd only, the plugin must ask git), a
compressed conversation, and 100 loose folders in no project; every session has two messages
of filler words (each in about 0.5% of messages), one in five with a topic word (each in about
1%), so every query hits every project.

Printed, all in this one process (p50 over ``--rounds``):

* ``resolve_scope`` of a fresh session of the largest explicit project and of one repo package:
  *first* (a new process: ``--first`` runs itself in a child, once with the plugin's persisted
  git answers removed, once with them kept) and *warm* (the same process, data unchanged), and
  *after a write* (one message appended to another session before each call: the scope must be
  rebuilt from the data, but not re-attributed);
* the keyword search through ``model_tools.handle_function_call`` (``mode: keyword``, limit 3)
  against ``SessionDB.search_messages`` on the same queries, as Hermes's ``session_search``
  issues it (user/assistant, without subagent/tool sources, 300 rows): both p50 and the ratio.

No figure here is asserted anywhere; the tests only check behaviour.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import layout
import world

BENCH_VERSION = 2
VOCABULARY = (
    "migration cache index deploy rollback schema token budget latency queue worker retry "
    "timeout parser lexer grammar widget layout palette invoice ledger refund webhook"
).split()
QUERIES = ["migration", "ledger", "webhook", "w0042", "w1234"]
EXPLICIT, REPOS, SUBFOLDERS, LOOSE = 4, 3, 50, 100


FILLER = [f"w{i:04d}" for i in range(3000)]


def _text(rng: random.Random) -> str:
    """Mostly filler words (each in ~0.5% of messages), a topic word in one message of five."""
    words = [rng.choice(FILLER) for _ in range(rng.randint(8, 20))]
    if rng.random() < 0.2:
        words.insert(rng.randrange(len(words)), rng.choice(VOCABULARY))
    return " ".join(words)


def build(sessions: int, rebuild: bool) -> dict:
    root = Path(f"/tmp/phr-bench-scope-v{BENCH_VERSION}-{sessions}")
    manifest_path = root / "world.json"
    if manifest_path.exists() and not rebuild and (root / "home" / "state.db").exists():
        return json.loads(manifest_path.read_text())
    if root.exists():
        shutil.rmtree(root)
    home = root / "home"
    home.mkdir(parents=True)
    world.activate_env(home)
    started = time.perf_counter()
    w = world.harness.World(home, root / "work")
    rng = random.Random(5)
    folders: list[tuple[str, str | None]] = []  # (cwd, recorded git root)
    explicit = []
    for p in range(EXPLICIT):
        top = w.folder(f"projects/p{p}")
        explicit.append(w.project(f"Project {p}", top))
        folders += [(w.folder(f"projects/p{p}/sub{j}"), None) for j in range(SUBFOLDERS)]
    repos = []
    for r in range(REPOS):
        repo = w.git_repo(f"repos/r{r}")
        repos.append(repo)
        for j in range(SUBFOLDERS):
            folders.append((w.folder(f"repos/r{r}/pkg{j}"), repo if j % 5 == 0 else None))
    folders += [(w.folder(f"loose/l{k}"), None) for k in range(LOOSE)]
    for n in range(sessions):
        cwd, root_recorded = folders[n % len(folders)]
        w.session(
            cwd,
            [("user", _text(rng)), ("assistant", _text(rng))],
            git_repo_root=root_recorded,
        )
    # One compressed conversation in project 0 (a chain of three segments).
    parent = w.session(folders[0][0], [("user", "migration before compression")])
    for _ in range(2):
        w.db.end_session(parent, "compression")
        child = world.harness.new_session_id()
        w.db.create_session(child, "cli", cwd=folders[0][0], parent_session_id=parent)
        w.add(child, [("user", "migration after compression")])
        parent = child
    fresh_explicit = w.session(str(root / "work" / "projects" / "p0"))
    fresh_repo = w.session(folders[EXPLICIT * SUBFOLDERS][0])
    writer = w.session(folders[1][0], [("user", "the session the write test appends to")])
    w.close()
    world.harness.enable_plugin(home)
    manifest = {
        "home": str(home),
        "sessions": sessions,
        "fresh_explicit": fresh_explicit,
        "fresh_repo": fresh_repo,
        "writer": writer,
        "build_seconds": time.perf_counter() - started,
    }
    manifest_path.write_text(json.dumps(manifest, indent=1))
    return manifest


def p50_ms(samples: list[float]) -> float:
    return 1000 * statistics.median(samples)


def _resolve(plugin, session_id: str) -> tuple[float, int]:
    """One resolve_scope through the plugin's own objects: (seconds, sessions in scope)."""
    started = time.perf_counter()
    env = layout.env(plugin)
    with layout.open_db(plugin, env) as db:
        scope = layout.project_map(plugin, db).resolve_scope(session_id)
    return time.perf_counter() - started, scope.sessions_in_scope


def first_call(manifest: dict) -> None:
    """Child mode: the first resolve_scope of a new process, printed as JSON."""
    plugin = world.activate(Path(manifest["home"]))
    out = {}
    for key in ("fresh_explicit", "fresh_repo"):
        seconds, count = _resolve(plugin, manifest[key])
        out[key] = {"ms": 1000 * seconds, "in_scope": count}
    print(json.dumps(out))


def run_child(manifest_file: Path) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--first", str(manifest_file)], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=4100)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--first", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.first:
        first_call(json.loads(Path(args.first).read_text()))
        return

    manifest = build(args.sessions, args.rebuild)
    home = Path(manifest["home"])
    manifest_file = home.parent / "world.json"
    built = manifest["build_seconds"]
    print(f"home: {home} ({manifest['sessions']} sessions + a chain; built in {built:.0f} s)")

    # First calls, each in a new process: without and with the plugin's persisted git answers.
    world.install(home)
    data_dir = home / "plugins" / world.PLUGIN_KEY
    for persisted in sorted(data_dir.glob("git_roots.db*")):
        persisted.unlink()
    cold = run_child(manifest_file)
    kept = run_child(manifest_file)

    plugin = world.activate(home)
    import model_tools
    from hermes_state import SessionDB

    rows = []
    for key in ("fresh_explicit", "fresh_repo"):
        _resolve(plugin, manifest[key])
        warm = [_resolve(plugin, manifest[key])[0] for _ in range(args.rounds)]
        rows.append((key, cold[key], kept[key], p50_ms(warm)))

    hermes = SessionDB(db_path=home / "state.db")
    writes = []
    for n in range(min(args.rounds, 10)):
        hermes.append_message(manifest["writer"], "user", f"write {n} between two searches")
        writes.append(_resolve(plugin, manifest["fresh_explicit"])[0])

    print()
    print("resolve_scope ms      | first, new process | first, persisted git answers | warm p50 | in scope")
    print("----------------------|-------------------:|-----------------------------:|---------:|--------:")
    for key, first, again, warm in rows:
        print(f"{key:21} | {first['ms']:18.1f} | {again['ms']:28.1f} | {warm:8.2f} | {first['in_scope']:7d}")
    print(f"after a write (p50 of {len(writes)}): {p50_ms(writes):.2f} ms")

    print()
    print("query                  | dispatcher keyword p50 ms | SessionDB.search_messages p50 ms | ratio")
    print("-----------------------|--------------------------:|---------------------------------:|------:")
    ratios = []
    plugin_all, hermes_all = [], []
    for query in QUERIES:
        args_json = {"query": query, "mode": "keyword", "limit": 3}
        mine, theirs = [], []
        for _ in range(args.rounds):
            started = time.perf_counter()
            raw = model_tools.handle_function_call(
                "project_history_search", args_json, task_id="bench", session_id=manifest["fresh_explicit"]
            )
            mine.append(time.perf_counter() - started)
            started = time.perf_counter()
            hermes.search_messages(
                query, role_filter=["user", "assistant"], exclude_sources=["subagent", "tool"], limit=300
            )
            theirs.append(time.perf_counter() - started)
        result = json.loads(raw)
        assert result.get("success") and result.get("results"), result
        ratio = statistics.median(mine) / statistics.median(theirs)
        ratios.append(ratio)
        plugin_all += mine
        hermes_all += theirs
        print(f"{query:22} | {p50_ms(mine):25.2f} | {p50_ms(theirs):32.2f} | {ratio:5.2f}")
    print(
        f"{'all':22} | {p50_ms(plugin_all):25.2f} | {p50_ms(hermes_all):32.2f} | "
        f"{statistics.median(plugin_all) / statistics.median(hermes_all):5.2f}"
    )
    hermes.close()


if __name__ == "__main__":
    main()
