"""The semantic index's chunks after edits and rewinds, end to end with the in-process MiniLM
model: a message that got shorter loses its extra chunk rows, a rewound message is never
returned, and a hit in a later chunk shows that chunk. (chunk_text itself: unit/test_chunking.py.)
"""

from __future__ import annotations

import sqlite3

import faults
import pytest
from harness import session_ids

LONG_FILLER = " ".join(
    f"Step {n}: the staging deploy copies bundle{n:02d} to the mirror and checks its signature."
    for n in range(12)
)
GARDEN = (
    "Tomato seedlings in the greenhouse need compost, gentle watering every morning, and stakes "
    "once they reach a hand high. Basil grows well beside them and keeps aphids away from the "
    "young leaves while the peppers ripen slowly in the sun by the south wall."
)
REPLICA = (
    "Separately, the Postgres replica in Frankfurt keeps falling behind the primary: replication "
    "lag reaches forty seconds during the nightly batch, so a failover would lose recent writes. "
    "We will move the WAL archive to faster disks and alert when lag exceeds five seconds."
)
FIRST_PART_ONLY = ("Tomato", "seedlings", "greenhouse")
SECOND_PART = ("replica", "replication", "lag", "failover", "Frankfurt", "WAL")


@pytest.fixture
def small_chunks(world, plugin):
    """Semantic search on (local MiniLM, consented) with small chunks: long messages make several."""
    faults.enable_local_semantic(
        plugin, chunk_size=32, chunk_overlap=8, message_tokens=0, index_budget_seconds=120
    )
    world.repo = world.folder("app", git=True)
    world.pid = world.project("App", world.repo)
    world.chunker = any_chunker(plugin)
    return world


def any_chunker(plugin):
    """The plugin's ``chunk_text``."""
    return plugin.semantic.chunking.chunk_text


def chunk_rows(world, message_id: int) -> list[int]:
    """Chunk indexes stored for a message in embeddings.db (every model), in order."""
    uri = faults.embeddings_db(world.home).resolve().as_uri() + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    try:
        rows = conn.execute(
            "SELECT chunk_index FROM chunks WHERE message_id = ? ORDER BY chunk_index", (message_id,)
        ).fetchall()
    finally:
        conn.close()
    return [row[0] for row in rows]


def test_an_edited_message_loses_its_extra_chunks(small_chunks, plugin):
    """Hermes 0.19 never rewrites a message's content (only ``active``/``compacted``/``api_content``),
    so a pass reads a message again only when its session has no watermark (a new recipe, a
    rebuilt index). Such a pass drops the chunks past the message's new end."""
    world = small_chunks
    session = world.session(world.repo, title="Deploy steps")
    (long_id, _) = world.add(
        session, [("user", LONG_FILLER), ("assistant", "All twelve steps are scripted.")]
    )
    current = world.session(world.repo, [("user", "hi")])
    expected_before = len(world.chunker(LONG_FILLER, 32, 8))
    assert expected_before >= 4

    first = world.search(current, "copying bundles to the mirror", mode="semantic")
    assert first["semantic_status"] == "ready", first
    assert chunk_rows(world, long_id) == list(range(expected_before))

    shorter = "Step 1: the staging deploy copies the bundle to the mirror."
    conn = sqlite3.connect(world.home / "state.db")
    try:
        conn.execute("UPDATE messages SET content = ? WHERE id = ?", (shorter, long_id))
        conn.commit()
    finally:
        conn.close()
    expected_after = len(world.chunker(shorter, 32, 8))
    assert expected_after == 1

    index = world.home / "plugins" / "project-history-recall" / "embeddings.db"
    with sqlite3.connect(index) as conn:  # the watermarks gone: the next pass re-reads the session
        conn.execute("DELETE FROM watermarks")
    again = world.search(current, "copying bundles to the mirror", mode="semantic")
    assert again["success"], again
    assert chunk_rows(world, long_id) == list(range(expected_after)), (
        "chunks past the edited message's new end are still stored"
    )


def test_a_rewound_message_is_never_returned(small_chunks):
    world = small_chunks
    session = world.session(world.repo, [("user", "Morning! Quick question first.")], title="Garden")
    (garden_id, _) = world.add(session, [("user", GARDEN), ("assistant", "Stake them early.")])
    world.session(world.repo, [("user", "The coffee machine on floor two is broken again")])
    current = world.session(world.repo, [("user", "hi")])
    query = "tomato seedlings greenhouse compost"

    for mode in ("semantic", "hybrid"):
        found = world.search(current, query, mode=mode, limit=10)
        assert garden_id in [r["message_id"] for r in found["results"]], (mode, found)

    world.db.rewind_to_message(session, garden_id)
    for mode in ("semantic", "hybrid"):
        after = world.search(current, query, mode=mode, limit=10)
        assert after["success"], after
        assert garden_id not in [r["message_id"] for r in after["results"]], (mode, after)
        assert all("Tomato" not in r["snippet"] for r in after["results"]), (mode, after)

    # Undone with Hermes's own API: the message (and its stored vectors) are found again.
    assert world.db.restore_rewound(session, garden_id) == 2
    back = world.search(current, query, mode="semantic", limit=10)
    assert garden_id in [r["message_id"] for r in back["results"]], back


def test_a_hit_in_a_later_chunk_shows_that_chunk(small_chunks):
    world = small_chunks
    text = GARDEN + " " + REPLICA
    chunks = world.chunker(text, 32, 8)
    # Preconditions on the text: the garden words live only in chunk 0, the replica words later.
    assert all(word in chunks[0] for word in FIRST_PART_ONLY)
    assert not any(word in chunk for chunk in chunks[1:] for word in FIRST_PART_ONLY)
    assert not any(word in chunks[0] for word in SECOND_PART)

    mixed = world.session(world.repo, [("user", text)], title="Garden and database")
    world.session(world.repo, [("user", "The coffee machine on floor two is broken again")])
    current = world.session(world.repo, [("user", "hi")])

    result = world.search(current, "database standby lagging behind the main server", mode="semantic")
    assert result["semantic_status"] == "ready", result
    assert session_ids(result)[0] == mixed, result
    snippet = result["results"][0]["snippet"]
    assert result["results"][0]["score_source"] == "semantic"
    assert any(word in snippet for word in SECOND_PART), snippet
    assert not any(word in snippet for word in FIRST_PART_ONLY), snippet
