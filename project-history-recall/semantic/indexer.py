"""Building the semantic index (spec §4.4): chunk, find what changed, embed, store; in the
foreground within a budget, or in a background thread.

Live user and assistant messages of a project's sessions are cut into chunks of ``chunk_size``
estimated tokens with ``chunk_overlap`` between neighbours. A chunk is keyed by (session,
message, chunk index, model fingerprint) and carries the SHA-256 of the text the model saw, so a
second run embeds nothing and a moved session keeps its vectors (nothing in the key names a
project). Vectors of another model never mix in: every read filters on the fingerprint.

Every batch re-checks the consent gate first (``should_continue``), so ``disable`` stops an
indexer that is already running before its next request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..store import EMPTY_TOTALS, ChunkKey, HermesDB, HermesEnv, SchemaCache, SessionMark, message_text
from .chunking import (
    Framing,
    content_hash,
    embeddable,
    embedded_text,
    estimate_tokens,
    message_chunks,
    vectors_key,
)
from .index_store import BACKGROUND_BUSY_SECONDS, LOCK_RETRY_SECONDS, IndexStore, indexer_lock
from .matrix import identity_file_key
from .pacing import EndpointFailing, Pacing, embedding_order
from .providers import EmbeddingRejected, EmbeddingTimeout, EmbeddingUnavailable

if TYPE_CHECKING:
    from . import SearchScope

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------- what is pending


@dataclass
class CheckPlan:
    """What an index check must read, decided from the watermarks and Hermes's index alone.

    Hermes appends messages and never edits one in place (a rewind, ``restore_rewound`` or a
    compaction only flips ``active``), so once a complete pass has checked a session up to message
    N, the next pass need only read what came after N, unless the session's active messages up to
    N changed (count or id sum), in which case it reads the session again from its start. The
    watermarks live in embeddings.db, per vectors key: every process starts where the last one ended.
    """

    after: dict[str, int]  # sessions to read, and the id after which to read them
    marks: dict[str, SessionMark]  # per session read: its mark now, saved after a complete pass
    active_totals: dict[str, tuple[int, int]]  # every session's (count, id sum) of active messages now
    to_read: int  # active messages (any role) the check will read

    @property
    def nothing_new(self) -> bool:
        return not self.after


EMPTY_MARK: SessionMark = (0, 0, 0)


def plan_check(
    db: HermesDB, store: IndexStore, session_ids: Sequence[str], fingerprint: str, framing: Any
) -> CheckPlan:
    checked = store.watermarks(vectors_key(fingerprint, framing), session_ids)
    totals = db.session_totals(session_ids)
    active_totals = {sid: totals.get(sid, EMPTY_TOTALS) for sid in session_ids}
    changed = [sid for sid in session_ids if sid not in checked or checked[sid][1:] != active_totals[sid]]
    marks = db.session_marks(changed) if changed else {}
    grown = {
        sid: checked[sid][0]
        for sid in changed
        if sid in checked and marks.get(sid, EMPTY_MARK)[0] > checked[sid][0]
    }
    newer = db.active_after(grown)
    after: dict[str, int] = {}
    moved: dict[str, SessionMark] = {}
    to_read = 0
    for sid in changed:
        now = marks.get(sid, EMPTY_MARK)
        old = checked.get(sid)
        new_count, new_sum = newer.get(sid, (0, 0))
        if old is not None and new_count and (now[1] - new_count, now[2] - new_sum) == (old[1], old[2]):
            after[sid], moved[sid] = old[0], now  # only messages newer than the mark
            to_read += new_count
        else:  # never checked, or rewound / restored / compacted / rewritten below the mark
            after[sid], moved[sid] = 0, now
            to_read += now[1]
    return CheckPlan(after=after, marks=moved, active_totals=active_totals, to_read=to_read)


@dataclass
class Pending:
    """What an index run must do for a scope: chunks to embed and chunk keys that are stale."""

    todo: list[tuple[ChunkKey, str, str]]  # (key, text, hash)
    stale: list[ChunkKey]
    live_messages: int
    plan: CheckPlan
    skipped: int = 0  # chunks the provider failed on alone, not sent again while unchanged

    @property
    def complete(self) -> bool:
        return not self.todo and not self.stale


def pending_chunks(
    db: HermesDB,
    store: IndexStore,
    session_ids: Sequence[str],
    fingerprint: str,
    framing: Any,
    plan: CheckPlan | None = None,
) -> Pending:
    """Chunks to embed for these sessions: new or changed text since the last complete pass."""
    framing = Framing.of(framing)
    plan = plan or plan_check(db, store, session_ids, fingerprint, framing)
    after = plan.after
    messages = db.live_messages(after) if after else []
    stored = store.chunk_hashes(fingerprint, after) if messages else {}
    skipped = store.skipped_hashes(fingerprint, after) if messages else {}
    skipped_now = 0
    context = framing.context_messages
    recent: dict[str, deque[str]] = {}
    if context and messages:
        resumed = {m["session_id"]: after[m["session_id"]] for m in messages if after[m["session_id"]]}
        earlier = db.preceding_messages(resumed, context)
        recent = {
            sid: deque((embeddable(t, framing) for t in texts), maxlen=context)
            for sid, texts in earlier.items()
        }
    todo: list[tuple[ChunkKey, str, str]] = []
    wanted: set[ChunkKey] = set()
    for message in messages:
        session_id, text = message["session_id"], message_text(message["content"])
        previous = recent.setdefault(session_id, deque(maxlen=max(1, context)))
        chunks = message_chunks(text, framing)
        for index, (chunk, tokens) in enumerate(chunks):
            key = (session_id, message["message_id"], index)
            framed = embedded_text(chunk, list(previous) if context else [], framing, tokens)
            digest = content_hash(framed)
            wanted.add(key)
            if stored.get(key) == digest:
                continue
            if skipped.get(key) == digest:
                skipped_now += 1
            else:
                todo.append((key, framed, digest))
        if text.strip():
            previous.append(embeddable(text, framing))
    # Chunks past a message's new end (its text got shorter) are stale; vectors of messages that
    # are no longer live stay stored (a rewind can be undone) but are never returned.
    live_ids = {m["message_id"] for m in messages}
    stale = [key for key in stored if key[1] in live_ids and key not in wanted]
    return Pending(todo=todo, stale=stale, live_messages=len(messages), plan=plan, skipped=skipped_now)


# --------------------------------------------------------------------------- scopes known complete


class CompleteScopes:
    """Scopes this process found completely indexed, and their active totals when found so.

    An index check reads every in-scope session's (count, id sum) from Hermes's index and the
    watermarks from ``embeddings.db``: tens of ms for a large project (``bench/scale.py``),
    paid on every search, keyword mode included (it reports ``semantic_status``). Nothing it read
    can have changed while ``PRAGMA data_version`` of ``state.db`` (:attr:`projects.Scope.data_token`,
    read before the check) and ``embeddings.db``'s instance and write generation are the same, so
    the answer is reused until one of them moves. Any commit to ``state.db`` (a message in the
    current session too) moves the token: then the check runs again, as before.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str, str], tuple[tuple, dict[str, tuple[int, int]]]] = {}

    @staticmethod
    def _key(
        store: IndexStore, vectors: str, scope: SearchScope
    ) -> tuple[tuple[str, str, str], tuple] | None:
        token = getattr(scope, "data_token", None)
        if token is None:
            return None
        slot = (str(store.path), vectors, identity_file_key(scope.identity))
        sessions = content_hash("\n".join(sorted(scope.session_ids)))
        return slot, (token, store.instance, store.generation, sessions)

    def get(self, store: IndexStore, vectors: str, scope: SearchScope) -> dict[str, tuple[int, int]] | None:
        key = self._key(store, vectors, scope)
        if key is None:
            return None
        with self._lock:
            entry = self._entries.get(key[0])
        return entry[1] if entry and entry[0] == key[1] else None

    def put(
        self, store: IndexStore, vectors: str, scope: SearchScope, totals: dict[str, tuple[int, int]]
    ) -> None:
        key = self._key(store, vectors, scope)
        if key is not None:
            with self._lock:
                self._entries[key[0]] = (key[1], totals)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


# --------------------------------------------------------------------------- building


def embed_pending(
    store: IndexStore,
    embedder: Any,
    pending: Pending,
    batch_size: int,
    deadline: float | None,
    should_continue: Callable[[], bool] | None = None,
    pacing: Pacing | None = None,
) -> int:
    """Embed and store batches until done, past ``deadline`` or no longer allowed; returns chunks written.

    Texts go out in :func:`pacing.embedding_order` (recent sessions first). An embedder that
    takes its batches as given (``paced``: the HTTP providers) is paced by ``pacing``: a batch
    that times out or is refused is halved, and a text that fails alone is skipped and recorded
    once a later answer shows the endpoint itself is working (:mod:`semantic.pacing`).
    """
    written = 0
    if pending.stale:
        store.write_chunks(embedder.fingerprint, [], stale=pending.stale)
        pending.stale = []
    recency = {sid: mark[0] for sid, mark in pending.plan.marks.items()}
    queue = deque(embedding_order(pending.todo, recency))
    paced = bool(getattr(embedder, "paced", False))
    pacing = pacing or Pacing(batch_size)
    held: list[tuple[tuple[ChunkKey, str, str], str]] = []  # (item, reason): failed alone, not yet recorded
    answered = False

    def record(rows: list, vectors: Any) -> None:
        nonlocal held
        skipped = [(item[0], item[2], reason) for item, reason in held]
        store.write_chunks(embedder.fingerprint, rows, vectors, skipped=skipped)
        pending.skipped += len(held)
        held = []

    try:
        while queue:
            if deadline is not None and time.monotonic() >= deadline:
                break
            if should_continue is not None and not should_continue():
                logger.info("indexing stopped: semantic search is no longer allowed for this project")
                break
            size = pacing.size if paced else batch_size
            batch = [queue.popleft() for _ in range(min(size, len(queue)))]
            texts = [text for _, text, _ in batch]
            started = time.monotonic()
            if not paced:
                vectors = embedder.embed_documents(texts, deadline=deadline)
            else:
                tokens = sum(estimate_tokens(text) for text in texts)
                alone = batch[0][0] if len(batch) == 1 else None
                try:
                    vectors = embedder.embed_documents(
                        texts, deadline=deadline, timeout=pacing.timeout(tokens, alone)
                    )
                except (EmbeddingTimeout, EmbeddingRejected) as error:
                    if alone is None:
                        pacing.failed()
                        queue.extendleft(reversed(batch))
                        continue
                    try:
                        skip = pacing.failed_alone(alone)
                    except EndpointFailing as failing:
                        queue.appendleft(batch[0])
                        raise EmbeddingUnavailable(
                            f"{error} ({failing}: the endpoint, not the texts)"
                        ) from None
                    if skip:
                        held.append((batch[0], str(error)[:300]))
                        logger.warning("message %s not embedded: it failed alone (%s)", alone[1], error)
                    else:
                        queue.appendleft(batch[0])
                    continue
                pacing.answered(tokens, time.monotonic() - started, tuple(key for key, _, _ in batch))
            answered = True
            record([(*key, digest) for key, _, digest in batch], vectors)
            written += len(batch)
        if held and answered and not queue:  # the last texts failed alone, after answers: skipped
            record([], None)
    finally:
        # Texts that failed alone but were not recorded (the run stopped first) are tried again later.
        pending.todo = [item for item, _ in held] + list(queue)
    return written


def build_index(
    db: HermesDB,
    store: IndexStore,
    session_ids: Sequence[str],
    embedding: Any,
    embedder: Any,
    deadline: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    should_continue: Callable[[], bool] | None = None,
    plan: CheckPlan | None = None,
    pacing: Pacing | None = None,
) -> tuple[int, bool]:
    """Index these sessions into a writable store (the caller holds the indexer lock).

    Returns (chunks written, complete). A complete pass records its watermarks in the store.
    """
    framing = Framing.of(embedding, embedder)
    pending = pending_chunks(db, store, session_ids, embedder.fingerprint, framing, plan)
    if progress is not None:
        progress(0, len(pending.todo))
    pacing = pacing or Pacing.of(embedding)
    written = 0
    while not pending.complete:
        step = embed_pending(
            store, embedder, pending, embedding.batch_size, deadline, should_continue, pacing
        )
        written += step
        if progress is not None:
            progress(written, written + len(pending.todo))
        if deadline is not None and time.monotonic() >= deadline:
            break
        if should_continue is not None and not step and pending.todo:
            break
    if pending.complete:
        store.set_watermarks(vectors_key(embedder.fingerprint, framing), pending.plan.marks)
    return written, pending.complete


def gate_check(identity: dict[str, Any], folders: Sequence[str] | None = None) -> Callable[[], bool]:
    """A ``should_continue`` that reads config.yaml and consent.json afresh before every batch."""
    from .consent import read_consent, semantic_gate

    def allowed() -> bool:
        env = HermesEnv.current()
        consent = read_consent(env)
        return semantic_gate(env.settings.embedding, consent, identity, env.profile, folders) == "ok"

    return allowed


def index_scope(
    env: HermesEnv,
    identity: dict[str, Any],
    session_ids: Sequence[str],
    embedder: Any,
    deadline: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    lock_wait: float = LOCK_RETRY_SECONDS,
    pacing: Pacing | None = None,
    folders: Sequence[str] | None = None,
    schemas: SchemaCache | None = None,
) -> tuple[int, bool]:
    """Take the lock, open both databases, build. ``(0, False)`` when another indexer keeps the lock.
    Every batch asks the consent gate first (``folders``: the project's folders when it started).
    ``schemas``: the process's, so that ``index --all-projects`` reads state.db's schema once."""
    with indexer_lock(env.data_dir, lock_wait) as taken:
        if not taken:
            return 0, False
        with (
            HermesDB.open(env, schemas) as db,
            IndexStore.open_writable(env.index_path, BACKGROUND_BUSY_SECONDS) as store,
        ):
            written, complete = build_index(
                db,
                store,
                session_ids,
                env.settings.embedding,
                embedder,
                deadline,
                progress,
                should_continue=gate_check(identity, folders),
                pacing=pacing,
            )
            if complete:
                _refresh_matrix_file(store, embedder.fingerprint, identity, session_ids)
            return written, complete


def _refresh_matrix_file(
    store: IndexStore, fingerprint: str, identity: dict[str, Any], session_ids: Any
) -> None:
    """Bring the project's matrix file up to date now, so the next process's first search maps it
    as it is instead of reading what changed out of SQLite. A derived file: failing is harmless."""
    from . import matrix

    try:
        key = identity_file_key(identity)
        if not matrix.is_current(store, fingerprint, key, session_ids):
            matrix.refresh(store, fingerprint, key, session_ids)
    except Exception:
        logger.info("matrix file not refreshed; the next search will", exc_info=True)


# --------------------------------------------------------------------------- background


def _pinned_to_home(home: Any, work: Callable[[], None]) -> Callable[[], None]:
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


class BackgroundIndexer:
    """Index threads of this process, one per (database, model, scope)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[tuple[str, str], threading.Thread] = {}

    @staticmethod
    def _key(env: HermesEnv, fingerprint: str, session_ids: Sequence[str]) -> tuple[str, str]:
        return (str(env.index_path), fingerprint + ":" + content_hash("\n".join(sorted(session_ids))))

    def running(self, env: HermesEnv, fingerprint: str, session_ids: Sequence[str]) -> bool:
        with self._lock:
            thread = self._threads.get(self._key(env, fingerprint, session_ids))
            return bool(thread and thread.is_alive())

    def start(
        self,
        env: HermesEnv,
        identity: dict[str, Any],
        session_ids: Sequence[str],
        embedder: Any,
        folders: Sequence[str] | None = None,
        schemas: SchemaCache | None = None,
    ) -> None:
        """Finish the index off the agent's path; a failure leaves ``partial`` for the next search."""
        key = self._key(env, embedder.fingerprint, session_ids)
        ids = list(session_ids)

        def work() -> None:
            try:
                index_scope(HermesEnv.current(), identity, ids, embedder, folders=folders, schemas=schemas)
            except Exception:  # the next search reports partial/unavailable with the reason
                logger.warning("background indexing stopped", exc_info=True)

        with self._lock:
            running = self._threads.get(key)
            if running and running.is_alive():
                return
            thread = threading.Thread(
                target=_pinned_to_home(env.home, work), name="project-history-index", daemon=True
            )
            self._threads[key] = thread
            thread.start()

    def wait(self, timeout: float = 60.0) -> None:
        """Join running index threads (tests and benchmarks use it; searches never wait)."""
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            thread.join(timeout)
