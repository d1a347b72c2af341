"""semantic/: embeddings.db (index_store), building it (indexer), the matrix file and the vector
query (matrix), reached through a deterministic embedder (fakes.HashEmbedder) over a state.db
written by Hermes's own SessionDB: no model, no network, no Hermes booted.

Everything here runs below ``Semantic.search``: the functions it calls, in the order it calls
them (the indexer lock, ``IndexStore.open_writable``, ``build_index``, ``MatrixCache.matrix``,
``nearest``, ``_rows``)."""

from __future__ import annotations

import sqlite3
import stat
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

PLUGIN_KEY = "project-history-recall"
SETTINGS = {"enabled": True, "provider": "local", "model": "fake-bag-of-words"}

PG_QUESTION = "How do we rotate the postgres replica credentials?"
PG_ANSWER = "Rotate the replica password with vault, then restart pgbouncer on every node."
#: Two projects' conversations: (label, role, text) per message, one list per session.
CONVERSATIONS = {
    "alpha": [
        [("pg_q", "user", PG_QUESTION), ("pg_a", "assistant", PG_ANSWER)],
        [
            ("garden_q", "user", "The greenhouse tomato seedlings need compost and gentle watering."),
            ("garden_a", "assistant", "Stake the seedlings once they reach a hand high."),
        ],
        [
            ("deploy_q", "user", "Deploy the staging bundle to the mirror and check its signature."),
            ("deploy_a", "assistant", "The deploy script copies the bundle and verifies the signature."),
        ],
    ],
    "beta": [
        [
            ("ingress_q", "user", "Kubernetes ingress returns 502 errors after the nginx upgrade."),
            ("ingress_a", "assistant", "Roll back the ingress controller image to the previous tag."),
        ],
        [
            ("budget_q", "user", "Draft the quarterly marketing budget spreadsheet."),
            ("budget_a", "assistant", "Split the budget by channel and by quarter."),
        ],
    ],
}
PG_QUERY = "pgbouncer vault password"


@dataclass
class Rig:
    """One Hermes home, one plugin configuration, one fake model, and the plugin's modules."""

    phr: Any
    history: Any
    embedder: Any

    def __post_init__(self) -> None:
        self.store = self.phr.store
        self.index_store = self.phr.module("semantic.index_store")
        self.indexer = self.phr.module("semantic.indexer")
        self.matrix = self.phr.module("semantic.matrix")
        self.chunking = self.phr.module("semantic.chunking")
        self.semantic = self.phr.module("semantic")
        self.ranking = self.phr.module("ranking")
        self.policy = self.ranking.DEFAULT_POLICY
        self.matrices = self.matrix.MatrixCache()  # a process's memory of mapped matrices
        self.configure()

    def configure(self, **embedding: Any) -> None:
        """config.yaml's ``plugins.project-history-recall.embedding`` (the local provider: what an
        in-process model gets; nothing here would leave the machine anyway)."""
        section = {"embedding": {**SETTINGS, **embedding}}
        self.env = self.store.HermesEnv(
            home=self.history.home, profile="default", config={"plugins": {PLUGIN_KEY: section}}
        )
        assert self.env.settings.problems == (), self.env.settings.problems

    @property
    def framing(self) -> Any:
        return self.chunking.Framing.of(self.env.settings.embedding, self.embedder)

    @property
    def recipe(self) -> str:
        return self.chunking.vectors_key(self.embedder.fingerprint, self.framing)

    def sessions(self, project: str) -> list[str]:
        return list(self.history.sessions[project])

    def identity(self, project: str) -> dict[str, str]:
        return {"kind": "auto", "key": self.history.folder(project)}

    def file_key(self, project: str) -> str:
        return self.matrix.identity_file_key(self.identity(project))

    def index(self, project: str, embedder: Any = None) -> tuple[int, bool]:
        """An index pass over a project, as ``index_scope`` runs it (the consent gate aside)."""
        embedder = embedder or self.embedder
        with (
            self.index_store.indexer_lock(self.env.data_dir) as taken,
            self.store.HermesDB.open(self.env) as db,
            self.index_store.IndexStore.open_writable(self.env.index_path) as index,
        ):
            assert taken
            return self.indexer.build_index(
                db, index, self.sessions(project), self.env.settings.embedding, embedder
            )

    @contextmanager
    def reading(self):
        """state.db and embeddings.db opened as a search opens them: both read-only."""
        with (
            self.store.HermesDB.open(self.env) as db,
            self.index_store.IndexStore.open_readonly(self.env.index_path) as index,
        ):
            yield db, index

    def chunks(self, message_id: int | None = None) -> list[tuple]:
        """(id, session_id, message_id, chunk_index, content_hash) of stored chunks, in order."""
        sql = "SELECT id, session_id, message_id, chunk_index, content_hash FROM chunks"
        args: tuple = ()
        if message_id is not None:
            sql, args = sql + " WHERE message_id = ?", (message_id,)
        with self.reading() as (_, index):
            return index.conn.execute(sql + " ORDER BY message_id, chunk_index", args).fetchall()

    def view(self, project: str) -> Any:
        """The project's ScopeMatrix, as a search gets it (file refreshed when out of date)."""
        with self.reading() as (db, index):
            return self.matrices.matrix(
                db, index, self.embedder.fingerprint, self.sessions(project), self.file_key(project)
            )

    def query(self, project: str, text: str, top_k: int = 10) -> tuple[list, float, bool, list[dict]]:
        """``nearest`` over the project's matrix, whether its background counts, and the rows a
        search makes of the hits, with their lift."""
        vector = self.embedder.embed_query(text)
        with self.reading() as (db, index):
            view = self.matrices.matrix(
                db, index, self.embedder.fingerprint, self.sessions(project), self.file_key(project)
            )
            hits, mean, background = self.matrix.nearest(view, vector, top_k)
            rows = [self.with_lift(row) for row in self.semantic._rows(db, hits, mean, background)]
        return hits, mean, background >= self.policy.min_background_chunks, rows

    def with_lift(self, row: dict) -> dict:
        """A semantic row with the lift the ranking measures from its background (``ranking.rank``)."""
        ranking = self.ranking
        message = ranking.Message(row["message_id"], row["session_id"], row["session_id"])
        hit = ranking.SemanticHit(message, row["score"], row["matched_chunk"], row["mean"], row["background"])
        scored = self.phr.module("ranking.rank").with_lift(hit, self.policy)
        return {**row, "lift": scored.lift, "approximate_lift": scored.approximate_lift}

    def header(self, project: str) -> Any:
        """The project's matrix file as :func:`matrix.read` loads it."""
        with self.reading() as (_, index):
            name = self.matrix.file_name(index.instance, self.embedder.fingerprint, self.file_key(project))
            return self.matrix.read(
                self.matrix.matrix_dir(index.path), name, index.instance, self.embedder.fingerprint
            )


@pytest.fixture(scope="module")
def seeded(tmp_path_factory, blank_state_db):
    """CONVERSATIONS written once through SessionDB (create_session with the project's folder as
    cwd, append_message): alpha has three sessions, beta two."""
    from unit.fakes import History

    made = History.create(
        tmp_path_factory.mktemp("seeded") / "hermes-home", tmp_path_factory.mktemp("code"), blank_state_db
    )
    for project, sessions in CONVERSATIONS.items():
        for messages in sessions:
            made.session(project, messages)
    made.close()
    return made


@pytest.fixture
def rig(phr, seeded, hermes_home, fake_embedder):
    """The seeded history in this test's own Hermes home, and a fresh fake model."""
    history = seeded.clone(hermes_home)
    yield Rig(phr=phr, history=history, embedder=fake_embedder())
    history.close()


def cosine(a: Any, b: Any) -> float:
    return float(np.dot(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)))


# --------------------------------------------------------------------------- the fake itself


def test_the_fake_is_an_embedder_whose_vectors_follow_shared_words(phr, fake_embedder):
    base = phr.module("semantic.providers.base")
    fake = fake_embedder()
    assert isinstance(fake, base.Embedder)
    texts = ["restart pgbouncer on every node", "Restart PgBouncer!", "tomato seedlings"]
    vectors = fake.embed_documents(texts)
    assert vectors.shape == (3, fake.dimensions) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    # Case and punctuation aside, two of the five words shared: cos = 2 / sqrt(5 * 2).
    assert cosine(vectors[0], vectors[1]) == pytest.approx(2 / np.sqrt(10), abs=1e-6)
    assert cosine(vectors[0], vectors[2]) == 0.0
    # The same in every process: a digest picks the column, not Python's salted hash().
    assert np.flatnonzero(fake_embedder().embed_query("pgbouncer")).tolist() == [1937]
    assert fake.texts_embedded == 3 and fake.batches == [3] and fake.queries == []
    assert fake.fingerprint == fake_embedder().fingerprint != fake_embedder(dimensions=64).fingerprint
    with pytest.raises(TypeError):
        fake.embed_documents("one string")


# --------------------------------------------------------------------------- embeddings.db


def test_a_first_pass_creates_the_index_with_every_migration_and_stores_hashes_not_text(rig):
    index_store, chunking = rig.index_store, rig.chunking
    assert not rig.env.data_dir.exists()

    assert rig.index("alpha") == (6, True)

    path = rig.env.index_path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")) == []
    assert [number for number, _ in index_store.MIGRATIONS] == list(range(1, index_store.SCHEMA_VERSION + 1))
    with rig.reading() as (db, index):
        conn = index.conn
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert tables == {"chunks", "meta", "watermarks", "models", "skipped"}
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        assert meta["schema_version"] == str(index_store.SCHEMA_VERSION)
        assert len(meta["instance"]) == 32 and index.instance == meta["instance"]
        assert index.generation == 1  # one batch of six chunks (batch_size 32)
        assert conn.execute("SELECT fingerprint, width FROM models").fetchall() == [
            (rig.embedder.fingerprint, rig.embedder.dimensions)
        ]
        columns = [r[1] for r in conn.execute("PRAGMA table_info(chunks)")]
        assert "text" not in columns and "content" not in columns
        # Every complete session has its watermark: the mark of its active messages.
        alpha = rig.sessions("alpha")
        assert index.watermarks(rig.recipe, alpha) == db.session_marks(alpha)
        assert index.watermarks(rig.recipe, rig.sessions("beta")) == {}

    ids = rig.history.ids
    # The answer is embedded framed by its question (context_messages 1); the hash is of that text.
    framed_answer = f"{PG_QUESTION}\n{PG_ANSWER}"
    assert sorted(rig.embedder.documents) == sorted(
        [PG_QUESTION, framed_answer, *_framed_pairs(CONVERSATIONS["alpha"][1:])]
    )
    stored = {(r[1], r[2], r[3]): r[4] for r in rig.chunks()}
    assert set(stored) == {
        (f"alpha-{n:02d}", ids[label], 0)
        for n, session in enumerate(CONVERSATIONS["alpha"], start=1)
        for label, _, _ in session
    }
    assert stored[("alpha-01", ids["pg_a"], 0)] == chunking.content_hash(framed_answer)
    assert stored[("alpha-01", ids["pg_q"], 0)] == chunking.content_hash(PG_QUESTION)

    with rig.reading() as (_, index):
        (blob,) = index.conn.execute(
            "SELECT vector FROM chunks WHERE message_id = ?", (ids["pg_a"],)
        ).fetchone()
    assert len(blob) == rig.embedder.dimensions * index_store.VECTOR_BYTES
    assert np.allclose(
        np.frombuffer(blob, dtype=index_store.VECTOR_DTYPE), rig.embedder.vector(framed_answer), atol=1e-3
    )
    # No message's words in the database or its WAL: vectors and hashes only.
    for file in path.parent.glob("embeddings.db*"):
        data = file.read_bytes()
        assert b"pgbouncer" not in data and b"greenhouse" not in data, file.name


def _framed_pairs(sessions: list[list[tuple[str, str, str]]]) -> list[str]:
    """A two-message session's texts as embedded: the question, then the answer after it."""
    texts = []
    for (_, _, question), (_, _, answer) in sessions:
        texts += [question, f"{question}\n{answer}"]
    return texts


def test_a_second_pass_embeds_nothing_and_a_new_message_is_embedded_alone(rig):
    assert rig.index("alpha") == (6, True)
    with rig.reading() as (_, index):
        generation = index.generation
    assert rig.index("alpha") == (0, True)
    assert rig.embedder.texts_embedded == 6
    with rig.reading() as (db, index):
        assert index.generation == generation  # nothing written
        assert rig.indexer.plan_check(
            db, index, rig.sessions("alpha"), rig.embedder.fingerprint, rig.framing
        ).nothing_new

    (new_id,) = rig.history.add("alpha-02", [("", "user", "Which compost brand for the seedlings?")])
    with rig.reading() as (db, index):
        plan = rig.indexer.plan_check(db, index, rig.sessions("alpha"), rig.embedder.fingerprint, rig.framing)
    assert plan.after == {"alpha-02": rig.history.ids["garden_a"]} and plan.to_read == 1
    assert rig.index("alpha") == (1, True)
    assert rig.embedder.documents[6:] == [
        "Stake the seedlings once they reach a hand high.\nWhich compost brand for the seedlings?"
    ]
    assert [r[2:4] for r in rig.chunks(new_id)] == [(new_id, 0)]


def test_another_width_under_the_same_model_is_refused_and_nothing_of_it_is_stored(rig, fake_embedder):
    assert rig.index("alpha") == (6, True)
    rig.history.add("alpha-01", [("", "user", "And the pgbouncer config?")])
    wider = fake_embedder(dimensions=2 * rig.embedder.dimensions, fingerprint=rig.embedder.fingerprint)
    with pytest.raises(rig.index_store.WidthMismatch, match="dimensional"):
        rig.index("alpha", embedder=wider)
    assert len(rig.chunks()) == 6
    with rig.reading() as (_, index):
        assert index.model_width(rig.embedder.fingerprint) == rig.embedder.dimensions


def test_a_missing_index_opens_read_only_as_empty_and_is_never_created(rig):
    index_store = rig.index_store
    path = rig.env.index_path
    with index_store.IndexStore.open_readonly(path) as index:
        assert index.conn is None and not index.writable and not index.outdated
        alpha = rig.sessions("alpha")
        fingerprint = rig.embedder.fingerprint
        assert (index.instance, index.generation) == ("", 0)
        assert index.chunk_hashes(fingerprint, dict.fromkeys(alpha, 0)) == {}
        assert index.chunk_ids(fingerprint, alpha) == []
        assert list(index.chunk_rows(fingerprint, [1, 2])) == []
        assert index.indexed_message_ids(fingerprint, alpha) == set()
        assert index.model_width(fingerprint) is None
        assert index.watermarks(rig.recipe, alpha) == {}
        with pytest.raises(RuntimeError, match="read-only"):
            index.write_chunks(fingerprint, [("alpha-01", 1, 0, "0" * 64)], np.ones((1, 4)))
        with pytest.raises(RuntimeError, match="read-only"):
            index.set_watermarks(rig.recipe, {"alpha-01": (2, 2, 3)})
        with rig.store.HermesDB.open(rig.env) as db:
            # Everything is still to be embedded.
            pending = rig.indexer.pending_chunks(db, index, alpha, fingerprint, rig.framing)
            assert len(pending.todo) == 6 and pending.stale == [] and pending.live_messages == 6
    # Semantic.coverage (``status``) reads through the same read-only door.
    memory = rig.semantic.SemanticMemory()
    try:
        door = rig.semantic.Semantic(rig.env, memory)
        groups = [{"session_ids": rig.sessions("alpha")}]
        with rig.store.HermesDB.open(rig.env) as db:
            (before,) = door.coverage(db, rig.embedder, groups)
        assert (before.messages, before.indexed, before.skipped, before.busy) == (6, 0, 0, False)
        assert not path.exists() and not path.parent.exists()
        assert rig.index("alpha") == (6, True)
        with rig.store.HermesDB.open(rig.env) as db:
            (after,) = door.coverage(db, rig.embedder, groups)
        assert (after.messages, after.indexed, after.skipped) == (6, 6, 0)
    finally:
        memory.close()
    assert rig.embedder.queries == [] and rig.embedder.texts_embedded == 6  # status embeds nothing


def test_a_scope_with_nothing_stored_has_no_hits_and_no_background(rig):
    assert rig.index("beta") == (4, True)  # the other project's vectors only
    view = rig.view("alpha")
    assert len(view) == 0 and len(view.matrix) == 0
    assert rig.matrix.nearest(view, rig.embedder.embed_query(PG_QUERY), 5) == ([], 0.0, 0)


def test_an_index_of_schema_1_is_not_read_until_an_indexer_migrates_it_in_place(rig):
    """Version 1 stored float32 vectors and no widths: migration 3 converts them to float16."""
    index_store = rig.index_store
    path = rig.env.index_path
    path.parent.mkdir(parents=True)
    ids = rig.history.ids
    vector = rig.embedder.vector(PG_QUESTION)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1'), ('instance', ?)", (uuid.uuid4().hex,))
    for statement in index_store.MIGRATIONS[0][1]:
        conn.execute(statement)
    conn.execute(
        "INSERT INTO chunks (session_id, message_id, chunk_index, content_hash, model_fingerprint, "
        "vector, created_at) VALUES ('alpha-01', ?, 0, ?, ?, ?, 0)",
        (
            ids["pg_q"],
            rig.chunking.content_hash(PG_QUESTION),
            rig.embedder.fingerprint,
            vector.astype("<f4").tobytes(),
        ),
    )
    conn.commit()
    conn.close()

    with index_store.IndexStore.open_readonly(path) as index:
        assert index.outdated and index.conn is None  # a search reads nothing, migrates nothing
    assert dict(sqlite3.connect(path).execute("SELECT key, value FROM meta"))["schema_version"] == "1"

    assert rig.index("alpha") == (5, True)  # the stored chunk is reused: same text, same hash
    assert PG_QUESTION not in rig.embedder.documents
    with rig.reading() as (_, index):
        assert not index.outdated and index.model_width(rig.embedder.fingerprint) == vector.size
        (blob,) = index.conn.execute(
            "SELECT vector FROM chunks WHERE message_id = ?", (ids["pg_q"],)
        ).fetchone()
        meta = dict(index.conn.execute("SELECT key, value FROM meta"))
    assert meta["schema_version"] == str(index_store.SCHEMA_VERSION)
    assert np.array_equal(np.frombuffer(blob, dtype="<f2"), vector.astype("<f2"))


def test_an_index_this_code_cannot_read_is_refused_with_what_to_do(rig):
    index_store = rig.index_store
    path = rig.env.index_path
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    with pytest.raises(index_store.IndexUnavailable, match="is empty"):
        index_store.IndexStore.open_readonly(path)
    path.unlink()
    assert rig.index("alpha") == (6, True)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(index_store.SCHEMA_VERSION + 1),)
        )
    for opening in (index_store.IndexStore.open_readonly, index_store.IndexStore.open_writable):
        with pytest.raises(index_store.IndexUnavailable, match="newer version") as refused:
            opening(path)
        assert "revoke --purge" in str(refused.value)


# --------------------------------------------------------------------------- the matrix and the query


def test_the_matrix_file_holds_the_stored_vectors_and_the_query_ranks_shared_words_first(rig):
    assert rig.index("alpha") == (6, True)
    assert rig.index("beta") == (4, True)
    ids = rig.history.ids

    hits, mean, has_background, rows = rig.query("alpha", PG_QUERY)
    first_id, first_session, first_chunk, first_score = hits[0]
    assert (first_id, first_session, first_chunk) == (ids["pg_a"], "alpha-01", 0)
    expected = rig.embedder.vector(f"{PG_QUESTION}\n{PG_ANSWER}")
    assert first_score == pytest.approx(cosine(expected, rig.embedder.vector(PG_QUERY)), abs=1e-3)
    assert all(score < first_score for _, _, _, score in hits[1:])
    # Only alpha's six messages; beta's four live in the same embeddings.db.
    alpha_ids = {ids[label] for session in CONVERSATIONS["alpha"] for label, _, _ in session}
    assert {hit[0] for hit in hits} == alpha_ids and len(hits) == 6

    # The file matches embeddings.db row for row, and the mean is over those rows.
    matrix = rig.header("alpha")
    with rig.reading() as (_, index):
        chunk_ids = index.chunk_ids(rig.embedder.fingerprint, rig.sessions("alpha"))
        blobs = dict(index.conn.execute("SELECT id, vector FROM chunks"))
        assert rig.matrix.is_current(
            index, rig.embedder.fingerprint, rig.file_key("alpha"), rig.sessions("alpha")
        )
    assert matrix.rows["chunk_id"].tolist() == chunk_ids and matrix.width == rig.embedder.dimensions
    stored = np.stack([np.frombuffer(blobs[i], dtype="<f2").astype(np.float32) for i in chunk_ids])
    assert np.array_equal(np.asarray(matrix.vectors), stored)
    assert mean == pytest.approx(float(np.mean(stored @ rig.embedder.vector(PG_QUERY))), abs=1e-6)

    # Six chunks are no background (MIN_BACKGROUND_CHUNKS): the lift is only approximate.
    assert len(rig.view("alpha")) == 6 < rig.policy.min_background_chunks and has_background is False
    assert rows[0]["message_id"] == ids["pg_a"] and rows[0]["content"] == PG_ANSWER
    assert all(row["lift"] is None for row in rows)
    assert rows[0]["approximate_lift"] == pytest.approx((first_score - mean) / (1 - mean))
    assert rows[0]["matched_chunk"] == 0

    # Each project has its own file; beta's query finds beta's answer.
    beta_hits, _, _, _ = rig.query("beta", "ingress controller image")
    assert beta_hits[0][:2] == (ids["ingress_a"], "beta-01")
    assert len(list(rig.matrix.matrix_dir(rig.env.index_path).glob("*.json"))) == 2


def test_the_lift_is_measured_from_the_first_scope_large_enough_for_a_background(rig):
    """The threshold is crossed by the scope itself: one chunk short of MIN_BACKGROUND_CHUNKS,
    then one more message."""
    history, minimum = rig.history, rig.policy.min_background_chunks
    animals, colours = ["otter", "heron", "badger", "lynx"], ["amber", "teal", "crimson", "ivory"]
    filler = [
        ("", "user", f"Note {n} about the {animals[n % 4]} and the {colours[n // 4 % 4]} lantern.")
        for n in range(minimum - 2)
    ]
    for start in range(0, len(filler), 20):
        history.transcript("gamma", filler[start : start + 20])
    history.session("gamma", [("zeppelin", "user", "Where do we moor the zeppelin in the hangar?")])
    assert rig.index("gamma") == (minimum - 1, True)

    hits, mean, has_background, rows = rig.query("gamma", "zeppelin hangar mooring")
    assert len(rig.view("gamma")) == minimum - 1
    assert hits[0][0] == history.ids["zeppelin"] and has_background is False
    assert rows[0]["lift"] is None and rows[0]["approximate_lift"] is not None

    history.add("gamma-01", [("", "assistant", "Noted, the otter stays by the amber lantern.")])
    assert rig.index("gamma") == (1, True)
    hits, mean, has_background, rows = rig.query("gamma", "zeppelin hangar mooring")
    assert len(rig.view("gamma")) == minimum
    assert hits[0][0] == history.ids["zeppelin"] and has_background is True
    score = hits[0][3]
    assert 0 < mean < score
    assert rows[0]["lift"] == pytest.approx((score - mean) / (1 - mean))
    assert rows[0]["lift"] == rows[0]["approximate_lift"]


# --------------------------------------------------------------------------- changes in state.db


LONG = " ".join(f"Step {n}: the staging deploy copies bundle{n:02d} to the mirror." for n in range(6))
SHORTER = "Step 0: the staging deploy copies the bundle to the archive."
SCRIPTED = "All six steps are scripted."


def test_an_edited_message_is_embedded_again_and_loses_its_extra_chunks(rig):
    """Hermes never rewrites a message's content in place (SessionDB has no call for it), so a
    pass reads a message again when its session has no watermark (a new recipe, a rebuilt index):
    the text is edited in SQL and the watermarks dropped, as tests/test_index_chunks.py does."""
    rig.configure(chunk_size=16, chunk_overlap=4, message_tokens=0)
    rig.history.session("alpha", [("long", "user", LONG), ("scripted", "assistant", SCRIPTED)])
    long_id, scripted_id = rig.history.ids["long"], rig.history.ids["scripted"]
    expected_chunks = len(rig.chunking.message_chunks(LONG, rig.framing))
    assert expected_chunks >= 4
    written, complete = rig.index("alpha")
    assert complete and written == len(rig.chunks()) > expected_chunks
    before = rig.chunks(long_id)
    assert [r[3] for r in before] == list(range(expected_chunks))
    (old_scripted,) = rig.chunks(scripted_id)
    old_hits, _, _, _ = rig.query("alpha", "bundle04 bundle05")
    assert old_hits[0][0] == long_id and old_hits[0][2] >= expected_chunks - 2
    old_file = rig.header("alpha")

    with sqlite3.connect(rig.history.home / "state.db") as conn:
        conn.execute("UPDATE messages SET content = ? WHERE id = ?", (SHORTER, long_id))
    with sqlite3.connect(rig.env.index_path) as conn:
        conn.execute("DELETE FROM watermarks")
    embedded = len(rig.embedder.documents)

    assert rig.index("alpha") == (2, True)
    # The edited message, and the reply after it (framed by the edited text's new end).
    assert sorted(rig.embedder.documents[embedded:]) == [SHORTER, f"to the archive.\n{SCRIPTED}"]
    (edited,) = rig.chunks(long_id)
    assert edited[3] == 0 and edited[4] == rig.chunking.content_hash(SHORTER) != before[0][4]
    assert edited[0] not in {r[0] for r in before}  # a new row: the matrix sees one gone, one new
    (new_scripted,) = rig.chunks(scripted_id)
    assert new_scripted[4] != old_scripted[4]

    hits, _, _, _ = rig.query("alpha", "bundle04 bundle05")
    assert hits and all(score < 0.05 for *_, score in hits)  # no chunk holds those words any more
    assert rig.query("alpha", "staging deploy copies the bundle")[0][0][0] == long_id
    new_file = rig.header("alpha")
    assert new_file.token == old_file.token  # appended to, not rewritten
    assert set(new_file.dropped.tolist()) == {r[0] for r in before} | {old_scripted[0]}
    assert len(new_file) == len(old_file) + 2
    assert len(rig.view("alpha")) == len(new_file) - len(new_file.dropped) == len(rig.chunks())


def test_a_rewound_message_is_never_returned_and_comes_back_without_being_embedded(rig):
    assert rig.index("alpha") == (6, True)
    ids = rig.history.ids
    assert rig.query("alpha", PG_QUERY)[0][0][0] == ids["pg_a"]

    rig.history.db.rewind_to_message("alpha-01", ids["pg_q"])  # the question and its answer
    assert rig.index("alpha") == (0, True)
    hits, _, _, rows = rig.query("alpha", PG_QUERY)
    assert {ids["pg_q"], ids["pg_a"]}.isdisjoint(hit[0] for hit in hits)
    assert {ids["pg_q"], ids["pg_a"]}.isdisjoint(row["message_id"] for row in rows)
    view = rig.view("alpha")
    assert len(view) == 4 and len(view.matrix) == 6  # masked in the file, not removed from it
    # The background is the live rows' alone.
    query = "rotate the seedlings and the bundle"
    hits, mean, _, _ = rig.query("alpha", query)
    live = np.delete(np.asarray(view.matrix.vectors), view.excluded, axis=0)
    assert mean == pytest.approx(float(np.mean(live @ rig.embedder.vector(query))), abs=1e-6)
    assert mean > 0 and {ids["pg_q"], ids["pg_a"]}.isdisjoint(hit[0] for hit in hits)
    # Its vectors stay stored: a rewind can be undone.
    assert len(rig.chunks(ids["pg_a"])) == 1

    assert rig.history.db.restore_rewound("alpha-01", ids["pg_q"]) == 2
    assert rig.index("alpha") == (0, True)
    assert rig.embedder.texts_embedded == 6
    assert rig.query("alpha", PG_QUERY)[0][0][0] == ids["pg_a"]
    assert len(rig.view("alpha")) == 6


def test_a_rewritten_transcript_is_embedded_under_its_new_ids_and_the_deleted_text_never_returns(rig):
    """SessionDB.replace_messages (Hermes's /retry, /undo) deletes the session's rows and inserts
    the new transcript under new ids."""
    assert rig.index("alpha") == (6, True)
    ids = rig.history.ids
    retried = "Ask the database team to rotate it."
    rig.history.db.replace_messages(
        "alpha-01", [{"role": "user", "content": PG_QUESTION}, {"role": "assistant", "content": retried}]
    )
    with rig.store.HermesDB.open(rig.env) as db:
        new_q, new_a = sorted(m["message_id"] for m in db.live_messages(["alpha-01"]))
        assert ids["pg_a"] not in db.live_message_ids(rig.sessions("alpha"))

    assert rig.index("alpha") == (2, True)
    hashes = {r[2]: r[4] for r in rig.chunks()}
    content_hash = rig.chunking.content_hash
    assert hashes[new_q] == content_hash(PG_QUESTION) == hashes[ids["pg_q"]]
    assert hashes[new_a] == content_hash(f"{PG_QUESTION}\n{retried}")

    assert rig.query("alpha", "database team")[0][0][:2] == (new_a, "alpha-01")
    _, _, _, rows = rig.query("alpha", PG_QUERY)
    assert ids["pg_a"] not in {row["message_id"] for row in rows}
    assert all(row["content"] != PG_ANSWER for row in rows)
