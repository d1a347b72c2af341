"""Redaction on real transcripts: what it removes, what it costs, and what it breaks for search.

    .venv/bin/python bench/redaction.py                  # everything, 40 sampled spans
    .venv/bin/python bench/redaction.py --sample 80 --seed 3
    .venv/bin/python bench/redaction.py --rounds 1       # quicker timing
    .venv/bin/python bench/redaction.py --json /tmp/redaction.json

Data: ``/work/shared/data/devsessions/dev_split.json.gz`` (read in place, never copied here;
``DEVSESSIONS_PATH`` overrides): 9,261 messages of coding-agent sessions and 500 questions. Its
authors already scrubbed secrets, so nearly every hit here is a false positive or one of their
placeholders: the figures measure what redaction costs search, not what it catches (the corpus in
tests/credentials.py does that).

Reported, for ``text/redact.py`` (new) and the redaction it replaces (old: ``text/redaction.py``,
``redaction.py`` or, when both are gone, ``redaction.py`` at git HEAD):

* the corpus: entries, and entries with a secret left (leaks) for each;
* messages changed, spans by rule (new), characters removed;
* a seeded random sample of redacted spans with their context, for a person to judge;
* microseconds per message, old and new in the same run, interleaved (the best of ``--rounds``
  passes each, CPU time of this process), and per keyword search (the redaction of the messages
  one search of each question shows: :func:`search_results`), p50;
* questions' words lost: for each question, the words of its text (identifiers, config keys, error
  words; three characters or more) found in its answer sessions before redaction and no longer
  after (the question could not find them), and evidence strings (the source string each question
  was made from) that redaction breaks in the answer sessions.

Needs nothing but the standard library: both modules are loaded by file path.
"""

from __future__ import annotations

import argparse
import ast
import gc
import gzip
import importlib.util
import json
import os
import random
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("DEVSESSIONS_PATH", "/work/shared/data/devsessions/dev_split.json.gz"))
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-/:]*[A-Za-z0-9_]|[\u4e00-\u9fff]{2,}")


def load_module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_old(revision: str) -> tuple[ModuleType, str]:
    """The redaction module of an earlier revision, to compare with (written to a temporary file
    and imported: the plugin moved into its own folder, so both paths are tried)."""
    import tempfile

    for relative in ("project-history-recall/text/redact.py", "text/redact.py", "redaction.py"):
        shown = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{revision}:{relative}"], capture_output=True, text=True
        )
        if shown.returncode == 0:
            folder = Path(tempfile.mkdtemp(prefix="old-redaction-"))
            (folder / "redact.py").write_text(shown.stdout, encoding="utf-8")
            return load_module("_old_redaction", folder / "redact.py"), f"{revision}:{relative}"
    raise SystemExit(f"no redaction module at revision {revision}")


def tune_projects() -> set[str]:
    """The tuning half of bench/devsessions.py (read from its source: importing it boots Hermes)."""
    path = ROOT / "bench" / "devsessions.py"
    if not path.exists():
        return set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "TUNE_SPLIT" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()


def load_data() -> tuple[list[tuple[str, str, str]], list[dict[str, Any]]]:
    """(project, session id, text) for every message, and the questions."""
    with gzip.open(DATA, "rt", encoding="utf-8") as handle:
        data = json.load(handle)
    messages = [
        (project["id"], session["id"], message["content"])
        for project in data["projects"]
        for session in project["sessions"]
        for message in session["messages"]
        if isinstance(message.get("content"), str)
    ]
    return messages, data["questions"]


def corpus_leaks(redact: Any, corpus: list[Any]) -> list[str]:
    return [entry.name for entry in corpus if any(s in redact(entry.text) for s in entry.secrets)]


def merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def time_both(texts: list[str], functions: dict[str, Any], rounds: int) -> dict[str, float]:
    """Microseconds per message for each function: best of ``rounds`` interleaved passes."""
    best = dict.fromkeys(functions, float("inf"))
    for _ in range(rounds):
        for name, function in functions.items():
            started = time.process_time()
            for text in texts:
                function(text)
            best[name] = min(best[name], time.process_time() - started)
    return {name: seconds / len(texts) * 1e6 for name, seconds in best.items()}


def time_each(texts: list[str], functions: dict[str, Any], rounds: int) -> dict[str, list[float]]:
    """Microseconds for each message and function: best of ``rounds``, the functions interleaved
    on each message (wall time: a message is too short for CPU time's resolution)."""
    best = {name: [float("inf")] * len(texts) for name in functions}
    for _ in range(rounds):
        for index, text in enumerate(texts):
            for name, function in functions.items():
                started = time.perf_counter()
                function(text)
                best[name][index] = min(best[name][index], (time.perf_counter() - started) * 1e6)
    return best


def search_results(
    messages: list[tuple[str, str, str]], questions: list[dict[str, Any]], limit: int = 3
) -> list[list[int]]:
    """For each question, the messages a keyword search of it would show and so redact: in its
    project, the best message of each of the ``limit`` (the tool's default, 3) sessions whose
    messages hold most of the question's words (a stand-in for FTS5's ranking: what is redacted is
    a result's whole message, whichever ranks first)."""
    by_project: dict[str, list[int]] = defaultdict(list)
    lowered = [text.lower() for _, _, text in messages]
    for index, (project, _, _) in enumerate(messages):
        by_project[project].append(index)
    found = []
    for question in questions:
        words = {w.lower() for w in question_words(question["question"])}
        best: dict[str, tuple[int, int]] = {}
        for index in by_project.get(question["project"], []):
            score = sum(word in lowered[index] for word in words)
            session = messages[index][1]
            if score and score > best.get(session, (0, -1))[0]:
                best[session] = (score, index)
        ranked = sorted(best.values(), key=lambda pair: (-pair[0], pair[1]))[:limit]
        found.append([index for _, index in ranked])
    return found


def time_searches(
    texts: list[str], searches: list[list[int]], functions: dict[str, Any], rounds: int
) -> dict[str, list[float]]:
    """Microseconds of redaction for each search's results and function: best of ``rounds``,
    the functions interleaved on each search (wall time, the garbage collector off as timeit has
    it: with every message and its redactions held here, a collection costs more than a search)."""
    best = {name: [float("inf")] * len(searches) for name in functions}
    gc.disable()
    try:
        for _ in range(rounds):
            for number, indexes in enumerate(searches):
                for name, function in functions.items():
                    started = time.perf_counter()
                    for index in indexes:
                        function(texts[index])
                    best[name][number] = min(best[name][number], (time.perf_counter() - started) * 1e6)
    finally:
        gc.enable()
    return best


def question_words(question: str) -> set[str]:
    return {w for w in WORD.findall(question) if len(w) >= 3}


def lost_words(
    questions: list[dict[str, Any]], by_session: dict[str, list[int]], before: list[str], after: list[str]
) -> tuple[list[tuple[str, str]], list[str], int]:
    """(question, word) pairs found in the answer sessions before redaction and not after; the
    evidence strings broken; the number of (question, word) pairs present before."""
    lost: list[tuple[str, str]] = []
    broken: list[str] = []
    present = 0
    for question in questions:
        indexes = [i for sid in question["answer_sessions"] for i in by_session.get(sid, [])]
        original = "\n".join(before[i] for i in indexes)
        redacted = "\n".join(after[i] for i in indexes)
        for word in sorted(question_words(question["question"])):
            if word in original:
                present += 1
                if word not in redacted:
                    lost.append((question["question"], word))
        evidence = question.get("evidence") or ""
        if evidence and evidence in original and evidence not in redacted:
            broken.append(evidence)
    return lost, broken, present


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=int, default=40, help="redacted spans to print (default 40)")
    parser.add_argument("--seed", type=int, default=20240611)
    parser.add_argument("--rounds", type=int, default=3, help="timing passes per module (best kept)")
    parser.add_argument("--context", type=int, default=60, help="characters shown either side of a span")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--old", default="HEAD", help="git revision to compare with (default HEAD)")
    args = parser.parse_args()

    new = load_module("_redact", ROOT / "project-history-recall" / "text" / "redact.py")
    old, old_name = load_old(args.old)
    corpus = load_module("_credentials", ROOT / "tests" / "credentials.py").CORPUS
    upstream = load_module("_credentials_upstream", ROOT / "tests" / "credentials_upstream.py").CORPUS
    messages, questions = load_data()
    texts = [text for _, _, text in messages]
    tune = tune_projects()
    hermes = new.hermes_prefix_patterns() is not None
    print(f"data: {DATA} ({len(messages)} messages, {len(questions)} questions)")
    print(f"old: {old_name}; new: text/redact.py, prefix list: {'Hermes' if hermes else 'fallback'}\n")

    # -- the corpus
    leaks_new = corpus_leaks(new.redact_secrets, corpus)
    leaks_old = corpus_leaks(old.redact_secrets, corpus)
    print(f"corpus: {len(corpus)} credential shapes; leaks new {len(leaks_new)}, old {len(leaks_old)}")
    if leaks_new:
        print("  new leaks:", ", ".join(leaks_new))
    print(f"  old leaks: {', '.join(leaks_old)}")
    up_new = corpus_leaks(new.redact_secrets, upstream)
    up_old = corpus_leaks(old.redact_secrets, upstream)
    print(
        f"upstream corpus (tests/credentials_upstream.py, from gitleaks' rules): {len(upstream)} shapes; "
        f"leaks new {len(up_new)}, old {len(up_old)}"
    )
    if up_new:
        print("  new leaks:", ", ".join(up_new))
    print()

    # -- what redaction removes from the transcripts
    after_new = [new.redact_secrets(text) for text in texts]
    after_old = [old.redact_secrets(text) for text in texts]
    by_rule: Counter[str] = Counter()
    spans_by_rule: list[tuple[str, int, int, int]] = []
    removed = 0
    changed_by_half: Counter[str] = Counter()
    for index, (project, _, text) in enumerate(messages):
        found = new.explain(text)
        for rule, start, end in found:
            by_rule[rule] += 1
            spans_by_rule.append((rule, index, start, end))
        removed += sum(end - start for start, end in merged([(s, e) for _, s, e in found]))
        if after_new[index] != text:
            changed_by_half["tune" if project in tune else "check"] += 1
    changed_new = sum(a != t for a, t in zip(after_new, texts, strict=True))
    changed_old = sum(a != t for a, t in zip(after_old, texts, strict=True))
    removed_old = sum(
        len(t) - len(a) + a.count(old.PLACEHOLDER) * len(old.PLACEHOLDER)
        for a, t in zip(after_old, texts, strict=True)
        if a != t
    )
    print(f"messages changed: new {changed_new}, old {changed_old} (of {len(texts)})")
    if tune:
        print(f"  new, by half: tune {changed_by_half['tune']}, check {changed_by_half['check']}")
    print(f"characters removed: new {removed}, old ~{removed_old}")
    print("spans by rule (new, before merging): " + ", ".join(f"{r} {n}" for r, n in by_rule.most_common()))
    print()

    # -- a sample to judge
    rng = random.Random(args.seed)
    sample = rng.sample(spans_by_rule, min(args.sample, len(spans_by_rule)))
    print(f"{len(sample)} redacted spans (seed {args.seed}), [[span]] in its context:")
    for number, (rule, index, start, end) in enumerate(sample, 1):
        text = texts[index]
        before = text[max(0, start - args.context) : start]
        after = text[end : end + args.context]
        shown = f"{before}[[{text[start:end]}]]{after}".replace("\n", "⏎")
        print(f"{number:3d} {rule:8s} {messages[index][0]}: {shown}")
    print()

    # -- what search loses
    by_session: dict[str, list[int]] = defaultdict(list)
    for index, (_, session, _) in enumerate(messages):
        by_session[session].append(index)
    lost_new, broken_new, present = lost_words(questions, by_session, texts, after_new)
    lost_old, broken_old, _ = lost_words(questions, by_session, texts, after_old)
    print(f"questions' words present in their answer sessions: {present}")
    print(f"  lost to redaction: new {len(lost_new)}, old {len(lost_old)}")
    for question, word in lost_new:
        print(f"    new loses {word!r} of: {question}")
    for question, word in lost_old:
        print(f"    old loses {word!r} of: {question}")
    print(f"  evidence strings broken: new {len(broken_new)}, old {len(broken_old)}")
    for evidence in broken_new:
        print(f"    new breaks: {evidence!r}")
    print()

    # -- cost
    timing = time_both(texts, {"old": old.redact_secrets, "new": new.redact_secrets}, args.rounds)
    print(
        f"us per message (best of {args.rounds}, CPU time, interleaved): old {timing['old']:.1f}, "
        f"new {timing['new']:.1f} ({timing['new'] / timing['old']:.2f}x)"
    )
    per_message = time_each(texts, {"old": old.redact_secrets, "new": new.redact_secrets}, args.rounds)
    p50 = {name: sorted(values)[len(values) // 2] for name, values in per_message.items()}
    print(
        f"us per message, p50 (best of {args.rounds} per message): old {p50['old']:.1f}, "
        f"new {p50['new']:.1f} ({p50['new'] / p50['old']:.2f}x)"
    )
    searches = [found for found in search_results(messages, questions) if found]
    per_search = time_searches(
        texts, searches, {"old": old.redact_secrets, "new": new.redact_secrets}, args.rounds
    )
    search_p50 = {name: sorted(values)[len(values) // 2] for name, values in per_search.items()}
    print(
        f"us per keyword search (its results' messages, {len(searches)} questions), p50 (best of "
        f"{args.rounds}): old {search_p50['old']:.1f}, new {search_p50['new']:.1f} "
        f"({search_p50['new'] / search_p50['old']:.2f}x)"
    )
    lengths = sorted(len(t) for t in texts)
    print(
        f"  messages: median {lengths[len(lengths) // 2]} characters, mean {sum(lengths) / len(lengths):.0f}"
    )

    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "messages": len(texts),
                    "corpus": len(corpus),
                    "leaks": {"new": leaks_new, "old": leaks_old},
                    "upstream_leaks": {"new": up_new, "old": up_old},
                    "us_per_message_p50": p50,
                    "us_per_search_p50": search_p50,
                    "changed": {"new": changed_new, "old": changed_old},
                    "removed_characters": {"new": removed, "old": removed_old},
                    "spans_by_rule": dict(by_rule),
                    "lost_words": {"new": lost_new, "old": lost_old},
                    "broken_evidence": {"new": broken_new, "old": broken_old},
                    "us_per_message": timing,
                    "prefix_list": "hermes" if hermes else "fallback",
                },
                ensure_ascii=False,
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
