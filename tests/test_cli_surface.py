"""``hermes project-history`` as a person meets it at a terminal (issue #9), through the real CLI.

Every case runs the real ``hermes`` of the test venv in a subprocess. Semantic cases use an
OpenAI-compatible server on 127.0.0.1 backed by a real model, which counts what it is sent.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from embedding_server import EmbeddingServer
from harness import HERMES, enable_plugin, run_hermes, use_embedding_server

KEY = "sk-test-surface"


@pytest.fixture(scope="module")
def server():
    with EmbeddingServer() as running:
        yield running


@pytest.fixture
def cli_world(world, server, monkeypatch):
    enable_plugin(world.home)
    (world.home / ".env").write_text(f"PROJECT_HISTORY_EMBEDDING_API_KEY={KEY}\n")
    monkeypatch.delenv("PROJECT_HISTORY_EMBEDDING_API_KEY", raising=False)
    use_embedding_server(server)
    alpha = world.folder("alpha", git=True)
    world.alpha = alpha
    world.alpha_id = world.project("Alpha", alpha)
    world.old = world.session(
        alpha,
        [("user", "The login timeout is five minutes"), ("assistant", "I raised it to thirty.")],
        title="Login timeout",
    )
    world.other = world.session(alpha, [("user", "The invoice export uses CSV files")], title="Invoices")
    server.reset()
    return world


def cli(world, *args: str, cwd=None, **env):
    return run_hermes(world.home, "project-history", *args, cwd=cwd or world.alpha, **env)


def test_bare_command_prints_full_help(cli_world):
    done = cli(cli_world)
    assert done.returncode == 0, done.stderr
    for word in ("setup", "status", "allow", "revoke", "index", "search", "getting started"):
        assert word in done.stdout, word
    assert "hermes plugins enable" in done.stdout  # says how the verbs differ


def test_unquoted_multi_word_query(cli_world):
    done = cli(cli_world, "search", "login", "timeout", "--mode", "keyword")
    assert done.returncode == 0, done.stderr
    assert f"@session:{cli_world.old}" in done.stdout
    assert "   reply: I raised it to thirty." in done.stdout  # what answered the hit (issue 30.3)


def test_closed_pipe_is_not_a_traceback(cli_world):
    process = subprocess.Popen(
        [HERMES, "project-history", "search", "login", "timeout", "--mode", "keyword"],
        cwd=cli_world.alpha,
        env={**__import__("os").environ, "HERMES_HOME": str(cli_world.home), "NO_COLOR": "1"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    process.stdout.close()  # the reader is gone before the command writes (like `| head -0`)
    stderr = process.stderr.read().decode()
    process.wait(timeout=120)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def test_unknown_session_is_an_error(cli_world):
    done = cli(cli_world, "search", "login", "--session", "nope")
    assert done.returncode == 2
    assert "session not found: nope" in done.stderr


def test_status_and_search_count_the_same_conversations(cli_world):
    status = cli(cli_world, "status")
    search = cli(cli_world, "search", "login", "--mode", "keyword")
    assert status.returncode == 0 and search.returncode == 0, status.stderr + search.stderr
    in_status = re.search(r"Alpha \(p_[0-9a-f]+\): (\d+) conversations", status.stdout)
    in_search = re.search(r"·\s+(\d+) conversations", search.stdout)
    assert in_status and in_search, status.stdout + search.stdout
    assert in_status.group(1) == in_search.group(1) == "2"


def test_revoke_shows_when_consent_was_revoked(cli_world):
    assert cli(cli_world, "allow", "--yes", "--all-projects").returncode == 0
    import time

    time.sleep(1.1)  # whole seconds in the stamps
    done = cli(cli_world, "revoke")
    assert done.returncode == 0, done.stderr
    status = cli(cli_world, "status").stdout
    line = next(line for line in status.splitlines() if line.startswith("Consent"))
    revoked, given = re.search(r"revoked (\S+) \(given (\S+)\)", line).groups()
    assert revoked != given
    # The old names still work.
    assert cli(cli_world, "enable", "--yes", "--all-projects").returncode == 0
    assert cli(cli_world, "disable").returncode == 0


def test_cli_search_starts_no_indexing_and_says_to_run_index(cli_world, server):
    assert cli(cli_world, "allow", "--yes", "--all-projects").returncode == 0
    server.reset()
    done = cli(cli_world, "search", "how", "long", "until", "logout", "--mode", "hybrid")
    assert done.returncode == 0, done.stderr
    assert "hermes project-history index" in done.stdout
    assert server.requests == 0  # nothing embedded, not even the query: no work to abandon
    db = cli_world.home / "plugins/project-history-recall/embeddings.db"
    if db.exists():
        import sqlite3

        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 0


def test_index_progress_advances_per_batch(cli_world, server):
    for n in range(12):
        cli_world.session(cli_world.alpha, [("user", f"note number {n} about the deployment pipeline")])
    run_hermes(
        cli_world.home,
        "config",
        "set",
        "plugins.project-history-recall.embedding.batch_size",
        "2",
        "--force",
    )
    assert cli(cli_world, "allow", "--yes", "--all-projects").returncode == 0
    done = cli(cli_world, "index", "--all-projects")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if re.search(r"\d+/\d+ chunks", line)]
    counts = [int(re.search(r"(\d+)/\d+ chunks", line).group(1)) for line in lines]
    assert len(set(counts)) > 2, done.stdout  # more than "before" and "after"
    assert counts == sorted(counts)
    assert all("chunks/s" in line and "ETA" in line for line in lines)


def test_allow_refuses_when_the_provider_cannot_work(cli_world):
    (cli_world.home / ".env").write_text("")
    done = run_hermes(
        cli_world.home, "config", "set", "plugins.project-history-recall.embedding.base_url", "", "--force"
    )
    assert done.returncode == 0
    refused = cli(cli_world, "allow", "--yes", "--all-projects")
    assert refused.returncode == 2
    assert "needs an API key" in refused.stderr and "project-history setup" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_unknown_provider_does_not_fall_back_to_openai(cli_world, server):
    run_hermes(
        cli_world.home,
        "config",
        "set",
        "plugins.project-history-recall.embedding.provider",
        "opneai",
        "--force",
    )
    refused = cli(cli_world, "allow", "--yes", "--all-projects")
    assert refused.returncode == 2 and "opneai" in refused.stderr
    status = cli(cli_world, "status").stdout
    assert "api.openai.com" not in status and "opneai" in status


# --------------------------------------------------------------------------- issue #28's frictions


def test_status_before_any_setup_offers_the_local_model_first(world):
    enable_plugin(world.home)
    folder = world.folder("alpha", git=True)
    world.session(folder, [("user", "hello")])
    done = run_hermes(world.home, "project-history", "status", cwd=folder)
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if "cannot work" in line]
    assert "`hermes project-history setup local` (a model on this machine, no key" in line, line
    assert line.index("setup local") < line.index("setup openai"), line


def test_status_of_the_local_provider_says_nothing_of_an_api_key(world):
    enable_plugin(world.home)
    from hermes_cli.config import save_config

    embedding = {"provider": "local", "model": "e5-small", "model_path": str(world.home / "no-model")}
    save_config({"plugins": {"project-history-recall": {"embedding": embedding}}}, merge_existing=True)
    done = run_hermes(world.home, "project-history", "status")
    assert done.returncode == 0, done.stderr
    assert "provider: local" in done.stdout and "API key" not in done.stdout, done.stdout


def test_a_search_outside_every_project_says_how_to_name_one(world):
    enable_plugin(world.home)
    world.session(world.folder("alpha", git=True), [("user", "The login timeout is five minutes")])
    outside = world.folder("loose")
    done = run_hermes(world.home, "project-history", "search", "login", "timeout", cwd=outside)
    assert done.returncode == 0, done.stderr
    assert "No project context (the working directory is in no project or git repository)" in done.stdout
    assert "--cwd DIR" in done.stdout and "--session ID" in done.stdout, done.stdout
    assert "hermes project-history status" in done.stdout
