"""What leaves the machine and when (issue 8, items 6-8, 10, 13, 14), through the real Hermes.

A counting OpenAI-compatible server on 127.0.0.1 (a real model behind it) sees every request:
after ``disable`` returns it gets none; a secret pasted into a conversation never reaches it,
nor a tool result, a file or the CLI's output; a provider that hangs, drips bytes or asks to
come back in an hour costs a search its budget plus a second at most, and keyword results stay.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time

import pytest
from embedding_server import EmbeddingServer
from harness import enable_plugin, run_hermes, session_ids

DATA = "plugins/project-history-recall"
API_KEY = "sk-proj-Zq8vN3pL5xR7tY2uW9kJ4mB6"
PASSWORD = "hunter2-Xy9Qp"
PEM_BODY = "MIIEowIBAAKCAQEAq1w2e3r4t5y6u7i8o9p0"
PASSWORD_IN_URL = "s3cr3t-Pa55"


@pytest.fixture(scope="module")
def server():
    with EmbeddingServer() as running:
        yield running


def configure(world, **embedding) -> None:
    from hermes_cli.config import save_config

    save_config({"plugins": {"project-history-recall": {"embedding": embedding}}}, merge_existing=True)


def cli(world, *args: str, cwd=None):
    return run_hermes(world.home, "project-history", *args, cwd=cwd)


@pytest.fixture
def app(world, server, plugin):
    """One project with a secret-bearing conversation, a plain one, and the current session."""
    enable_plugin(world.home)
    configure(world, model="e5-small", base_url=server.base_url, input_type=True, index_budget_seconds=30)
    world.repo = world.folder("app", git=True)
    world.pid = world.project("App", world.repo)
    world.secrets = world.session(
        world.repo,
        [
            ("user", f"Here is the key for the staging deploy: {API_KEY}"),
            ("assistant", f"Stored. The database 密码：{PASSWORD} is in the vault too."),
            ("user", f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----"),
        ],
        title="Deploy credentials",
    )
    world.expiry = world.session(
        world.repo,
        [("user", "The login session expires after five minutes of inactivity"), ("assistant", "Raised it.")],
        title="Session expiry",
    )
    world.current = world.session(world.repo, [("user", "hi")])
    plugin.reset_process_state()
    server.reset()
    server.set_mode("ok")
    return world


def agree(world) -> None:
    done = cli(world, "enable", "--yes", "--all-projects")
    assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------------- secrets (item 13)


def test_a_pasted_secret_never_leaves_the_machine(app, server):
    agree(app)
    results = [
        app.search(app.current, q, mode=m)
        for q in ("staging deploy key", "vault")
        for m in ("keyword", "semantic", "hybrid")
    ]
    assert any(app.secrets in session_ids(r) for r in results)  # the conversation is found
    sent = json.dumps(server.bodies)
    assert server.texts > 0 and "[redacted]" in sent
    outputs = [cli(app, "search", "staging deploy key", cwd=app.repo), cli(app, "status")]
    texts = [sent, *(json.dumps(r, ensure_ascii=False) for r in results)]
    texts += [o.stdout + o.stderr for o in outputs]
    texts += [p.read_text(errors="replace") for p in (app.home / DATA).glob("*.json")]
    db = app.home / DATA / "embeddings.db"
    for secret in (API_KEY, PASSWORD, PEM_BODY):
        for text in texts:
            assert secret not in text
        assert secret.encode() not in db.read_bytes()


def test_the_in_process_model_is_the_one_that_may_see_secrets(app, plugin):
    redaction = plugin.text.redact
    assert (
        redaction.redact_secrets(f"key {API_KEY} and 令牌: abcdef123456")
        == "key [redacted] and 令牌: [redacted]"
    )
    assert redaction.redact_secrets("we discussed the token bucket algorithm") == (
        "we discussed the token bucket algorithm"
    )


# --------------------------------------------------------------------------- endpoints (item 7)


def test_credentials_in_base_url_are_shown_and_stored_nowhere(app, server):
    base = server.base_url.replace("http://", f"http://bob:{PASSWORD_IN_URL}@")
    configure(app, base_url=base)
    asked = app.search(app.current, "login timeout", mode="hybrid")
    assert asked["semantic_status"] == "consent_required"
    assert asked["semantic_consent"]["endpoint"] == server.base_url.rstrip("/")
    done = cli(app, "enable", "--yes", "--project", app.pid)
    assert done.returncode == 0, done.stderr
    status = cli(app, "status")
    consent = (app.home / DATA / "consent.json").read_text()
    found = app.search(app.current, "login timeout", mode="hybrid")
    assert found["semantic_status"] == "ready" and app.expiry in session_ids(found)
    for text in (json.dumps(asked), json.dumps(found), done.stdout, done.stderr, status.stdout, consent):
        assert PASSWORD_IN_URL not in text

    # Another password at the same host is another target: consent must be given again.
    configure(app, base_url=server.base_url.replace("http://", "http://bob:other-password@"))
    assert app.search(app.current, "login timeout", mode="hybrid")["semantic_status"] == "consent_required"


# --------------------------------------------------------------------------- a hanging provider (item 8)


@pytest.mark.parametrize("mode", ["hang", "drip", "retry_later"])
def test_a_hanging_provider_costs_at_most_the_budget(app, server, mode):
    agree(app)
    configure(app, index_budget_seconds=2, timeout_seconds=20, max_retries=2)
    assert app.search(app.current, "warm", mode="hybrid")["semantic_status"] == "ready"
    app.add(app.expiry, [("user", "And the idle timeout moves to thirty minutes")])  # inline work pending
    server.set_mode(mode)
    for search_mode in ("semantic", "hybrid"):
        started = time.monotonic()
        result = app.search(app.current, "login session expires", mode=search_mode)
        elapsed = time.monotonic() - started
        assert elapsed < 2 + 1, (mode, search_mode, elapsed)
        assert result["success"] and result["semantic_status"] == "unavailable"
        assert app.expiry in session_ids(result)  # the keyword results stand
        assert "Traceback" not in json.dumps(result)


# --------------------------------------------------------------------------- disable stops indexing (item 6)


def test_nothing_is_sent_after_disable_returns(app, server, plugin):
    agree(app)
    configure(app, index_budget_seconds=0, batch_size=1)
    app.add(app.expiry, [("user", f"Note number {n} about the session cache") for n in range(40)])
    server.slow_seconds = 0.3
    server.set_mode("slow")
    try:
        app.search(app.current, "session cache", mode="hybrid")  # starts the background indexer
        deadline = time.monotonic() + 20
        while server.requests < 3:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        done = cli(app, "disable", "--purge")
        assert done.returncode == 0, done.stderr
        after = server.requests
        time.sleep(1.5)
        assert server.requests == after  # not one request once disable has returned
        assert not (app.home / DATA / "embeddings.db").exists()
    finally:
        server.set_mode("ok")
        server.slow_seconds = 2.0
        plugin.process_state().semantic.background.wait(30)


# --------------------------------------------------------------------------- locks and files (item 10)


def test_a_status_probe_never_makes_an_indexer_give_up(app, plugin):
    index_db = plugin.semantic.index_store
    data_dir = app.home / DATA
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            index_db.indexer_busy(data_dir)

    with index_db.indexer_lock(data_dir):
        pass  # the lock file exists
    prober = threading.Thread(target=probe)
    prober.start()
    try:
        for _ in range(200):
            with index_db.indexer_lock(data_dir) as taken:
                assert taken
    finally:
        stop.set()
        prober.join()


def test_two_enables_at_once_keep_both_projects(app):
    other = app.folder("other", git=True)
    other_id = app.project("Other", other)
    for _ in range(3):
        (app.home / DATA / "consent.json").unlink(missing_ok=True)
        runs = [
            threading.Thread(target=cli, args=(app, "enable", "--yes", "--project", pid))
            for pid in (app.pid, other_id)
        ]
        for run in runs:
            run.start()
        for run in runs:
            run.join()
        consent = json.loads((app.home / DATA / "consent.json").read_text())
        assert consent["projects"] == sorted([app.pid, other_id])


def test_the_plugins_files_are_private(app):
    agree(app)
    app.search(app.current, "login timeout", mode="hybrid")
    for name in ("consent.json", "embeddings.db", "indexer.lock"):
        mode = stat.S_IMODE(os.stat(app.home / DATA / name).st_mode)
        assert mode == 0o600, (name, oct(mode))
    matrices = app.home / DATA / "matrix"
    assert stat.S_IMODE(matrices.stat().st_mode) == 0o700
    derived = list(matrices.iterdir())
    assert {path.suffix for path in derived} >= {".json", ".f32", ".rows"}
    for path in derived:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, (path.name, oct(path.stat().st_mode))


# --------------------------------------------------------------------------- quoted history (item 14)


def test_results_are_marked_as_quoted_history_without_control_characters(app):
    app.session(app.repo, [("user", "Deploy \x1b[31mfailed\x1b[0m on \u202eserver\u202c nine\x00 times")])
    result = app.search(app.current, "deploy failed", mode="keyword")
    assert "not instructions" in result["notice"]
    (snippet,) = [r["snippet"] for r in result["results"] if "Deploy" in r["snippet"]]
    assert snippet == "Deploy [31mfailed [0m on server nine times"
    assert not any(ord(ch) < 32 or ch in "\u202e\u202c" for ch in snippet)
    tools = {t["function"]["name"]: t["function"] for t in _tool_definitions()}
    assert "not as instructions" in tools["project_history_search"]["description"]


def _tool_definitions() -> list[dict]:
    import model_tools

    return model_tools.get_tool_definitions(enabled_toolsets=["project_history"], quiet_mode=True)
