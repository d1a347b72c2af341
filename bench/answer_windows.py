"""What issue 30.3's answer window costs an answer: the development transcripts' 500 questions
through the dispatcher (keyword mode, the Hermes shape by default), and per result the characters
of ``reply``/``question``, of ``tool_activity`` (issue 30.1) and of the whole answer, as tokens
at 4 characters each (CJK counted one character a token, as ``text.CJK_CHARS`` says), and the
time of the window's one query (``FullTextReader.answer_windows``) for the rows shown.

    PHR_BENCH_CACHE=... .venv/bin/python bench/answer_windows.py --shape hermes --limit 3
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import devsessions
import world


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    devsessions.add_shape_arg(parser)
    parser.add_argument("--limit", type=int, default=3, help="results asked for (the tool's default 3)")
    args = parser.parse_args(argv)
    projects, questions = devsessions.load(devsessions.SHAPES[args.shape])
    built = devsessions.build_home(projects, shape=args.shape)
    plugin = world.activate(built.home)
    devsessions.keyword_only()
    wide = re.compile(f"[{plugin.text.CJK_CHARS}]")
    import model_tools

    def tokens(text: str) -> int:
        cjk = len(wide.findall(text))
        return cjk + (len(text) - cjk + 3) // 4

    cut = 0
    rows, with_window, window_tokens, answer, without, read_ms = 0, 0, [], [], [], []
    activity_tokens: list[int] = []
    db = plugin.store.HermesDB.open(plugin.store.HermesEnv.current())
    reader = plugin.fulltext.FullTextReader(db)
    for q in questions:
        raw = model_tools.handle_function_call(
            devsessions.TOOL,
            {"query": q.text, "mode": "keyword", "limit": args.limit},
            task_id=f"windows-{q.index}",
            session_id=built.fresh[q.project],
        )
        result = json.loads(raw)
        shown = result.get("results", [])
        bare = [
            {k: v for k, v in r.items() if k not in ("reply", "question", "tool_activity")} for r in shown
        ]
        answer.append(tokens(json.dumps(result, ensure_ascii=False)))
        without.append(tokens(json.dumps(dict(result, results=bare), ensure_ascii=False)))
        started = time.perf_counter()  # the window's one query alone, for the rows shown
        reader.answer_windows(r["message_id"] for r in shown)
        read_ms.append(1000 * (time.perf_counter() - started))
        for row in shown:
            rows += 1
            if row.get("tool_activity"):
                activity_tokens.append(tokens(row["tool_activity"]))
            text = row.get("reply") or row.get("question")
            if text:
                with_window += 1
                cut += text.startswith("…") or text.endswith("…")
                window_tokens.append(tokens(text))
    db.close()
    read_ms.sort()
    figures = {
        "window_read_ms_p50": round(statistics.median(read_ms), 2),
        "window_read_ms_p95": round(read_ms[int(0.95 * len(read_ms))], 2),
        "shape": args.shape,
        "limit": args.limit,
        "questions": len(questions),
        "results": rows,
        "with_window": with_window,
        "windows_cut": cut,  # longer than text.ANSWER_CHARS: cut around the query's words
        "window_tokens_mean": round(statistics.mean(window_tokens), 1) if window_tokens else 0,
        "window_tokens_p95": sorted(window_tokens)[int(0.95 * len(window_tokens))] if window_tokens else 0,
        "window_tokens_max": max(window_tokens, default=0),
        "with_tool_activity": len(activity_tokens),
        "tool_activity_tokens_mean": round(statistics.mean(activity_tokens), 1) if activity_tokens else 0,
        "tool_activity_tokens_p95": sorted(activity_tokens)[int(0.95 * len(activity_tokens))]
        if activity_tokens
        else 0,
        "answer_tokens_mean": round(statistics.mean(answer), 1),
        "answer_tokens_mean_without_windows": round(statistics.mean(without), 1),  # nor tool_activity
    }
    print(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
