"""An index run on a slow endpoint, through the real ``hermes project-history`` CLI: batches that
take too long are halved and grown back, no run ends early, a text that fails alone is skipped,
recorded, shown by ``status`` and not sent again; an endpoint that fails every text ends the run
with nothing recorded against the texts.

The endpoint is the loopback server of ``embedding_server.py`` (MiniLM behind it) with a delay per
request: three times ``timeout_seconds`` for batches over 8 texts, or for any batch holding one
poisoned text.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
from embedding_server import EmbeddingServer
from harness import enable_plugin, run_hermes

TIMEOUT = 2.5  # long enough that MiniLM answers 8 short texts in time on a busy machine
POISON = "POISONED"
TOPICS = [
    "login sessions", "invoice exports", "the deploy pipeline", "database backups", "rate limits",
    "the search index", "email templates", "feature flags", "payment retries", "audit logs",
]  # fmt: skip


@pytest.fixture(scope="module")
def server(plugin):
    with EmbeddingServer("minilm") as running:
        running._embed(["load the model before the first timed request"], False)
        yield running


@pytest.fixture
def home(world, server, plugin):
    """One project with 60 messages about different things, semantic search allowed there."""
    enable_plugin(world.home)
    repo = world.folder("app", git=True)
    world.project("App", repo)
    for n in range(6):
        world.session(
            repo,
            [
                (role, f"Note {n}-{k}: we talked about {TOPICS[k]} and what to change next ({role}).")
                for k in range(10)
                for role in ("user",)
            ],
        )
    world.repo = repo
    settings = {
        "provider": "openai",
        "model": "minilm",
        "base_url": server.base_url,
        "timeout_seconds": TIMEOUT,
        "max_retries": 1,
        "batch_size": 32,
    }
    from hermes_cli.config import save_config

    save_config({"plugins": {"project-history-recall": {"embedding": settings}}}, merge_existing=True)
    plugin.reset_process_state()
    server.reset()
    done = cli(world, "allow", "--yes", "--all-projects")
    assert done.returncode == 0, done.stderr
    return world


def cli(world, *args: str):
    return run_hermes(world.home, "project-history", *args, cwd=world.repo, timeout=300)


def stored(world) -> tuple[int, list[tuple]]:
    db = world.home / "plugins/project-history-recall/embeddings.db"
    with sqlite3.connect(db) as conn:
        chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        skipped = conn.execute("SELECT message_id, reason FROM skipped").fetchall()
    return chunks, skipped


def sizes(server) -> list[int]:
    return [len(body["input"]) for body in server.bodies]


def test_batches_over_eight_texts_that_answer_too_late_never_end_the_run(home, server):
    server.delay = lambda texts: 3 * TIMEOUT if len(texts) > 8 else 0
    done = cli(home, "index")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "60 chunks embedded" in done.stdout
    assert sizes(server)[:2] == [32, 16]  # halved on each timeout, down to what answers in time
    assert 16 in sizes(server)[2:]  # grown back after answers (and halved again)
    assert stored(home) == (60, [])
    status = cli(home, "status")
    assert status.returncode == 0, status.stderr
    assert "60 of 60 messages indexed; semantic: ready" in status.stdout

    # A session that ends later is not indexed yet: a search reads what is there and says so.
    home.session(home.repo, [("user", "We agreed to rotate the database backups weekly.")])
    result = json.loads(cli(home, "search", "invoice exports", "--mode", "semantic", "--json").stdout)
    assert result["semantic_status"] == "partial"
    assert result["semantic_coverage"] == {"indexed_messages": 60, "messages": 61}
    assert result["results"] and {r["score_source"] for r in result["results"]} == {"semantic"}


def test_a_text_that_fails_alone_is_skipped_recorded_shown_and_not_sent_again(home, server):
    home.session(home.repo, [("user", f"This one is {POISON} and the endpoint chokes on it.")])
    server.delay = lambda texts: 3 * TIMEOUT if any(POISON in text for text in texts) else 0
    done = cli(home, "index")
    assert done.returncode == 0, done.stdout + done.stderr
    alone = [body for body in server.bodies if body["input"] == [t for t in body["input"] if POISON in t]]
    assert len(alone) == 2  # tried alone max_retries + 1 times
    chunks, skipped = stored(home)
    assert chunks == 60 and len(skipped) == 1 and "timed out" in skipped[0][1]
    status = cli(home, "status")
    assert "60 of 61 messages indexed; semantic: complete except 1 skipped" in status.stdout, status.stdout

    server.reset()
    again = cli(home, "index")
    assert again.returncode == 0 and "nothing to embed" in again.stdout, again.stdout + again.stderr
    assert server.requests == 0


def test_an_endpoint_failing_every_text_ends_the_run_and_blames_no_text(home, server):
    server.delay = lambda texts: 3 * TIMEOUT
    done = cli(home, "index")
    assert done.returncode != 0
    assert "failed alone: the endpoint, not the texts" in done.stderr, done.stderr
    assert stored(home) == (0, [])
    status = cli(home, "status")
    assert "0 of 60 messages indexed; semantic: partial" in status.stdout, status.stdout
    result = json.loads(cli(home, "search", "invoice exports", "--json").stdout)
    assert result["success"] is True and result["semantic_status"] == "partial"
    assert result["semantic_coverage"] == {"indexed_messages": 0, "messages": 60}
