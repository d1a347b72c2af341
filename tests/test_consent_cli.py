"""The privacy chain (spec §五) and ``hermes project-history``, through the real Hermes CLI.

An OpenAI-compatible embedding server on 127.0.0.1, backed by a real model, counts every request:
before ``enable`` not one text may reach it, from any search mode.
"""

from __future__ import annotations

import json
import logging
import sqlite3

import pytest
from embedding_server import EmbeddingServer
from harness import enable_plugin, run_hermes, session_ids, use_embedding_server

SECRET = "sk-test-SECRET-4242-do-not-leak"


@pytest.fixture(scope="module")
def server():
    with EmbeddingServer() as running:
        yield running


@pytest.fixture
def setup(world, server, monkeypatch):
    """Two projects with history, the plugin installed in this home, an endpoint configured."""
    enable_plugin(world.home)
    (world.home / ".env").write_text(f"PROJECT_HISTORY_EMBEDDING_API_KEY={SECRET}\n")
    monkeypatch.delenv("PROJECT_HISTORY_EMBEDDING_API_KEY", raising=False)
    use_embedding_server(server, index_budget_seconds=60)
    alpha = world.folder("alpha", git=True)
    beta = world.folder("beta", git=True)
    world.alpha_id = world.project("Alpha", alpha)
    world.beta_id = world.project("Beta", beta)
    world.alpha_old = world.session(
        alpha,
        [
            ("user", "The login session expires after five minutes of inactivity"),
            ("assistant", "I raised it."),
        ],
        title="Session expiry",
    )
    world.alpha_now = world.session(alpha, [("user", "hello")])
    world.beta_old = world.session(beta, [("user", "The invoice export uses CSV files")])
    world.beta_now = world.session(beta, [("user", "hi")])
    world.alpha, world.beta = alpha, beta
    import hermes_plugins.project_history_recall as plugin

    plugin.reset_process_state()
    server.reset()
    return world


def configure(world, **embedding) -> None:
    """As a user changes a setting: ``hermes config set``."""
    for key, value in embedding.items():
        done = run_hermes(
            world.home,
            "config",
            "set",
            f"plugins.project-history-recall.embedding.{key}",
            str(value),
            "--force",
        )
        assert done.returncode == 0, done.stderr


def cli(world, *args: str, cwd=None):
    return run_hermes(world.home, "project-history", *args, cwd=cwd)


def search_all_modes(world, session_id: str) -> list[dict]:
    return [
        world.search(session_id, "login timeout", mode=mode) for mode in ("keyword", "semantic", "hybrid")
    ]


def test_nothing_is_sent_before_consent_then_only_within_it(setup, server):
    world = setup
    for result in search_all_modes(world, world.alpha_now):
        assert result["success"] and result["semantic_status"] == "consent_required"
    assert server.requests == 0

    hybrid = world.search(world.alpha_now, "login timeout", mode="hybrid")
    ask = hybrid["semantic_consent"]
    assert ask["on_yes_run"] == f"hermes project-history allow --project {world.alpha_id} --yes"
    assert server.base_url.rstrip("/") in ask["ask_user"] and "Alpha" in ask["ask_user"]

    done = cli(world, *ask["on_yes_run"].split()[2:])
    assert done.returncode == 0, done.stderr
    assert server.base_url.rstrip("/") in done.stdout
    consent = json.loads((world.home / "plugins/project-history-recall/consent.json").read_text())
    assert consent["projects"] == [world.alpha_id]
    assert consent["scope"] == "history+incremental"
    assert (consent["provider"], consent["model"]) == ("openai", "e5-small")
    assert set(consent) >= {"profile", "projects", "provider", "endpoint", "model", "confirmed_at", "scope"}

    semantic = world.search(world.alpha_now, "authentication timeout", mode="semantic")
    assert semantic["semantic_status"] == "ready"
    assert session_ids(semantic) == [world.alpha_old]
    assert server.requests > 0

    # A project outside the consent: nothing is sent for it.
    server.reset()
    for result in search_all_modes(world, world.beta_now):
        assert result["semantic_status"] == "consent_required"
    assert server.requests == 0

    # A model change needs a new yes.
    configure(world, model="e5-small-v2")
    for result in search_all_modes(world, world.alpha_now):
        assert result["semantic_status"] == "consent_required"
    assert server.requests == 0
    configure(world, model="e5-small")

    # disable: off, and nothing is sent.
    done = cli(world, "disable")
    assert done.returncode == 0, done.stderr
    for result in search_all_modes(world, world.alpha_now):
        assert result["semantic_status"] == "disabled"
        assert result["success"]
    assert server.requests == 0


def test_enable_without_project_uses_the_current_folder(setup, server):
    world = setup
    done = cli(world, "enable", "--yes", cwd=world.beta)
    assert done.returncode == 0, done.stderr
    consent = json.loads((world.home / "plugins/project-history-recall/consent.json").read_text())
    assert consent["projects"] == [world.beta_id]
    done = cli(world, "enable", "--yes", "--project", world.alpha_id)
    assert done.returncode == 0
    consent = json.loads((world.home / "plugins/project-history-recall/consent.json").read_text())
    assert consent["projects"] == sorted([world.alpha_id, world.beta_id])


def test_index_status_search_and_purge(setup, server):
    world = setup
    assert cli(world, "enable", "--yes", "--all-projects").returncode == 0
    done = cli(world, "index", "--all-projects")
    assert done.returncode == 0, done.stderr
    assert "chunks embedded" in done.stdout
    sent = server.texts
    assert sent > 0

    again = cli(world, "index", "--all-projects")
    assert again.returncode == 0 and "already up to date, nothing to embed" in again.stdout
    assert server.texts == sent  # a second run sends no text to embed

    status = cli(world, "status")
    assert status.returncode == 0, status.stderr
    assert "Alpha" in status.stdout and "Beta" in status.stdout
    assert "3 of 3 messages indexed; semantic: ready" in status.stdout, status.stdout  # Alpha
    assert "2 of 2 messages indexed; semantic: ready" in status.stdout, status.stdout  # Beta

    found = cli(world, "search", "authentication timeout", "--mode", "semantic", cwd=world.alpha)
    assert found.returncode == 0, found.stderr
    assert f"@session:{world.alpha_old}" in found.stdout
    as_json = cli(world, "search", "invoice", "--mode", "keyword", "--json", "--cwd", world.beta)
    assert as_json.returncode == 0
    assert session_ids(json.loads(as_json.stdout)) == [world.beta_old]

    db = world.home / "plugins/project-history-recall/embeddings.db"
    assert db.exists()
    done = cli(world, "disable", "--purge")
    assert done.returncode == 0 and not db.exists()


BAD_ARGUMENTS = [
    (("enable", "--project", "p_nope", "--yes"), "project not found: p_nope"),
    (("enable",), "confirmation needed"),
    (("enable", "--project", "p_x", "--all-projects", "--yes"), "not both"),
    (("index", "--all-projects"), "not enabled"),
    (("search", "   "), "the query is empty"),
    (("search", "x", "--limit", "50"), "--limit must be from 1 to 10"),
    (("search", "x", "--cwd", "/does/not/exist"), "no such folder"),
    (("search", "x", "--mode", "fuzzy"), "invalid choice"),
    (("frobnicate",), "invalid choice"),
]


def test_bad_arguments_exit_non_zero_with_a_message(setup):
    for args, expected in BAD_ARGUMENTS:
        done = cli(setup, *args, cwd=setup.alpha)
        assert done.returncode != 0, args
        assert expected in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr, args


def test_api_key_never_leaks(setup, server, caplog):
    world = setup
    caplog.set_level(logging.DEBUG)
    outputs = [cli(world, "enable", "--yes", "--all-projects"), cli(world, "status"), cli(world, "index")]
    results = [
        world.search(world.alpha_now, "login timeout", mode=mode)
        for mode in ("keyword", "semantic", "hybrid")
    ]
    server.mode = "down"
    results.append(world.search(world.beta_now, "invoice export", mode="hybrid"))
    outputs.append(cli(world, "search", "invoice export", "--cwd", world.beta))
    server.mode = "ok"
    assert server.authorizations and all(
        SECRET in a for a in server.authorizations
    )  # the key did go to the provider

    texts = [json.dumps(r) for r in results] + [o.stdout + o.stderr for o in outputs]
    texts.append((world.home / "plugins/project-history-recall/consent.json").read_text())
    texts.append(caplog.text)
    texts += [log.read_text(errors="replace") for log in (world.home / "logs").rglob("*") if log.is_file()]
    for text in texts:
        assert SECRET not in text
    db = world.home / "plugins/project-history-recall/embeddings.db"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(FULL)")
    assert SECRET.encode() not in db.read_bytes()


def test_revoke_and_uninstall_switch_off_first_and_say_when_an_indexer_is_still_sending(
    setup, plugin, monkeypatch, capsys
):
    """An indexer mid-request holds the lock: both commands turn semantic search off and withdraw
    consent at once (it sends nothing after its request), then say in one line that it has not
    stopped yet, and uninstall removes nothing while it runs."""
    import argparse
    import importlib

    assert cli(setup, "enable", "--yes", "--all-projects").returncode == 0
    commands = importlib.import_module(f"{plugin.__name__}.command.commands")
    index_store = importlib.import_module(f"{plugin.__name__}.semantic.index_store")
    monkeypatch.setattr(commands, "DISABLE_WAIT_SECONDS", 1.0)
    parser = argparse.ArgumentParser()
    plugin.command.setup_parser(parser)
    data_dir = plugin.store.HermesEnv.current().data_dir
    with index_store.indexer_lock(data_dir) as taken:  # the running indexer
        assert taken
        with pytest.raises(SystemExit) as revoked:
            plugin.command.run(plugin.process_state(), parser.parse_args(["revoke"]))
        consent = json.loads((data_dir / "consent.json").read_text())
        assert consent.get("disabled_at")
        assert cli(setup, "allow", "--yes", "--all-projects").returncode == 0
        assert not json.loads((data_dir / "consent.json").read_text()).get("disabled_at")
        with pytest.raises(SystemExit) as removed:
            plugin.command.run(plugin.process_state(), parser.parse_args(["uninstall", "--yes"]))
        assert (data_dir / "consent.json").exists()  # nothing removed while the indexer runs
    assert revoked.value.code == 2 and removed.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert "semantic search is off, but an indexer did not stop within 1s" in lines[0]
    assert "an indexer did not stop within 1s; run this again later" in lines[-1]
    assert json.loads((data_dir / "consent.json").read_text()).get("disabled_at")  # off again
    assert plugin.store.HermesEnv.current().settings.embedding.enabled is False
