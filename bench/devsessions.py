"""Keyword recall on developer-agent transcripts, end to end through Hermes's tool dispatcher.

    .venv/bin/python bench/devsessions.py                       # all 500 questions
    .venv/bin/python bench/devsessions.py --split tune          # the tuning half only
    .venv/bin/python bench/devsessions.py --limit-questions 3   # a quick look
    .venv/bin/python bench/devsessions.py --json bench/results/devsessions.json
    .venv/bin/python bench/devsessions.py --modes keyword,hybrid --model minilm   # with an index

Data: ``/work/shared/data/devsessions/dev_split.json.gz`` (read in place, never copied here;
``DEVSESSIONS_PATH`` overrides): coding-agent sessions from 23 public repositories and 500
questions whose answer session is known (types title / error / envkey / backref; 129 Chinese).

The Hermes home (``.cache/bench/devsessions/home``, rebuilt when :data:`BUILDER_VERSION` or the
data file changes) is built as ``world.py`` builds LoCoMo, with Hermes's own ``SessionDB`` and
``projects_db``: one project (a folder) per repository, one ``cli`` session per transcript with
that cwd, its messages appended in order and stamped from the transcript's ``started_at`` (+1 s per
message), no titles (``title`` questions ask about them), and one empty session per project that
the questions are asked from. The plugin is installed and enabled as a user does it.

Every question is asked as ``project_history_search`` (each mode of ``--modes``, limit 10) through
``model_tools.handle_function_call`` only, so the bench survives the plugin's modules moving. For
semantic and hybrid modes the index is built as a user builds it: the model's settings written to
config.yaml, then ``hermes project-history allow --all-projects --yes`` and ``hermes
project-history index --project ID`` for each project of the split (vectors are kept in the
cached home, per model).
Beside it, in the same run, the anchor baseline of ``bm25.py`` (BM25 over whole sessions) ranks
the same project's sessions. Scores: any@1/5/10 (a question counts when its answer session is in
the top k), per half, per question type and per language; latency p50/p95.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import world  # noqa: I001  (before anything imports Hermes: harness pins HERMES_HOME)
import bm25
import harness  # on sys.path through world
import models_setup

DATA = Path(os.environ.get("DEVSESSIONS_PATH", "/work/shared/data/devsessions/dev_split.json.gz"))
#: ``--shape``: the same split flat (one text per turn), as Hermes stores it (tool_calls, tool
#: rows, reasoning), and that plus the recall chats weeks of use leave (the data's README).
SHAPES = {
    "flat": DATA,
    "hermes": DATA.with_name("dev_split_hermes.json.gz"),
    "recall": DATA.with_name("dev_split_hermes_recall.json.gz"),
}
KEY = "devsessions"
BUILDER_VERSION = 1  # bump when the way the home is built changes
TOOL = "project_history_search"
K = (1, 5, 10)
QTYPES = ("title", "error", "envkey", "backref")
# CPU time of this process per call, by mode (the semantic worker thread included): steadier than
# wall time on a shared machine.
CPU_SECONDS: dict[str, list[float]] = {}
LANGS = ("zh", "non-zh")

# Split by project (bench/devsessions.py --show-split prints it with its counts). Chosen once by
# an exhaustive search over the 2^22 ways to put 10-13 projects in the first half, minimising the
# distance to an even split of questions, of each question type, of Chinese questions and of
# messages: 250 / 250 questions, 67 / 62 Chinese, title 106 / 104, error 101 / 101, envkey
# 37 / 38, backref 6 / 7; two of the six mostly-Chinese projects on the tuning side (hxlot,
# Yuichat), four on the check side. Tune on TUNE_SPLIT only.
TUNE_SPLIT = (
    "Ai-Whisperers/Relocation-Business",
    "DEBAGanov/PizzaNatWeb",
    "DULASlee/hxlot",
    "DiSHTiX/LMUFFB",
    "RonenSivak/figma-plugin-vite-react",
    "ThatHunky/gryag",
    "VinayakHegde/customer-financial-health",
    "cursor7366-code/AgentKYC",
    "design4pro/mcp-rag-server",
    "funnysubaru/Yuichat",
    "guthubrx/bigmind",
    "nmd1406/NutriPal",
)
CHECK_SPLIT = (
    "BillWan-zzzyyy/BillWan-zzzyyy.github.io",
    "Clark-zhang/llm-chat-history-plugin",
    "CommanderPho/medusa-platform",
    "DEBAGanov/magicvetov12",
    "DanCard/cal-date-widget",
    "daviswhitehead/chef-chopsky",
    "iDorgham/DocGen",
    "jjgordon89/inkwell-ai-weaver",
    "learnwithcc/focuslab",
    "nndeploy/nndeploy",
    "zchdoc/shadcn-ui-sidebar-08-admin-dev",
)


# --------------------------------------------------------------------------- data


@dataclass
class Transcript:
    id: str  # "owner/name#specstory-0003"
    started_at: float
    messages: list[tuple[str, str | None]]  # (role, content); None: a row without text
    #: Hermes's other columns per message (tool_calls as a list, tool_name, tool_call_id, reasoning)
    extras: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Project:
    id: str  # "owner/name"
    sessions: list[Transcript] = field(default_factory=list)


@dataclass
class Question:
    index: int  # position in the data file's question list
    project: str
    text: str
    answers: frozenset[str]  # transcript ids
    qtype: str
    lang: str

    @property
    def half(self) -> str:
        return "tune" if self.project in TUNE_SPLIT else "check"


def _epoch(started_at: str) -> float:
    return datetime.fromisoformat(started_at).timestamp()


def _extras(message: dict[str, Any]) -> dict[str, Any]:
    """What a Hermes-shaped message carries besides role and content, as ``append_message`` takes
    it (``tool_calls`` is JSON text in the data)."""
    extras = {k: message[k] for k in ("tool_name", "tool_call_id", "reasoning") if message.get(k)}
    if message.get("tool_calls"):
        extras["tool_calls"] = json.loads(message["tool_calls"])
    return extras


def load(path: Path = DATA) -> tuple[list[Project], list[Question]]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        raw = json.load(handle)
    projects = [
        Project(
            id=p["id"],
            sessions=[
                Transcript(
                    id=s["id"],
                    started_at=_epoch(s["started_at"]),
                    messages=[(m["role"], m.get("content")) for m in s["messages"]],
                    extras=[_extras(m) for m in s["messages"]],
                )
                for s in p["sessions"]
            ],
        )
        for p in raw["projects"]
    ]
    questions = [
        Question(
            index=i,
            project=q["project"],
            text=q["question"],  # never the evidence
            answers=frozenset(q["answer_sessions"]),
            qtype=q["qtype"],
            lang=q["lang"],
        )
        for i, q in enumerate(raw["questions"])
    ]
    known = set(TUNE_SPLIT) | set(CHECK_SPLIT)
    missing = {p.id for p in projects} - known
    if missing or set(TUNE_SPLIT) & set(CHECK_SPLIT):
        raise SystemExit(f"split constants do not cover the data: {sorted(missing)}")
    return projects, questions


def select(questions: list[Question], split: str, limit: int) -> list[Question]:
    wanted = {"all": set(TUNE_SPLIT) | set(CHECK_SPLIT), "tune": set(TUNE_SPLIT), "check": set(CHECK_SPLIT)}
    if split not in wanted:
        raise SystemExit(f"--split must be tune, check or all, not {split!r}")
    chosen, taken = [], {}
    for q in questions:
        if q.project in wanted[split] and (not limit or taken.get(q.project, 0) < limit):
            taken[q.project] = taken.get(q.project, 0) + 1
            chosen.append(q)
    return chosen


def split_summary(questions: list[Question]) -> str:
    lines = []
    for half, members in (("tune", TUNE_SPLIT), ("check", CHECK_SPLIT)):
        qs = [q for q in questions if q.project in members]
        counts = ", ".join(f"{t} {sum(q.qtype == t for q in qs)}" for t in QTYPES)
        zh = sum(q.lang == "zh" for q in qs)
        lines.append(f"{half}: {len(members)} projects, {len(qs)} questions ({zh} zh; {counts})")
        lines.extend(f"  {p}" for p in members)
    return "\n".join(lines)


# --------------------------------------------------------------------------- the Hermes home


@dataclass
class Built:
    home: Path
    sessions: dict[str, str]  # Hermes session id -> transcript id
    fresh: dict[str, str]  # project -> the empty session the questions are asked from
    projects: dict[str, str]  # project -> projects_db id
    build_seconds: float


def _folder_name(project: str) -> str:
    return project.replace("/", "__")


def _linked(content: str, state_ids: dict[str, str]) -> str:
    """A recall chat's tool result with each ``<<transcript id>>`` replaced by the id that session
    got in state.db (the tool's real answer links the real session)."""
    for transcript_id, sid in state_ids.items():
        if f"<<{transcript_id}>>" in content:
            content = content.replace(f"<<{transcript_id}>>", sid)
    return content


def _build(home: Path, projects: list[Project]) -> dict[str, Any]:
    w = harness.World(home, home.parent / "work")
    sessions: dict[str, str] = {}
    fresh: dict[str, str] = {}
    project_ids: dict[str, str] = {}
    try:
        for project in projects:
            folder = w.folder(_folder_name(project.id))
            project_ids[project.id] = w.project(project.id, folder)
            ordered = sorted(project.sessions, key=lambda t: (t.started_at, t.id))
            state_ids = {t.id: harness.new_session_id() for t in ordered}
            for transcript in ordered:
                sid = state_ids[transcript.id]
                w.db.create_session(sid, "cli", cwd=folder)
                for n, (role, content) in enumerate(transcript.messages):
                    extras = transcript.extras[n] if transcript.extras else {}
                    if role == "tool" and content and "<<" in content:
                        content = _linked(content, state_ids)
                    w.db.append_message(sid, role, content, timestamp=transcript.started_at + n, **extras)
                sessions[sid] = transcript.id
            sid = harness.new_session_id()
            w.db.create_session(sid, "cli", cwd=folder)
            fresh[project.id] = sid
    finally:
        w.close()
    return {"sessions": sessions, "fresh": fresh, "projects": project_ids}


def _data_stamp(path: Path) -> list:
    """The data's path, size and content hash: a copy of the same file mounted anew (a new mtime)
    keeps the home, its session ids and every index built over it."""
    return [str(path), path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest()]


def build_home(projects: list[Project], rebuild: bool = False, shape: str = "flat") -> Built:
    """The home cached under ``.cache/bench/devsessions/home`` (another shape's under
    ``devsessions-<shape>``): built once, reused while intact."""
    root = world.CACHE / (KEY if shape == "flat" else f"{KEY}-{shape}")
    home = root / "home"
    manifest = root / "world.json"
    started = time.perf_counter()
    stamp = {"version": BUILDER_VERSION, "data": _data_stamp(SHAPES[shape])}
    data = None
    if manifest.exists() and not rebuild:
        data = json.loads(manifest.read_text())
        if {k: data.get(k) for k in stamp} != stamp or not (home / "state.db").exists():
            data = None
    if data is None:
        if root.exists():
            shutil.rmtree(root)
        home.mkdir(parents=True)
        world.activate_env(home)
        data = {**stamp, **_build(home, projects)}
        harness.enable_plugin(home)  # copies the plugin and runs `hermes plugins enable`
        manifest.write_text(json.dumps(data, indent=1))
    return Built(
        home=home,
        sessions=data["sessions"],
        fresh=data["fresh"],
        projects=data["projects"],
        build_seconds=time.perf_counter() - started,
    )


def keyword_only() -> None:
    """Semantic search off in the home's config.yaml, through Hermes's own config API (not the
    plugin's modules, which may move): keyword mode must not depend on an embedding setup."""
    configure({"enabled": False})


def configure(embedding: dict[str, Any]) -> None:
    from hermes_cli.config import load_config, save_config

    config = load_config()
    config.setdefault("plugins", {})[world.PLUGIN_KEY] = {"embedding": embedding}
    save_config(config)


def build_index(built: Built, embedding: dict[str, Any], projects: list[str]) -> dict[str, Any]:
    """The semantic index of these projects, built through the plugin's own terminal commands."""
    configure({"enabled": True, **embedding})
    started = time.perf_counter()
    done = harness.run_hermes(built.home, "project-history", "allow", "--all-projects", "--yes")
    if done.returncode:
        raise SystemExit(f"allow failed: {done.stdout}{done.stderr}")
    lines = []
    for project in projects:
        done = harness.run_hermes(
            built.home, "project-history", "index", "--project", built.projects[project], timeout=6 * 3600
        )
        if done.returncode:
            raise SystemExit(f"index failed for {project}: {done.stdout}{done.stderr}")
        lines.append(f"{project}: {done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ''}")
    return {"seconds": time.perf_counter() - started, "lines": lines}


# --------------------------------------------------------------------------- scoring


@dataclass
class Tally:
    questions: int = 0
    hits: dict[int, int] = field(default_factory=lambda: dict.fromkeys(K, 0))
    leaks: int = 0

    def add(self, ranked: list[str], answers: frozenset[str], own: set[str]) -> None:
        self.questions += 1
        self.leaks += sum(1 for s in ranked if s not in own)
        for k in K:
            self.hits[k] += bool(answers & set(ranked[:k]))

    def rate(self, k: int) -> float:
        return self.hits[k] / self.questions if self.questions else 0.0


GROUPS = ("all", *QTYPES, *LANGS)


def score(questions: list[Question], ranked: dict[int, list[str]], own: dict[str, set[str]]) -> dict:
    """{half: {group: Tally}} for halves all / tune / check and groups all / qtypes / languages."""
    tallies: dict[str, dict[str, Tally]] = {h: {g: Tally() for g in GROUPS} for h in ("all", "tune", "check")}
    for q in questions:
        for half in ("all", q.half):
            for group in ("all", q.qtype, q.lang):
                tallies[half][group].add(ranked[q.index], q.answers, own[q.project])
    return tallies


def percentile_ms(latencies: list[float], share: float) -> float:
    if not latencies:
        return 0.0
    ordered = sorted(latencies)
    if share == 0.5:
        return 1000 * statistics.median(ordered)
    return 1000 * ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def table(name: str, tallies: dict[str, dict[str, Tally]], latencies: list[float]) -> str:
    head = ["", "questions", *(f"any@{k}" for k in K), "leaks"]
    lines = [
        f"{name}: p50 {percentile_ms(latencies, 0.5):.1f} ms, p95 {percentile_ms(latencies, 0.95):.1f} ms",
        "| " + " | ".join(head) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|",
    ]
    present = [h for h in ("tune", "check") if tallies[h]["all"].questions]
    for half in ["all", *present] if len(present) > 1 else present:
        for group in GROUPS:
            t = tallies[half][group]
            if not t.questions:
                continue
            label = half if group == "all" else f"{half} {group}"
            cells = [label, str(t.questions), *(f"{t.rate(k):.3f}" for k in K), str(t.leaks)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def side_by_side(scores: dict[str, dict[str, dict[str, Tally]]]) -> str:
    """One table per half: each group's any@1/5/10 for every system (the plugin's modes, then the
    baseline), side by side."""
    systems = list(scores)
    blocks = []
    for half in ("tune", "check", "all"):
        first = scores[systems[0]][half]
        if not first["all"].questions or (half == "all" and blocks):
            continue
        head = [half, "n", *(f"{name} any@1/5/10" for name in systems)]
        rule = "|" + "|".join(["---", "---:"] + ["---"] * len(systems)) + "|"
        lines = ["| " + " | ".join(head) + " |", rule]
        for group in GROUPS:
            if not first[group].questions:
                continue
            cells = [group, str(first[group].questions)]
            for name in systems:
                t = scores[name][half][group]
                cells.append("/".join(f"{t.rate(k):.3f}" for k in K))
            lines.append("| " + " | ".join(cells) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def figures(tallies: dict[str, dict[str, Tally]], latencies: list[float]) -> dict:
    return {
        "p50_ms": percentile_ms(latencies, 0.5),
        "p95_ms": percentile_ms(latencies, 0.95),
        "scores": {
            half: {
                group: {"questions": t.questions, "leaks": t.leaks, **{f"any@{k}": t.rate(k) for k in K}}
                for group, t in groups.items()
                if t.questions
            }
            for half, groups in tallies.items()
        },
    }


# --------------------------------------------------------------------------- asking


def ask_plugin(
    built: Built, questions: list[Question], limit: int, mode: str = "keyword"
) -> tuple[dict, list[float]]:
    """Each question through the dispatcher from its project's fresh session: transcript ids ranked."""
    import model_tools

    ranked: dict[int, list[str]] = {}
    latencies = []
    for q in questions:
        started, cpu = time.perf_counter(), time.process_time()
        raw = model_tools.handle_function_call(
            TOOL,
            {"query": q.text, "mode": mode, "limit": limit},
            task_id=f"devsessions-{q.index}",
            session_id=built.fresh[q.project],
        )
        latencies.append(time.perf_counter() - started)
        CPU_SECONDS.setdefault(mode, []).append(time.process_time() - cpu)
        result = json.loads(raw)
        if not result.get("success"):
            raise SystemExit(f"search failed for question {q.index}: {result}")
        if mode != "keyword" and result.get("semantic_status") != "ready":
            raise SystemExit(
                f"semantic side not ready for question {q.index}: {result.get('semantic_status')}"
            )
        ranked[q.index] = [built.sessions.get(r["session_id"], r["session_id"]) for r in result["results"]]
    return ranked, latencies


def ask_bm25(projects: list[Project], questions: list[Question], limit: int) -> tuple[dict, list[float]]:
    wanted = {q.project for q in questions}
    indexes = {
        p.id: bm25.SessionBM25({t.id: [text or "" for _, text in t.messages] for t in p.sessions})
        for p in projects
        if p.id in wanted
    }
    ranked: dict[int, list[str]] = {}
    latencies = []
    for q in questions:
        started = time.perf_counter()
        ranked[q.index] = indexes[q.project].rank(q.text, limit)
        latencies.append(time.perf_counter() - started)
    return ranked, latencies


def add_shape_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shape",
        default="flat",
        choices=tuple(SHAPES),
        help="flat export (default), the Hermes shape (tool_calls, tool rows, reasoning), or that "
        "plus recall chats (dev_split_hermes_recall.json.gz)",
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--split", default="all", choices=("tune", "check", "all"))
    add_shape_arg(parser)
    parser.add_argument("--modes", default="keyword", help="comma-separated: keyword, semantic, hybrid")
    models_setup.add_model_args(parser)
    parser.add_argument("--limit-questions", type=int, default=0, help="first N questions of each project")
    parser.add_argument("--limit", type=int, default=10, help="sessions asked for per question (max 10)")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the cached Hermes home")
    parser.add_argument("--show-split", action="store_true", help="print the split and exit")
    parser.add_argument("--json", type=Path, help="also write the figures and rankings here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if set(modes) - {"keyword", "semantic", "hybrid"}:
        raise SystemExit(f"--modes: keyword, semantic or hybrid, not {args.modes!r}")
    projects, all_questions = load(SHAPES[args.shape])
    print(split_summary(all_questions))
    if args.show_split:
        return {}
    questions = select(all_questions, args.split, args.limit_questions)

    built = build_home(projects, rebuild=args.rebuild, shape=args.shape)
    models_setup.install_policy(world.activate(built.home), args)
    own = {p.id: {t.id for t in p.sessions} for p in projects}
    ranked: dict[str, dict[int, list[str]]] = {}
    latency: dict[str, list[float]] = {}
    index = None
    with models_setup.embedding_config(args) as (_, embedding):
        if modes == ["keyword"]:
            keyword_only()
        else:
            index = build_index(built, embedding, sorted({q.project for q in questions}))
        for mode in modes:
            ranked[mode], latency[mode] = ask_plugin(built, questions, args.limit, mode)
    ranked["bm25"], latency["bm25"] = ask_bm25(projects, questions, args.limit)
    scores = {name: score(questions, r, own) for name, r in ranked.items()}

    print()
    print(
        f"shape={args.shape} split={args.split} questions={len(questions)} "
        f"home built/loaded in {built.build_seconds:.1f}s ({built.home})"
    )
    if index is not None:
        print(f"model={args.model}: index built/checked in {index['seconds']:.1f}s")
    for mode in modes:
        print()
        print(table(f"plugin {mode} (project_history_search, mode {mode})", scores[mode], latency[mode]))
        cpu = CPU_SECONDS.get(mode, [])
        print(
            f"CPU time per call: p50 {percentile_ms(cpu, 0.5):.1f} ms, p95 {percentile_ms(cpu, 0.95):.1f} ms"
        )
    print()
    print(
        table("baseline: session BM25, words + CJK bigrams (bench/bm25.py)", scores["bm25"], latency["bm25"])
    )
    print()
    print(side_by_side(scores))

    result = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "split": {"tune": list(TUNE_SPLIT), "check": list(CHECK_SPLIT)},
        "index": index,
        "figures": {name: figures(scores[name], latency[name]) for name in ranked},
        "cpu_ms": {
            mode: {"p50": percentile_ms(cpu, 0.5), "p95": percentile_ms(cpu, 0.95)}
            for mode, cpu in CPU_SECONDS.items()
        },
        "questions": [
            {
                "index": q.index,
                "project": q.project,
                "half": q.half,
                "qtype": q.qtype,
                "lang": q.lang,
                "answers": sorted(q.answers),
                **{name: ranked[name][q.index] for name in ranked},
                **{f"{mode}_ms": 1000 * latency[mode][i] for mode in modes},
            }
            for i, q in enumerate(questions)
        ],
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
