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

import hashlib
import logging
import math
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .hermes_db import ChunkKey, HermesDB, message_text
from .hermes_env import HermesEnv
from .index_db import BACKGROUND_BUSY_SECONDS, LOCK_RETRY_SECONDS, IndexStore, indexer_lock

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------- chunking

#: Kana, CJK ideographs (with extensions and compatibility forms) and Hangul: the scripts
#: written without spaces, where one character is about one token.
CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ebef"
_CJK_CHAR = re.compile(f"[{CJK_CHARS}]")
# A unit is one CJK character, or a run of other non-space characters with its trailing space.
_UNIT = re.compile(f"[{CJK_CHARS}]\\s*|[^\\s{CJK_CHARS}]+\\s*")


def _unit_tokens(unit: str) -> int:
    """Tokens of one unit: a CJK character is about one token, other text about four characters."""
    core = unit.rstrip()
    if _CJK_CHAR.match(core):
        return 1
    return max(1, math.ceil(len(core) / 4))


def chunk_text(text: str, chunk_size: int, overlap: int) -> list[str]:
    """Windows of at most ``chunk_size`` estimated tokens, neighbours sharing ``overlap``.

    The estimate needs no tokenizer and holds for English and CJK alike (bench/README.md, "Chunk size").
    """
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
    it; measured on LoCoMo, one preceding message lifts semantic recall markedly
    (bench/README.md, "Context").
    """
    context = context_tail(previous, embedding.chunk_size // 4) if previous else ""
    return f"{context}\n{chunk}" if context else chunk


# --------------------------------------------------------------------------- what is pending


@dataclass
class Pending:
    """What an index run must do for a scope: chunks to embed and chunk keys that are stale."""

    todo: list[tuple[ChunkKey, str, str]]  # (key, text, hash)
    stale: list[ChunkKey]
    live_messages: int
    checked_up_to: dict[str, int]  # per session: the newest message this pass looked at

    @property
    def complete(self) -> bool:
        return not self.todo and not self.stale


def index_recipe(fingerprint: str, embedding: Any) -> str:
    """Everything that shapes the stored vectors: the model, and how text is cut and framed."""
    return (
        f"{fingerprint}|chunk={embedding.chunk_size}/{embedding.chunk_overlap}"
        f"|context={embedding.context_messages}"
    )


class Watermarks:
    """Per session, the newest message a complete pass has checked, per database and recipe.

    Hermes appends messages and never edits one in place (a rewind only flips ``active``), so
    once a complete pass has checked a session up to message N, the next pass need only read
    what came after N. Slots belong to one embeddings.db (its random instance id: a purge starts
    over) and one recipe; they advance only after a pass that finished.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: dict[tuple[str, str], dict[str, int]] = {}

    def get(self, instance: str, recipe: str) -> dict[str, int]:
        with self._lock:
            return dict(self._slots.get((instance, recipe), {}))

    def clear(self) -> None:
        """Forget every slot: the next pass re-reads whole sessions (as a new process does)."""
        with self._lock:
            self._slots.clear()

    def advance(self, instance: str, recipe: str, checked_up_to: dict[str, int]) -> None:
        with self._lock:
            self._slots.setdefault((instance, recipe), {}).update(checked_up_to)


#: The process's watermarks (one table per embeddings.db instance).
WATERMARKS = Watermarks()


def pending_chunks(
    db: HermesDB, store: IndexStore, session_ids: Sequence[str], fingerprint: str, embedding: Any
) -> Pending:
    """Chunks to embed for these sessions: new or changed text since the last complete pass."""
    checked = WATERMARKS.get(store.instance, index_recipe(fingerprint, embedding))
    after = {sid: checked.get(sid, 0) for sid in session_ids}
    messages = db.live_messages(after)
    stored = store.chunk_hashes(fingerprint, after) if messages else {}
    recent: dict[str, deque[str]] = {}
    if embedding.context_messages and messages:
        resumed = {m["session_id"]: after[m["session_id"]] for m in messages if after[m["session_id"]]}
        earlier = db.preceding_messages(resumed, embedding.context_messages)
        recent = {sid: deque(texts, maxlen=embedding.context_messages) for sid, texts in earlier.items()}
    todo: list[tuple[ChunkKey, str, str]] = []
    wanted: set[ChunkKey] = set()
    newest = dict(after)
    for message in messages:
        session_id, text = message["session_id"], message_text(message["content"])
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


# --------------------------------------------------------------------------- building


def embed_pending(
    store: IndexStore,
    embedder: Any,
    pending: Pending,
    batch_size: int,
    deadline: float | None,
    should_continue: Callable[[], bool] | None = None,
) -> int:
    """Embed and store batches until done, past ``deadline`` or no longer allowed; returns chunks written."""
    import numpy as np

    written = 0
    if pending.stale:
        store.write_chunks(embedder.fingerprint, [], pending.stale)
        pending.stale = []
    while pending.todo:
        if deadline is not None and time.monotonic() >= deadline:
            break
        if should_continue is not None and not should_continue():
            logger.info("indexing stopped: semantic search is no longer allowed for this project")
            break
        batch, pending.todo = pending.todo[:batch_size], pending.todo[batch_size:]
        vectors = embedder.embed_documents([text for _, text, _ in batch], deadline=deadline)
        rows = [
            (key[0], key[1], key[2], digest, np.asarray(vector, dtype="<f4").tobytes())
            for (key, _, digest), vector in zip(batch, vectors, strict=True)
        ]
        store.write_chunks(embedder.fingerprint, rows)
        written += len(rows)
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
) -> tuple[int, bool]:
    """Index these sessions into a writable store (the caller holds the indexer lock).

    Returns (chunks written, complete).
    """
    pending = pending_chunks(db, store, session_ids, embedder.fingerprint, embedding)
    if progress is not None:
        progress(0, len(pending.todo))
    written = 0
    while not pending.complete:
        step = embed_pending(store, embedder, pending, embedding.batch_size, deadline, should_continue)
        written += step
        if progress is not None:
            progress(written, written + len(pending.todo))
        if deadline is not None and time.monotonic() >= deadline:
            break
        if should_continue is not None and not step and pending.todo:
            break
    if pending.complete:
        WATERMARKS.advance(
            store.instance, index_recipe(embedder.fingerprint, embedding), pending.checked_up_to
        )
    return written, pending.complete


def gate_check(identity: dict[str, Any]) -> Callable[[], bool]:
    """A ``should_continue`` that reads config.yaml and consent.json afresh before every batch."""
    from .consent import read_consent, semantic_gate

    def allowed() -> bool:
        env = HermesEnv.current()
        return semantic_gate(env.settings.embedding, read_consent(env), identity, env.profile) == "ok"

    return allowed


def index_scope(
    env: HermesEnv,
    identity: dict[str, Any],
    session_ids: Sequence[str],
    embedder: Any,
    deadline: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    lock_wait: float = LOCK_RETRY_SECONDS,
) -> tuple[int, bool]:
    """Take the lock, open both databases, build. ``(0, False)`` when another indexer keeps the lock."""
    with indexer_lock(env.data_dir, lock_wait) as taken:
        if not taken:
            return 0, False
        with (
            HermesDB.open(env) as db,
            IndexStore.open_writable(env.index_path, BACKGROUND_BUSY_SECONDS) as store,
        ):
            return build_index(
                db,
                store,
                session_ids,
                env.settings.embedding,
                embedder,
                deadline,
                progress,
                should_continue=gate_check(identity),
            )


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
        self, env: HermesEnv, identity: dict[str, Any], session_ids: Sequence[str], embedder: Any
    ) -> None:
        """Finish the index off the agent's path; a failure leaves ``partial`` for the next search."""
        key = self._key(env, embedder.fingerprint, session_ids)
        ids = list(session_ids)

        def work() -> None:
            try:
                index_scope(HermesEnv.current(), identity, ids, embedder)
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


#: The process's background indexer.
BACKGROUND = BackgroundIndexer()
