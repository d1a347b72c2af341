"""The semantic path (spec §4.4): chunk, embed incrementally, score with one matrix product.

Index: live user and assistant messages of the project's sessions are cut into chunks of
``chunk_size`` estimated tokens with ``chunk_overlap`` between neighbours. A chunk is keyed by
(session, message, chunk index, model fingerprint) and carries the SHA-256 of its text, so a
second run embeds nothing and a moved session keeps its vectors (nothing in the key names a
project). Vectors of another model never mix in: every read filters on the fingerprint.

Query: the in-scope vectors are one L2-normalised float32 matrix cached in memory; a query costs
one matrix-vector product, ``argpartition`` for the top chunks, and a reduction to the best chunk
per message. Only messages that are live in state.db right now can be returned, so rewound or
archived history never comes back even while its vectors are still stored.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import store

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------- chunking

_CJK_CHAR = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ebef]"
)
# A unit is one CJK character, or a run of other non-space characters with its trailing space.
_UNIT = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ebef]\\s*"
    "|[^\\s\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ebef]+\\s*"
)


def _unit_tokens(unit: str) -> int:
    """Tokens of one unit: a CJK character is about one token, other text about four characters."""
    core = unit.rstrip()
    if _CJK_CHAR.match(core):
        return 1
    return max(1, math.ceil(len(core) / 4))


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate that holds for English and CJK alike (README, "Chunking")."""
    return sum(_unit_tokens(u) for u in _UNIT.findall(text))


def chunk_text(text: str, chunk_size: int, overlap: int) -> list[str]:
    """Windows of at most ``chunk_size`` estimated tokens, neighbours sharing ``overlap``."""
    text = text.strip()
    if not text:
        return []
    units = _UNIT.findall(text)
    costs = [_unit_tokens(u) for u in units]
    if sum(costs) <= chunk_size:
        return [text]
    chunks: list[str] = []
    start = 0
    while start < len(units):
        end, used = start, 0
        while end < len(units) and (used + costs[end] <= chunk_size or end == start):
            used += costs[end]
            end += 1
        chunks.append("".join(units[start:end]).strip())
        if end >= len(units):
            break
        back, shared = end, 0
        while back > start + 1 and shared + costs[back - 1] <= overlap:
            back -= 1
            shared += costs[back]
        start = back
    return chunks


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- indexing


@dataclass
class Pending:
    """What an index run must do for a scope: chunks to embed and chunk keys that are stale."""

    todo: list[tuple[store.ChunkKey, str, str]]  # (key, text, hash)
    stale: list[store.ChunkKey]
    live_messages: int
    checked_up_to: dict[str, int]  # per session: the newest message this pass looked at

    @property
    def complete(self) -> bool:
        return not self.todo and not self.stale


# Hermes appends messages and never edits one in place (a rewind only flips ``active``), so once a
# complete pass has checked a session up to message N, the next pass need only read what came
# after N. Watermarks belong to one embeddings.db (its random instance id: a purge starts over)
# and one model fingerprint; they are advanced only by a pass that finished.
_watermarks: dict[tuple[str, str], dict[str, int]] = {}
_watermarks_lock = threading.Lock()


def index_recipe(fingerprint: str, embedding: Any) -> str:
    """Everything that shapes the stored vectors: the model, and how text is cut and framed."""
    return (
        f"{fingerprint}|chunk={embedding.chunk_size}/{embedding.chunk_overlap}"
        f"|context={embedding.context_messages}"
    )


def _watermark_slot(econn: sqlite3.Connection, recipe: str) -> tuple[str, str]:
    return (store.embeddings_instance(econn), recipe)


def context_tail(previous: Sequence[str], budget_tokens: int) -> str:
    """The end of the preceding messages, at most ``budget_tokens`` estimated tokens."""
    units = _UNIT.findall(" ".join(" ".join(text.split()) for text in previous))
    kept: list[str] = []
    used = 0
    for unit in reversed(units):
        used += _unit_tokens(unit)
        if used > budget_tokens:
            break
        kept.append(unit)
    return "".join(reversed(kept)).strip()


def embedded_text(chunk: str, previous: Sequence[str], embedding: Any) -> str:
    """What the model sees for a chunk: the conversation just before it, then the chunk.

    A turn is often a short reply ("Yes, let's do that") whose topic lives in the turn before
    it; measured on LoCoMo, one preceding message lifts semantic recall markedly (README).
    """
    context = context_tail(previous, embedding.chunk_size // 4) if previous else ""
    return f"{context}\n{chunk}" if context else chunk


def pending_chunks(
    conn: sqlite3.Connection,
    schema: store.StateSchema,
    econn: sqlite3.Connection,
    session_ids: Sequence[str],
    fingerprint: str,
    embedding: Any,
) -> Pending:
    """Chunks to embed for these sessions: new or changed text since the last complete pass."""
    recipe = index_recipe(fingerprint, embedding)
    with _watermarks_lock:
        checked = dict(_watermarks.get(_watermark_slot(econn, recipe), {}))
    after = {sid: checked.get(sid, 0) for sid in session_ids}
    messages = store.live_messages(conn, schema, after)
    stored = store.chunk_hashes(econn, fingerprint, after) if messages else {}
    recent: dict[str, deque[str]] = {}
    if embedding.context_messages and messages:
        resumed = {m["session_id"]: after[m["session_id"]] for m in messages if after[m["session_id"]]}
        earlier = store.preceding_messages(conn, schema, resumed, embedding.context_messages)
        recent = {sid: deque(texts, maxlen=embedding.context_messages) for sid, texts in earlier.items()}
    todo: list[tuple[store.ChunkKey, str, str]] = []
    wanted: set[store.ChunkKey] = set()
    newest = dict(after)
    for message in messages:
        session_id, text = message["session_id"], store.message_text(message["content"])
        newest[session_id] = max(newest[session_id], message["message_id"])
        previous = recent.setdefault(session_id, deque(maxlen=max(1, embedding.context_messages)))
        chunks = chunk_text(text, embedding.chunk_size, embedding.chunk_overlap)
        for index, chunk in enumerate(chunks):
            key = (session_id, message["message_id"], index)
            framed = embedded_text(chunk, list(previous) if embedding.context_messages else [], embedding)
            digest = content_hash(framed)
            wanted.add(key)
            if stored.get(key) != digest:
                todo.append((key, framed, digest))
        if text.strip():
            previous.append(text)
    # Chunks past a message's new end (its text got shorter) are stale; vectors of messages that
    # are no longer live stay stored (a rewind can be undone) but are never returned.
    live_ids = {m["message_id"] for m in messages}
    stale = [key for key in stored if key[1] in live_ids and key not in wanted]
    return Pending(todo=todo, stale=stale, live_messages=len(messages), checked_up_to=newest)


def _remember_checked(econn: sqlite3.Connection, recipe: str, checked_up_to: dict[str, int]) -> None:
    with _watermarks_lock:
        _watermarks.setdefault(_watermark_slot(econn, recipe), {}).update(checked_up_to)


def embed_pending(
    econn: sqlite3.Connection, embedder: Any, pending: Pending, batch_size: int, deadline: float | None
) -> int:
    """Embed and store batches until done or past ``deadline``; returns how many chunks were written."""
    import numpy as np

    written = 0
    if pending.stale:
        store.write_chunks(econn, embedder.fingerprint, [], pending.stale)
        pending.stale = []
    while pending.todo:
        if deadline is not None and time.monotonic() >= deadline:
            break
        batch, pending.todo = pending.todo[:batch_size], pending.todo[batch_size:]
        vectors = embedder.embed_documents([text for _, text, _ in batch])
        rows = [
            (key[0], key[1], key[2], digest, np.asarray(vector, dtype="<f4").tobytes())
            for (key, _, digest), vector in zip(batch, vectors, strict=True)
        ]
        store.write_chunks(econn, embedder.fingerprint, rows)
        written += len(rows)
    return written


def build_index(
    session_ids: Sequence[str], settings: Any, embedder: Any, deadline: float | None = None, progress=None
) -> tuple[int, bool]:
    """Index these sessions (one process at a time). Returns (chunks written, complete)."""
    embedding = settings.embedding
    with store.indexer_lock() as taken:
        if not taken:
            return 0, False
        with store.reading(store.state_db_path()) as conn:
            schema = store.detect_schema(conn)
            econn = store.connect_embeddings()
            try:
                pending = pending_chunks(conn, schema, econn, session_ids, embedder.fingerprint, embedding)
                if progress is not None:
                    progress(0, len(pending.todo))
                written = 0
                while not pending.complete:
                    step = embed_pending(econn, embedder, pending, embedding.batch_size, deadline)
                    written += step
                    if progress is not None:
                        progress(written, written + len(pending.todo))
                    if deadline is not None and time.monotonic() >= deadline:
                        break
                if pending.complete:
                    _remember_checked(
                        econn, index_recipe(embedder.fingerprint, embedding), pending.checked_up_to
                    )
                return written, pending.complete
            finally:
                econn.close()


_background: dict[tuple[str, str], threading.Thread] = {}
_background_lock = threading.Lock()


def _background_key(fingerprint: str, session_ids: Sequence[str]) -> tuple[str, str]:
    return (str(store.embeddings_db_path()), fingerprint + ":" + content_hash("\n".join(sorted(session_ids))))


def background_running(fingerprint: str, session_ids: Sequence[str]) -> bool:
    with _background_lock:
        thread = _background.get(_background_key(fingerprint, session_ids))
        return bool(thread and thread.is_alive())


def _pinned_to_home(home: Any, work: Any) -> Any:
    """Run ``work`` with Hermes's home pinned, so a thread keeps the home it was started for."""

    def run() -> None:
        try:
            from hermes_constants import reset_hermes_home_override, set_hermes_home_override
        except ImportError:  # an older Hermes: the process-wide HERMES_HOME applies
            work()
            return
        token = set_hermes_home_override(home)
        try:
            work()
        finally:
            reset_hermes_home_override(token)

    return run


def start_background(session_ids: Sequence[str], settings: Any, embedder: Any) -> None:
    """Finish the index off the agent's path; a failure leaves ``partial`` for the next search."""
    key = _background_key(embedder.fingerprint, session_ids)
    ids = list(session_ids)

    def work() -> None:
        try:
            build_index(ids, settings, embedder)
        except Exception as error:  # provider trouble: the next search reports partial/unavailable
            logger.warning("background indexing stopped: %s", type(error).__name__)

    with _background_lock:
        running = _background.get(key)
        if running and running.is_alive():
            return
        thread = threading.Thread(
            target=_pinned_to_home(store.hermes_home(), work), name="project-history-index", daemon=True
        )
        _background[key] = thread
        thread.start()


def wait_for_background(timeout: float = 60.0) -> None:
    """Join running index threads (the CLI's ``index`` and tests use it; searches never wait)."""
    with _background_lock:
        threads = list(_background.values())
    for thread in threads:
        thread.join(timeout)


# --------------------------------------------------------------------------- retrieval


@dataclass
class VectorMatrix:
    """The in-scope chunk vectors of one model, rows aligned with their message ids."""

    vectors: Any  # numpy float32 (n, d), rows L2-normalised
    message_ids: Any  # numpy int64 (n,)
    chunk_indexes: Any  # numpy int32 (n,)
    session_ids: list[str]

    def __len__(self) -> int:
        return len(self.session_ids)


_matrix_cache: dict[tuple[str, str], tuple[tuple, VectorMatrix]] = {}
_matrix_lock = threading.Lock()


def scope_matrix(
    conn: sqlite3.Connection,
    schema: store.StateSchema,
    econn: sqlite3.Connection,
    fingerprint: str,
    session_ids: Sequence[str],
) -> VectorMatrix:
    """Cached until the index, the scope or the set of live messages changes."""
    import numpy as np

    cache_slot = (str(store.embeddings_db_path()), fingerprint)
    freshness = (
        store.embeddings_generation(econn),
        content_hash("\n".join(sorted(session_ids))),
        store.live_signature(conn, schema, session_ids),
    )
    with _matrix_lock:
        cached = _matrix_cache.get(cache_slot)
    if cached and cached[0] == freshness:
        return cached[1]

    live_ids = store.live_message_ids(conn, schema, session_ids)
    rows = [row for row in store.chunk_vectors(econn, fingerprint, session_ids) if row[1] in live_ids]
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
    with _matrix_lock:
        _matrix_cache[cache_slot] = (freshness, matrix)
    return matrix


def top_messages(matrix: VectorMatrix, query_vector: Any, top_k: int) -> list[tuple[int, str, int, float]]:
    """(message_id, session_id, chunk_index, cosine) of the best chunk per message, best first."""
    import numpy as np

    if not len(matrix) or matrix.vectors.shape[1] != len(query_vector):
        return []
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


# A provider that just failed is not asked again for a while: a dead endpoint must not add its
# timeout to every search of the agent.
PROVIDER_COOLDOWN_SECONDS = 60.0
_cooldown_until: dict[str, float] = {}


def reset_provider_cooldown() -> None:
    _cooldown_until.clear()


_last_error: dict[str, str] = {"": ""}


def unavailable_reason(settings: Any) -> str:
    """Why semantic search said ``unavailable``: what is missing, else the provider's last error."""
    from .runtime import provider_problem, setup_hint

    problem = provider_problem(settings.embedding, store.read_api_key(), settings.problems)
    if problem:
        return f"{problem}; run {setup_hint(settings.embedding.provider)}"
    return _last_error.get("", "") or "the embedding provider failed; see `hermes project-history status`"


def _status_without_work(
    conn: sqlite3.Connection, schema: store.StateSchema, fingerprint: str, session_ids: Sequence[str]
) -> str:
    econn = store.connect_embeddings()
    try:
        indexed = store.indexed_message_ids(econn, fingerprint, session_ids)
    finally:
        econn.close()
    if store.live_message_ids(conn, schema, session_ids) <= indexed:
        return "ready"
    if background_running(fingerprint, session_ids) or store.indexer_busy():
        return "indexing"
    return "partial"


# A scope this large is checked in the background the first time a process sees it (about 7 s
# per 100k messages, measured); later checks only read what is newer than the watermarks.
INLINE_FIRST_CHECK_MESSAGES = 20_000


def _first_check_is_long(
    conn: sqlite3.Connection,
    schema: store.StateSchema,
    fingerprint: str,
    session_ids: Sequence[str],
    embedding: Any,
) -> bool:
    econn = store.connect_embeddings()
    try:
        slot = _watermark_slot(econn, index_recipe(fingerprint, embedding))
    finally:
        econn.close()
    with _watermarks_lock:
        checked = _watermarks.get(slot, {})
    if all(sid in checked for sid in session_ids):
        return False
    return store.live_signature(conn, schema, session_ids)[0] > INLINE_FIRST_CHECK_MESSAGES


def search(
    conn: sqlite3.Connection,
    schema: store.StateSchema,
    scope: Any,
    query: str,
    settings: Any,
    run: bool,
    build: bool = True,
) -> tuple[list[dict[str, Any]], str]:
    """Semantic rows for ``query`` in ``scope`` and the index state (consent already checked).

    With ``run`` the index is brought up to date within ``index_budget_seconds`` first and a
    background thread takes the rest; without it (keyword mode) only the state is reported.
    """
    from .embedders import EmbeddingUnavailable, make_embedder

    embedding = settings.embedding
    try:
        embedder = make_embedder(embedding, store.read_api_key())
    except EmbeddingUnavailable as error:
        logger.warning("semantic search unavailable: %s", error)
        _last_error[""] = str(error)
        return [], "unavailable"
    fingerprint = embedder.fingerprint
    session_ids = scope.session_ids
    if not run:
        return [], _status_without_work(conn, schema, fingerprint, session_ids)
    if not build:
        status = _status_without_work(conn, schema, fingerprint, session_ids)
        if status != "ready":
            return [], status
    if _cooldown_until.get(fingerprint, 0.0) > time.monotonic():
        return [], "unavailable"

    try:
        if not build:
            pass  # complete (checked above): nothing to index
        elif background_running(fingerprint, session_ids) or store.indexer_busy():
            status = "indexing"
        elif _first_check_is_long(conn, schema, fingerprint, session_ids, embedding):
            # Reading and hashing a very large project takes seconds: not on the agent's path.
            start_background(session_ids, settings, embedder)
            status = "indexing"
        else:
            deadline = time.monotonic() + embedding.index_budget_seconds
            _, complete = build_index(session_ids, settings, embedder, deadline)
            if complete:
                status = "ready"
            else:
                start_background(session_ids, settings, embedder)
                status = "indexing"
        query_vector = embedder.embed_query(query)
    except EmbeddingUnavailable as error:
        _cooldown_until[fingerprint] = time.monotonic() + PROVIDER_COOLDOWN_SECONDS
        _last_error[""] = str(error)
        logger.warning("semantic search unavailable: %s", error)
        return [], "unavailable"

    econn = store.connect_embeddings()
    try:
        matrix = scope_matrix(conn, schema, econn, fingerprint, session_ids)
    finally:
        econn.close()
    hits = top_messages(matrix, query_vector, embedding.top_k)
    messages = store.messages_by_id(conn, [hit[0] for hit in hits])
    rows = []
    for message_id, session_id, chunk_index, score in hits:
        message = messages.get(message_id)
        if message is None:
            continue
        chunks = chunk_text(
            store.message_text(message["content"]), embedding.chunk_size, embedding.chunk_overlap
        )
        chunk = chunks[chunk_index] if chunk_index < len(chunks) else None
        if chunk and embedding.context_messages:
            # The snippet shows what the model matched: a short reply reads with its question.
            earlier = store.preceding_messages(
                conn, schema, {session_id: message_id - 1}, embedding.context_messages
            )
            chunk = embedded_text(chunk, earlier.get(session_id, []), embedding)
        rows.append({**message, "score": score, "chunk_text": chunk})
    return rows, status
