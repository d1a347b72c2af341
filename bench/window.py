"""``since`` / ``until`` on the developer-agent transcripts (issue 32 part 2), through the dispatcher.

    .venv/bin/python bench/window.py
    .venv/bin/python bench/window.py --limit-questions 20

Every question of ``devsessions.py``'s home (keyword mode, limit 10) is asked three times from its
project's fresh session: without a window; with a two-week window around its answer session's day
(``since`` 7 days before it, ``until`` 7 days after, that day included); and with a window that
ends two days before the answer session (``since 2020-01-01``). Each result's message timestamp is
read back from ``state.db``: ``outside`` counts results not in their window (must be 0); ``found``
counts questions whose answer session is among the results (the window around it should keep
them, the window before it must find none).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import world  # noqa: I001  (before anything imports Hermes: harness pins HERMES_HOME)
import devsessions

DAY = 86400.0


def day(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--limit-questions", type=int, default=0)
    args = parser.parse_args(argv)
    projects, questions = devsessions.load()
    if args.limit_questions:
        questions = questions[: args.limit_questions]
    built = devsessions.build_home(projects)
    world.activate_env(built.home)
    import model_tools

    started_at = {t.id: t.started_at for p in projects for t in p.sessions}
    conn = sqlite3.connect(built.home / "state.db")
    tallies = {name: {"results": 0, "outside": 0, "found": 0} for name in ("none", "around", "before")}
    for q in questions:
        answer = min(started_at[a] for a in q.answers)
        windows = {
            "none": {},
            "around": {"since": day(answer - 7 * DAY), "until": day(answer + 7 * DAY)},
            "before": {"since": "2020-01-01", "until": day(answer - 2 * DAY)},
        }
        for name, window in windows.items():
            raw = model_tools.handle_function_call(
                devsessions.TOOL,
                {"query": q.text, "mode": "keyword", "limit": 10, **window},
                task_id=f"window-{q.index}",
                session_id=built.fresh[q.project],
            )
            result = json.loads(raw)
            if not result.get("success"):
                raise SystemExit(f"search failed for question {q.index}: {result}")
            low = datetime.fromisoformat(window["since"]).timestamp() if window else 0.0
            high = datetime.fromisoformat(window["until"]).timestamp() + DAY if window else float("inf")
            tally = tallies[name]
            for row in result["results"]:
                (stamp,) = conn.execute(
                    "SELECT timestamp FROM messages WHERE id = ?", (row["message_id"],)
                ).fetchone()
                tally["results"] += 1
                tally["outside"] += not low <= stamp < high
            found = {built.sessions.get(r["session_id"]) for r in result["results"]}
            tally["found"] += bool(q.answers & found)
    conn.close()
    figures = {"questions": len(questions), **tallies}
    print(json.dumps(figures, indent=1))
    return figures


if __name__ == "__main__":
    main()
