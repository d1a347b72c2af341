"""Hostile content, through the real dispatcher and CLI: nothing a conversation, a folder name or a
provider says can leak, run, or lock the index (issue 18)."""

from __future__ import annotations

import json
import time

import pytest
from harness import session_ids


def _answer_text(result: dict) -> str:
    return json.dumps(result, ensure_ascii=False)


# --------------------------------------------------------------------------- folders


@pytest.mark.parametrize("suffix", [" ", "\n", "\t", "  "])
def test_repositories_that_differ_only_in_trailing_whitespace_are_two_projects(world, suffix):
    plain = world.folder("x/app", git=True)
    spaced = world.folder("x/app" + suffix, git=True)
    mine = world.session(plain, [("user", "the okapi notes")])
    theirs = world.session(spaced, [("user", "the okapi secrets")])
    for here, hit in ((plain, mine), (spaced, theirs)):
        result = world.search(world.session(here), "okapi")
        assert session_ids(result) == [hit], (repr(here), result)
        assert result["project"] == {"kind": "auto", "key": here}


@pytest.mark.parametrize("suffix", [" ", "\n"])
def test_a_folder_beside_a_project_folder_is_not_in_it_for_a_trailing_space(world, suffix):
    """Hermes's projects_db trims a folder it stores, so only ``/x/app`` can be a project folder;
    ``/x/app `` next to it is another folder, in no project."""
    plain = world.folder("x/app")
    spaced = world.folder("x/app" + suffix)
    world.project("Plain", plain)
    mine = world.session(plain, [("user", "the okapi notes")])
    world.session(spaced, [("user", "the okapi secrets")])
    assert session_ids(world.search(world.session(plain), "okapi")) == [mine]
    outside = world.search(world.session(spaced), "okapi")
    assert outside["results"] == [] and outside["sessions_in_scope"] == 0


def test_a_blank_project_id_is_no_home(world):
    repo = world.folder("alpha", git=True)
    world.project("Alpha", repo)
    now = world.session(repo)
    result = world.move(now, "   ")
    assert result["success"] is False and "blank" in result["error"]
    assert world.row(now)["cwd"] == repo


# --------------------------------------------------------------------------- what a result carries


def test_a_conversation_continued_here_from_another_project_shows_nothing_of_it(world):
    """A conversation that began in Q and, after compression, continued in P: P's results show
    the part in P, never Q's session id or Q's title."""
    from harness import new_session_id

    p_folder, q_folder = world.folder("p"), world.folder("q")
    world.project("P", p_folder)
    world.project("Q", q_folder)
    started = world.session(q_folder, [("user", "the wombat budget")], title="Q private wombat plan")
    world.db.end_session(started, "compression")
    continued = new_session_id()
    world.db.create_session(continued, "cli", cwd=p_folder, parent_session_id=started)
    world.add(continued, [("user", "wombat numbers, continued")])
    result = world.search(world.session(p_folder), "wombat")
    assert session_ids(result) == [continued]
    text = _answer_text(result)
    assert started not in text and "Q private" not in text
    # Within one project the lineage root is still named.
    inner = new_session_id()
    world.db.end_session(continued, "compression")
    world.db.create_session(inner, "cli", cwd=p_folder, parent_session_id=continued)
    world.add(inner, [("user", "the quoll follow-up")])
    (hit,) = world.search(world.session(p_folder), "quoll")["results"]
    assert hit["session_id"] == inner


SECRET_TITLE = "deploy with sk-live-ABCDEF0123456789abcdef0123 \x1b]0;pwned\x07 \x1b[31mred\x9b2J done"


def test_titles_are_cleaned_and_redacted_in_the_tool_and_the_terminal(world):
    from harness import enable_plugin, run_hermes

    enable_plugin(world.home)
    repo = world.git_repo("app")
    world.session(repo, [("user", "the numbat rollout")], title=SECRET_TITLE)
    now = world.session(repo)
    (hit,) = world.search(now, "numbat")["results"]
    for bad in ("sk-live-ABCDEF0123456789abcdef0123", "\x1b", "\x07", "\x9b"):
        assert bad not in hit["title"], (bad, hit["title"])
    assert hit["title"].startswith("deploy with") and "done" in hit["title"]
    done = run_hermes(world.home, "project-history", "search", "numbat", "--mode", "keyword", cwd=repo)
    assert done.returncode == 0, done.stderr
    for bad in ("sk-live-ABCDEF0123456789abcdef0123", "\x1b", "\x07", "\x9b"):
        assert bad not in done.stdout


# --------------------------------------------------------------------------- commands we hand out

HOSTILE_FOLDERS = [
    "x;touch pwned",
    "app $(touch pwned)",
    "a`touch pwned`",
    "q'uote",
    'd"quote',
    "sp ace",
    "new\nline",
    "-leading",
]


@pytest.mark.parametrize("name", HOSTILE_FOLDERS)
def test_the_consent_command_pastes_safely_whatever_the_folder_is_called(world, tmp_path, name):
    """The agent runs ``on_yes_run`` after the user's yes: it must name the project by a key, not by
    its path, and run as intended when pasted into a shell."""
    import os
    import subprocess

    from harness import OFFLINE, VENV_BIN, enable_plugin
    from hermes_cli.config import save_config
    from models import minilm_model_dir

    enable_plugin(world.home)
    local = {"provider": "local", "model": "all-MiniLM-L6-v2", "model_path": str(minilm_model_dir())}
    save_config({"plugins": {"project-history-recall": {"embedding": local}}}, merge_existing=True)
    repo = world.git_repo(f"code/{name}")
    world.session(repo, [("user", "the kiwi notes")])
    now = world.session(repo)
    ask = world.search(now, "kiwi", mode="hybrid")["semantic_consent"]
    command = ask["on_yes_run"]
    assert name not in command and repo not in command
    shell = tmp_path / "shell"
    shell.mkdir()
    env = {
        **os.environ,
        **OFFLINE,
        "HERMES_HOME": str(world.home),
        "PATH": f"{VENV_BIN}:{os.environ['PATH']}",
    }
    done = subprocess.run(
        ["bash", "-c", command], cwd=shell, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not list(shell.iterdir()) and not (world.root / "code" / "pwned").exists()
    consent = json.loads((world.home / "plugins/project-history-recall/consent.json").read_text())
    assert consent["projects"] == [f"repo:{repo}"]
    assert world.search(now, "kiwi", mode="hybrid")["semantic_status"] != "consent_required"


# --------------------------------------------------------------------------- consent


def bag_of_words(texts, _is_query):
    """A tiny deterministic model: these tests count what is sent, not how it ranks."""
    import re
    import zlib

    import numpy as np

    vectors = np.zeros((len(texts), 32), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in re.findall(r"\w+", text.casefold()):
            vectors[row, zlib.crc32(word.encode()) % 32] += 1.0
        vectors[row] /= max(float(np.linalg.norm(vectors[row])), 1e-6)
    return vectors


@pytest.fixture
def counting(world):
    """Semantic search on, against a loopback server that records every text it is sent."""
    from embedding_server import EmbeddingServer
    from harness import enable_plugin
    from hermes_cli.config import save_config

    with EmbeddingServer(bag_of_words) as server:
        enable_plugin(world.home)
        embedding = {"enabled": True, "model": "bow", "base_url": server.base_url, "index_budget_seconds": 30}
        save_config({"plugins": {"project-history-recall": {"embedding": embedding}}}, merge_existing=True)
        world.server = server
        yield world


def _write_consent(world, **fields):
    from hermes_plugins.project_history_recall.semantic.consent import consent_record
    from hermes_plugins.project_history_recall.store import HermesEnv

    env = HermesEnv.current()
    record = consent_record(env.settings.embedding, env.profile, ["*"], "2026-12-02T00:00:00")
    record.update(fields)
    path = world.home / "plugins" / "project-history-recall" / "consent.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


@pytest.mark.parametrize(
    "fields",
    [
        {"projects": "*"},
        {"projects": [1, 2]},
        {"provider": ["openai"]},
        {"disabled_at": 0},
        {"covers": ["x"]},
        {"surprise": True},
    ],
    ids=[
        "projects-string",
        "projects-ints",
        "provider-list",
        "disabled-number",
        "covers-list",
        "unknown-field",
    ],
)
def test_a_consent_file_of_the_wrong_shape_is_no_consent(counting, fields):
    from harness import run_hermes

    world = counting
    repo = world.git_repo("app")
    world.session(repo, [("user", "the bilby notes")])
    _write_consent(world, **fields)
    result = world.search(world.session(repo), "bilby", mode="hybrid")
    assert result["semantic_status"] == "consent_required"
    assert world.server.inputs == []
    status = run_hermes(world.home, "project-history", "status", cwd=repo)
    assert "so it is no consent" in status.stdout, status.stdout


def test_a_project_that_grows_asks_again_before_its_new_folder_is_sent(counting):
    from harness import run_hermes

    world = counting
    first, second = world.folder("app"), world.folder("notes")
    pid = world.project("App", first)
    world.session(first, [("user", "the potoroo plan")])
    now = world.session(first)
    allowed = run_hermes(world.home, "project-history", "allow", "--project", pid, "--yes", cwd=first)
    assert allowed.returncode == 0, allowed.stderr
    assert world.search(now, "potoroo", mode="hybrid")["semantic_status"] == "ready"
    from hermes_cli import projects_db

    with projects_db.connect_closing(world.home / "projects.db") as conn:
        projects_db.add_folder(conn, pid, second, label="notes")
        conn.commit()
    world.session(second, [("user", "the quokka secret in the new folder")])
    world.server.reset()
    grown = world.search(now, "quokka", mode="hybrid")
    assert grown["semantic_status"] == "consent_required"
    assert second in grown["semantic_consent"]["ask_user"]
    assert not any("quokka" in text for text in world.server.inputs)
    assert (
        run_hermes(world.home, "project-history", "allow", "--project", pid, "--yes", cwd=first).returncode
        == 0
    )
    assert world.search(now, "quokka", mode="hybrid")["semantic_status"] == "ready"
    assert any("quokka" in text for text in world.server.inputs)


# --------------------------------------------------------------------------- profiles


def test_sessions_of_another_profile_in_the_same_database_are_not_this_ones(world):
    """A multiplexed gateway writes several profiles' sessions into one state.db, tagged with
    profile_name: a search sees the current conversation's profile only."""
    from harness import new_session_id

    repo = world.git_repo("app")
    mine = world.session(repo, [("user", "the dunnart report")])
    theirs = new_session_id()
    world.db.create_session(theirs, "telegram", cwd=repo, profile_name="work")
    world.add(theirs, [("user", "the dunnart payroll of another user")])
    assert session_ids(world.search(world.session(repo), "dunnart", limit=10)) == [mine]
    worker = new_session_id()
    world.db.create_session(worker, "telegram", cwd=repo, profile_name="work")
    assert session_ids(world.search(worker, "dunnart", limit=10)) == [theirs]


# --------------------------------------------------------------------------- credentials


def test_no_credential_of_the_corpus_reaches_the_provider_the_results_or_the_logs(counting, caplog):
    """Every shape of tests/credentials.py pasted into a conversation, into its title and into the
    query: none reaches the remote embedding server, a result (snippet, title) or a log line, with
    chunks small enough that a private key spans several and its message frames the next one."""
    import logging

    from credentials import CORPUS
    from hermes_cli.config import save_config

    caplog.set_level(logging.DEBUG)
    world = counting
    small = {"chunk_size": 96, "chunk_overlap": 16, "context_messages": 1}
    save_config({"plugins": {"project-history-recall": {"embedding": small}}}, merge_existing=True)
    _write_consent(world)
    repo = world.git_repo("app")
    assert len(CORPUS) >= 40
    for number, credential in enumerate(CORPUS):
        first_line = (
            credential.text.strip().splitlines()[0][:85] if "(a chunk)" not in credential.name else ""
        )
        world.session(
            repo,
            [
                ("user", f"marker{number} here it is:\n{credential.text}"),
                ("assistant", f"noted marker{number}"),
            ],
            title=f"marker{number} {first_line}",
        )
    now = world.session(repo)
    answers = []
    for number, credential in enumerate(CORPUS):
        # A query pastes the credential whole (a lone line of a key body cut out of its message,
        # as the two "only ... (a chunk)" entries are, is random base64 and nothing more).
        asked = credential.text if "(a chunk)" not in credential.name else f"the key: {credential.text}"
        for mode in ("hybrid", "semantic", "keyword"):
            answers.append(world.search(now, f"marker{number} {asked}", mode=mode))
    assert all(a["semantic_status"] == "ready" for a in answers), {a["semantic_status"] for a in answers}
    assert any(a["results"] for a in answers)
    sent = "\n".join(world.server.inputs)
    shown = "\n".join(_answer_text(a) for a in answers)
    logged = caplog.text
    leaks = [
        (credential.name, where)
        for credential in CORPUS
        for secret in credential.secrets
        for where, text in (("provider", sent), ("results", shown), ("logs", logged))
        if secret in text
    ]
    assert not leaks, leaks


# --------------------------------------------------------------------------- provider errors

PASSWORD = "pw-Zq81-secret"
QUERY_SECRET = "qs-Hv27xLm9Tk"
API_KEY = "sk-proj-" + "Rt5Mh3dAwVtRMflhbmuapttAzn0DNRUxq"


@pytest.mark.parametrize("query", [False, True], ids=["userinfo", "userinfo-and-query"])
def test_a_provider_error_that_echoes_the_request_leaks_no_credential(counting, caplog, query):
    """Userinfo (sent as basic auth) or a query string in base_url, and the API key: an error body
    that repeats the request's headers (a 401) or its path (a 404: the client appends its path
    after the query) reaches semantic_error, the CLI and the logs without any of them."""
    import base64
    import logging

    from harness import run_hermes
    from hermes_cli.config import save_config

    caplog.set_level(logging.DEBUG)
    for noisy in ("openai", "openai._base_client", "httpx", "httpcore"):  # as hermes_logging sets them
        caplog.set_level(logging.WARNING, logger=noisy)
    world = counting
    base = world.server.base_url.replace("http://", f"http://bob:{PASSWORD}@")
    base += f"?api-key={QUERY_SECRET}" if query else ""
    save_config(
        {"plugins": {"project-history-recall": {"embedding": {"base_url": base, "max_retries": 0}}}},
        merge_existing=True,
    )
    (world.home / ".env").write_text(f"PROJECT_HISTORY_EMBEDDING_API_KEY={API_KEY}\n")
    _write_consent(world)
    repo = world.git_repo("app")
    world.session(repo, [("user", "the bandicoot plan")])
    world.server.set_mode("echo")
    result = world.search(world.session(repo), "bandicoot", mode="hybrid")
    assert result["semantic_status"] == "unavailable"
    assert ("404" if query else "401") in result["semantic_error"]
    cli = run_hermes(world.home, "project-history", "search", "bandicoot", "--mode", "semantic", cwd=repo)
    basic = base64.b64encode(f"bob:{PASSWORD}".encode()).decode()
    for secret in (PASSWORD, QUERY_SECRET, API_KEY, basic):
        for where, text in (
            ("tool", _answer_text(result)),
            ("cli", cli.stdout + cli.stderr),
            ("logs", caplog.text),
        ):
            assert secret not in text, (secret, where)


# --------------------------------------------------------------------------- a full disk


@pytest.fixture
def small_disk(counting, tmp_path):
    """The plugin's folder (code and data) on a tmpfs with little room left: a disk that fills
    during ``index``; :func:`grow` frees space."""
    import shutil
    import subprocess

    data = counting.home / "plugins" / "project-history-recall"
    keep = tmp_path / "plugin-copy"
    shutil.copytree(data, keep)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(data)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        shutil.copytree(keep, data, dirs_exist_ok=True)
        used = int(subprocess.run(["du", "-sk", str(data)], capture_output=True, text=True).stdout.split()[0])
        subprocess.run(["mount", "-o", f"remount,size={used + 400}k", str(data)], check=True)
        counting.grow = lambda: subprocess.run(["mount", "-o", "remount,size=64m", str(data)], check=True)
        yield counting
    finally:
        subprocess.run(["umount", "-l", str(data)], check=False)


def test_a_disk_that_filled_during_index_locks_nothing_and_loses_nothing(small_disk):
    from harness import run_hermes

    world = small_disk
    _write_consent(world)
    repo = world.git_repo("app")
    for i in range(400):
        world.session(repo, [("user", f"note {i} " + "lorem ipsum dolor " * 150), ("assistant", "ok " * 200)])
    full = run_hermes(world.home, "project-history", "index", "--all-projects", cwd=repo)
    assert full.returncode != 0
    (line,) = full.stderr.strip().splitlines()
    assert "no space left" in line and "damaged" not in line and "purge" not in line, line
    sent_before = len(world.server.inputs)
    assert sent_before < 1200
    world.grow()
    result = world.search(world.session(repo), "lorem", mode="semantic")
    assert result["semantic_status"] in ("ready", "indexing"), result.get("semantic_error")
    done = run_hermes(world.home, "project-history", "index", "--all-projects", cwd=repo)
    assert done.returncode == 0, done.stderr
    status = run_hermes(world.home, "project-history", "status", cwd=repo)
    assert "800 of 800 messages indexed" in status.stdout, status.stdout  # 400 conversations of 2
    # 800 chunks (one per message: its first message_tokens): what was stored before the disk
    # filled is not sent again; only the batch that could not be stored is (at most batch_size).
    documents = [text for text in world.server.inputs if text != "lorem"]
    assert 800 <= len(documents) <= 800 + 32, len(documents)


# --------------------------------------------------------------------------- unbounded keyword time


def _keyword_clock(plugin, monkeypatch, *, passed_in: str | None = None):
    """The keyword deadline's clock, moved past the deadline from the start (``passed_in`` None) or
    when the reader first enters ``passed_in``: time runs out at a known step, whatever the
    machine's speed (no timed assertion). Returns the reader module (its ``_now`` is the clock)."""
    import importlib

    reader = importlib.import_module(f"{plugin.__name__}.fulltext.reader")
    monkeypatch.setattr(reader, "PROGRESS_STEPS", 1)  # the clock is read at every SQLite step
    late = lambda: float("inf")  # noqa: E731
    if passed_in is None:
        monkeypatch.setattr(reader, "_now", late)
        return reader
    original = getattr(reader.FullTextReader, passed_in)
    entered_before = []

    def entered(self, *args, **kwargs):
        if not entered_before:
            entered_before.append(True)
            monkeypatch.setattr(reader, "_now", late)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(reader.FullTextReader, passed_in, entered)
    return reader


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_a_keyword_search_out_of_time_answers_and_says_so(world, plugin, monkeypatch, mode):
    repo = world.git_repo("app")
    for i in range(30):
        world.session(repo, [("user", f"的 是 在 了 一 {i} 不 我 有 和 人 这"), ("assistant", "好 的")])
    current = world.session(repo)
    spaced = " ".join("的是在了一不我有和人这中大为上个国到说们" * 60)  # single characters: a LIKE scan
    _keyword_clock(plugin, monkeypatch)
    result = world.search(current, spaced, mode=mode)
    assert result["success"] and result["results"] == []
    assert "time limit" in result["message"]
    assert any("stopped at its" in w for w in result["warnings"]), result
    assert any("first 32 terms" in w for w in result["warnings"]), result
    assert any("first 2048 characters" in w for w in result["warnings"]), result


def test_a_keyword_search_out_of_time_keeps_what_it_found(world, plugin, monkeypatch):
    repo = world.git_repo("app")
    found = world.session(repo, [("user", "数据库迁移失败了, 要回滚吗"), ("assistant", "先备份")])
    for i in range(5):
        world.session(repo, [("user", f"今天只聊回滚 {i}"), ("assistant", "好")])
    current = world.session(repo)
    # The question's 3-grams find one conversation; too few, so its 2-character word "回滚" is
    # looked for with LIKE, and the clock passes the deadline right there.
    reader = _keyword_clock(plugin, monkeypatch, passed_in="like_messages")
    result = world.search(current, "数据库迁移 回滚", mode="keyword", limit=3)
    assert session_ids(result) == [found], result
    assert any("stopped at its" in w for w in result["warnings"]), result
    monkeypatch.setattr(reader, "_now", time.monotonic)  # in time, the 2-character word adds the others
    unhurried = world.search(current, "数据库迁移 回滚", mode="keyword", limit=3)
    assert "warnings" not in unhurried, unhurried
    assert session_ids(unhurried)[0] == found and len(session_ids(unhurried)) == 3
