"""``hermes project-history forget`` (issue 32 part 3), through the real Hermes CLI and dispatcher.

A forgotten conversation (its whole compression chain, whichever session is named) is returned by
no search mode, holds no vector in ``embeddings.db`` or the matrix files, and no later index run
sends its text to the counting embedding server; ``forget --undo`` brings it back, in keyword
search at once and in semantic search after the next index.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
from embedding_server import EmbeddingServer
from harness import enable_plugin, new_session_id, run_hermes, session_ids, use_embedding_server

DATA = "plugins/project-history-recall"
MODES = ("keyword", "semantic", "hybrid")


@pytest.fixture(scope="module")
def server():
    with EmbeddingServer() as running:
        yield running


def cli(world, *args: str, cwd=None):
    return run_hermes(world.home, "project-history", *args, cwd=cwd)


@pytest.fixture
def setup(world, server):
    """Project Alpha: a kept conversation, a compressed chain of two sessions about zebrafish
    (forgotten by the test) and the current conversation; an endpoint configured."""
    enable_plugin(world.home)
    use_embedding_server(server)
    alpha = world.folder("alpha", git=True)
    world.alpha_id = world.project("Alpha", alpha)
    world.kept = world.session(
        alpha, [("user", "The zebrafish dashboard shows the login latency"), ("assistant", "Noted.")]
    )
    world.first = world.session(
        alpha,
        [("user", "The zebrafish deployment pipeline broke on Tuesday"), ("assistant", "Rolled back.")],
        title="Pipeline outage",
    )
    world.db.end_session(world.first, "compression")
    world.second = new_session_id()
    world.db.create_session(world.second, "cli", cwd=alpha, parent_session_id=world.first)
    world.add(world.second, [("user", "zebrafish pipeline fixed: the deployment runs again")])
    world.now = world.session(alpha, [("user", "hello")])
    world.alpha = alpha
    import hermes_plugins.project_history_recall as plugin

    plugin.reset_process_state()
    server.reset()
    return world


def found(world, query: str = "zebrafish deployment pipeline") -> dict[str, list[str]]:
    """Session ids each mode returns, through the real dispatcher, from the current conversation;
    ``<mode>/all``: the same with ``scope: all`` (every project, Home too)."""
    results = {}
    for mode in MODES:
        result = world.search(world.now, query, mode=mode, limit=10)
        assert result["success"], result
        results[mode] = session_ids(result)
        everywhere = world.call(
            "project_history_search", {"query": query, "mode": mode, "limit": 10, "scope": "all"}, world.now
        )
        assert everywhere["success"], everywhere
        results[f"{mode}/all"] = session_ids(everywhere)
    return results


def stored_chunks(world, sessions) -> int:
    conn = sqlite3.connect(world.home / DATA / "embeddings.db")
    try:
        return conn.execute(
            "SELECT count(*) FROM chunks WHERE session_id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(sessions)),),
        ).fetchone()[0]
    finally:
        conn.close()


def vectors_of(world, sessions) -> list[bytes]:
    conn = sqlite3.connect(world.home / DATA / "embeddings.db")
    try:
        rows = conn.execute(
            "SELECT vector FROM chunks WHERE session_id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(sessions)),),
        ).fetchall()
    finally:
        conn.close()
    return [bytes(row[0]) for row in rows]


def test_forget_hides_deletes_and_sends_nothing_then_undo_brings_it_back(setup, server):
    world = setup
    chain = {world.first, world.second}
    assert cli(world, "allow", "--all-projects", "--yes").returncode == 0
    done = cli(world, "index", "--all-projects")
    assert done.returncode == 0, done.stderr
    assert stored_chunks(world, chain) > 0
    before = found(world)
    for key in before:  # the chain is findable before, in every mode and scope
        assert chain & set(before[key]), (key, before)
    matrices = world.home / DATA / "matrix"
    assert matrices.is_dir() and any(matrices.iterdir())  # the semantic search wrote one

    blobs = vectors_of(world, chain)

    # Naming the later session forgets the whole chain.
    done = cli(world, "forget", world.second)
    assert done.returncode == 0, done.stderr
    assert "Forgotten" in done.stdout and "2 sessions" in done.stdout, done.stdout
    assert stored_chunks(world, chain) == 0
    assert stored_chunks(world, [world.kept]) > 0  # nothing else was deleted
    files = b"".join(
        path.read_bytes() for path in (world.home / DATA).glob("embeddings.db*") if path.is_file()
    )
    assert not [blob for blob in blobs if blob in files]  # not left in free pages or the WAL either
    assert not matrices.exists() or not any(matrices.iterdir())  # derived copies gone at once
    after = found(world)
    for key in after:  # every mode, this project and every project
        assert not chain & set(after[key]), (key, after)
    assert world.kept in after["keyword"]
    terminal = cli(world, "search", "zebrafish", "pipeline", "--mode", "keyword", "--json", cwd=world.alpha)
    assert terminal.returncode == 0, terminal.stderr
    assert not chain & set(session_ids(json.loads(terminal.stdout)))

    # The chain grows (a new message, a further compression): still nothing of it is sent.
    world.add(world.second, [("user", "zebrafish canary passed")])
    world.db.end_session(world.second, "compression")
    third = new_session_id()
    world.db.create_session(third, "cli", cwd=world.alpha, parent_session_id=world.second)
    world.add(third, [("user", "zebrafish release notes written")])
    server.reset()
    done = cli(world, "index", "--all-projects")
    assert done.returncode == 0, done.stderr
    assert not [text for text in server.inputs if "canary" in text or "Tuesday" in text or "release" in text]
    server.reset()
    for mode in MODES:  # a search, which indexes as it goes, returns and sends none of it either
        result = world.search(world.now, "zebrafish canary release", mode=mode, limit=10)
        assert not {*chain, third} & set(session_ids(result)), (mode, result)
    assert not [text for text in server.inputs if "Tuesday" in text or "release notes" in text]
    assert stored_chunks(world, {*chain, third}) == 0

    status = cli(world, "status")
    assert status.returncode == 0, status.stderr
    assert "Forgotten conversations: 1 " in status.stdout, status.stdout
    assert "2 conversations, 3 of 3 messages indexed" in status.stdout, status.stdout  # kept, current

    # Undo by another session of the chain: keyword at once, semantic after the next index.
    done = cli(world, "forget", "--undo", world.first)
    assert done.returncode == 0, done.stderr
    assert "Remembered" in done.stdout
    assert chain & set(session_ids(world.search(world.now, "zebrafish deployment pipeline", mode="keyword")))
    server.reset()
    done = cli(world, "index", "--all-projects")
    assert done.returncode == 0, done.stderr
    assert [text for text in server.inputs if "Tuesday" in text]  # its text is embedded again
    assert stored_chunks(world, chain) > 0
    semantic = world.search(world.now, "zebrafish deployment pipeline", mode="semantic", limit=10)
    assert {*chain, third} & set(session_ids(semantic)), semantic
    assert "Forgotten conversations" not in cli(world, "status").stdout


def test_forget_works_before_setup_in_keyword_mode(world):
    """No setup, no consent, no embeddings.db: forgetting is recorded in forgotten.json and keyword
    search leaves the conversation out; no index is created for it."""
    enable_plugin(world.home)
    repo = world.git_repo("app")
    hidden = world.session(repo, [("user", "the okapi migration plan")])
    shown = world.session(repo, [("user", "the okapi budget")])
    now = world.session(repo)
    assert set(session_ids(world.search(now, "okapi"))) == {hidden, shown}
    done = cli(world, "forget", hidden)
    assert done.returncode == 0, done.stderr
    assert "0 stored vectors deleted" in done.stdout, done.stdout
    assert session_ids(world.search(now, "okapi")) == [shown]
    assert not (world.home / DATA / "embeddings.db").exists()
    assert hidden in (world.home / DATA / "forgotten.json").read_text()
    again = cli(world, "forget", hidden)
    assert again.returncode == 0 and "Already forgotten" in again.stdout


def test_a_session_in_no_project_can_be_forgotten(world):
    """The user asked: it is recorded, counted, and stays out should it be moved into a project."""
    enable_plugin(world.home)
    loose = world.session(None, [("user", "the tapir notes")])
    done = cli(world, "forget", loose)
    assert done.returncode == 0, done.stderr
    assert "Forgotten conversations: 1 " in cli(world, "status").stdout


BAD = [
    (("forget", "nope"), "session not found: nope (hermes sessions list shows the ids)"),
    (("forget", "  "), "give the id of the conversation to forget"),
    (("forget", "--undo", "no-such-session"), "session not found: no-such-session"),
    (("forget",), "the following arguments are required: SESSION_ID"),
]


def test_bad_ids_get_one_line_that_says_what_to_do(world):
    enable_plugin(world.home)
    world.session(world.git_repo("app"), [("user", "anything")])
    for args, expected in BAD:
        done = cli(world, *args)
        assert done.returncode != 0, args
        assert expected in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr, args
    done = cli(world, "forget", "--undo", world.session(None, [("user", "x")]))
    assert done.returncode == 0 and "was not forgotten" in done.stdout, done.stdout
