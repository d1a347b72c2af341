"""What a faulty embedding provider costs the first search of a fresh process.

Every ``hermes chat -q`` is a fresh process, so its one search pays for the imports, the
provider's client and the scope's resolution as well as for the provider itself. The README
promises that a provider that hangs, drips, refuses the key or changes its model costs a search
at most ``index_budget_seconds`` plus a second; this measures that promise on a real Hermes home
(one project of the developer transcripts, a counting OpenAI-compatible server on loopback with
multilingual-e5-small behind it, the default budget and timeouts).

Each fault is switched on with one new message waiting to be indexed (the conversation that just
ended), then each mode is asked once, each in a fresh Python through
``model_tools.handle_function_call``, timed inside the child around the call alone. The printed
ratio is the call's time over budget + 1 s (at most 1.0 is the promise); the ``ok`` rows are the
same calls with a healthy provider, side by side.

    .venv/bin/python bench/budget.py [--budget 5] [--project guthubrx/bigmind] [--sessions 6]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import devsessions
import faults
import harness
import world
from embedding_server import EmbeddingServer

FAULTS = ("ok", "hang", "drip", "echo", "retry_later", "down", "disconnect", "wider", "duplicate_index")
SHOWN = {"echo": "401 (echo)", "retry_later": "429 retry in 1 h", "wider": "width change"}
MODES = ("semantic", "hybrid")


def build(root: Path, project_id: str, sessions: int) -> tuple[harness.World, str, str]:
    projects, _ = devsessions.load()
    project = next(p for p in projects if p.id == project_id)
    home = root / "home"
    home.mkdir()
    world.activate_env(home)
    w = harness.World(home, root / "work")
    folder = w.folder("app", git=True)
    w.project(project.id, folder)
    for transcript in sorted(project.sessions, key=lambda t: t.started_at)[:sessions]:
        w.session(folder, transcript.messages, title=transcript.id)
    current = w.session(folder, [("user", "hi")])
    harness.enable_plugin(home)
    return w, folder, current


def hermes(w: harness.World, folder: str, *args: str) -> None:
    done = harness.run_hermes(w.home, "project-history", *args, cwd=Path(folder), timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"hermes project-history {' '.join(args)} failed: {done.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=5.0, help="index_budget_seconds (default 5)")
    parser.add_argument("--project", default="guthubrx/bigmind")
    parser.add_argument("--sessions", type=int, default=6, help="transcripts in the project")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)

    from hermes_cli.config import save_config

    rows = []
    with tempfile.TemporaryDirectory(prefix="phr-budget-") as tmp, EmbeddingServer() as server:
        w, folder, current = build(Path(tmp), args.project, args.sessions)
        try:
            embedding = {
                "model": "e5-small",
                "base_url": server.base_url,
                "input_type": True,
                "index_budget_seconds": args.budget,
                "batch_size": 32,
                "timeout_seconds": 20.0,
            }
            save_config(
                {"plugins": {"project-history-recall": {"embedding": embedding}}}, merge_existing=True
            )
            hermes(w, folder, "enable", "--yes", "--all-projects")
            # Indexing is not what is measured: small batches and a long timeout, so that a busy
            # machine indexes at all; the searches then run with the default batch and timeout.
            slow_ok = {**embedding, "batch_size": 4, "timeout_seconds": 300}
            save_config({"plugins": {"project-history-recall": {"embedding": slow_ok}}}, merge_existing=True)
            started = time.monotonic()
            hermes(w, folder, "index")
            save_config(
                {"plugins": {"project-history-recall": {"embedding": embedding}}}, merge_existing=True
            )
            print(f"indexed in {time.monotonic() - started:.0f}s; budget {args.budget:g}s")
            print(f"{'fault':<18} {'mode':<9} {'seconds':>8} {'/ (budget+1)':>13}  status: error")
            for fault in FAULTS:
                for mode in MODES:
                    w.session(folder, [("user", f"{fault} {mode}: the deploy failed again")])
                    server.reset()
                    server.set_mode(fault)
                    (call,) = faults.call_tool_in_child(w.home, current, "why did the build fail", [mode])
                    data = call.data
                    error = data.get("semantic_error", data.get("error", ""))
                    ratio = call.seconds / (args.budget + 1)
                    rows.append(
                        {
                            "fault": fault,
                            "mode": mode,
                            "seconds": round(call.seconds, 3),
                            "ratio": round(ratio, 3),
                            "status": data.get("semantic_status"),
                            "error": error,
                            "keyword_results": len(data.get("results", [])),
                        }
                    )
                    print(
                        f"{SHOWN.get(fault, fault):<18} {mode:<9} {call.seconds:8.2f} {ratio:13.2f}  "
                        f"{data.get('semantic_status')}: {error[:150]}"
                    )
                server.set_mode("ok")
        finally:
            w.close()
    worst = max(r["ratio"] for r in rows if r["fault"] != "ok")
    print(f"worst fault call / (budget + 1 s): {worst:.2f}")
    figures = {"budget": args.budget, "rows": rows, "worst_ratio": worst}
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return figures


if __name__ == "__main__":
    main()
