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

from .hermes_db import ChunkKey, HermesDB, SessionMark, message_text
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
# Up to four characters of a run of non-space, non-CJK text: a run of n characters holds
# ceil(n / 4) of them, which is its estimated tokens (counted in C, see estimate_tokens).
_QUAD = re.compile(f"[^\\s{CJK_CHARS}]{{1,4}}")


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
    return [chunk for chunk, _ in chunks_with_tokens(text, chunk_size, overlap)]


def chunks_with_tokens(text: str, chunk_size: int, overlap: int) -> list[tuple[str, int | None]]:
    """:func:`chunk_text` with each chunk's estimated tokens (None where the text was so short
    that nobody counted: a unit costs at most its length)."""
    text = text.strip()
    if not text:
        return []
    if len(text) <= chunk_size:
        return [(text, None)]
    tokens = estimate_tokens(text)
    if tokens <= chunk_size:
        return [(text, tokens)]
    units = _UNIT.findall(text)
    cjk = _CJK_CHAR.match
    costs = [1 if cjk(u) else (len(u.rstrip()) + 3) // 4 for u in units]  # = _unit_tokens, inlined
    chunks: list[tuple[str, int | None]] = []
    start = 0
    while start < len(units):
        end, used = start, 0
        while end < len(units) and (used + costs[end] <= chunk_size or end == start):
            used += costs[end]
            end += 1
        chunks.append(("".join(units[start:end]).strip(), used))
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


def estimate_tokens(text: str) -> int:
    """The plugin's token estimate of a text: the sum of :func:`_unit_tokens` over its units."""
    return len(_CJK_CHAR.findall(text)) + len(_QUAD.findall(text))


def _fitting_tail(units: Sequence[str], budget_tokens: int) -> tuple[int, bool]:
    """Where the longest run of ``units`` ending at the last one and within the budget starts, and
    whether the budget cut it (False: every unit fits)."""
    cjk = _CJK_CHAR.match
    used, first = 0, len(units)
    while first > 0:
        unit = units[first - 1]
        used += 1 if cjk(unit) else (len(unit.rstrip()) + 3) // 4
        if used > budget_tokens:
            return first, True
        first -= 1
    return 0, False


def context_tail(previous: Sequence[str], budget_tokens: int) -> str:
    """The end of the preceding messages, at most ``budget_tokens`` estimated tokens."""
    if budget_tokens <= 0:
        return ""
    joined = " ".join(" ".join(text.split()) for text in previous)
    if len(joined) <= budget_tokens:  # all of it fits (a unit costs at most its length)
        return joined.strip()
    # Once spaces are single, a unit is at most 5 characters per token: what fits lies within the
    # last 5 * budget characters. Read only those (the first unit there may be cut, so it is
    # never kept); should everything there fit, read it all.
    window = 5 * budget_tokens + 8
    partial = len(joined) > window
    units = _UNIT.findall(joined[-window:])[1:] if partial else _UNIT.findall(joined)
    first, cut = _fitting_tail(units, budget_tokens)
    if partial and not cut:
        units = _UNIT.findall(joined)
        first, _ = _fitting_tail(units, budget_tokens)
    return "".join(units[first:]).strip()


@dataclass(frozen=True)
class Framing:
    """How messages become the texts a model embeds: chunk size and overlap, and how much of the
    preceding conversation frames each chunk.

    For the ``local`` provider the model's token limit is known, and nothing past it is ever read,
    so chunks are cut to :data:`MODEL_TOKEN_SHARE` of it (estimated tokens: code runs about 1.4
    word-pieces per estimated token, so a chunk this size still fits) and a chunk's context only
    takes what is left of that budget. Remote models keep the configured sizes.
    """

    chunk_size: int
    chunk_overlap: int
    context_messages: int
    context_tokens: int  # at most this much preceding text (estimated tokens)
    input_tokens: int = 0  # context + chunk budget in estimated tokens; 0: no model limit known

    @classmethod
    def of(cls, embedding: Any, embedder: Any = None) -> Framing:
        if isinstance(embedding, Framing):
            return embedding
        chunk_size, overlap = embedding.chunk_size, embedding.chunk_overlap
        limit = int(getattr(embedder, "max_input_tokens", 0) or 0)
        budget = int(limit * MODEL_TOKEN_SHARE) if limit else 0
        if budget and chunk_size > budget:
            chunk_size = budget
            overlap = min(overlap, chunk_size // 8)
        return cls(
            chunk_size=chunk_size,
            chunk_overlap=overlap,
            context_messages=embedding.context_messages,
            context_tokens=embedding.chunk_size // 4,
            input_tokens=budget,
        )

    @property
    def recipe(self) -> str:
        base = f"chunk={self.chunk_size}/{self.chunk_overlap}|context={self.context_messages}"
        if self.context_tokens != self.chunk_size // 4:
            base += f"/{self.context_tokens}"
        return base + (f"|input={self.input_tokens}" if self.input_tokens else "")


#: Share of a local model's token limit (word-pieces) a chunk and its context may take, in the
#: plugin's estimated tokens. Measured with MiniLM's tokenizer: English prose runs 0.87 word-pieces
#: per estimated token, source code 1.26 (median) to 1.56 (90th percentile), so at 0.64 nine chunks
#: of code in ten are read to their end (the densest lose their last lines, never their start).
MODEL_TOKEN_SHARE = 0.64


def embedded_text(chunk: str, previous: Sequence[str], framing: Any, tokens: int | None = None) -> str:
    """What the model sees for a chunk: the conversation just before it, then the chunk.

    A turn is often a short reply ("Yes, let's do that") whose topic lives in the turn before
    it; measured on LoCoMo, one preceding message lifts semantic recall markedly
    (bench/README.md, "Context").
    ``tokens`` is the chunk's estimate when the caller has it already.
    """
    if not previous:
        return chunk
    framing = Framing.of(framing)
    budget = framing.context_tokens
    if framing.input_tokens and len(chunk) + budget > framing.input_tokens:
        tokens = estimate_tokens(chunk) if tokens is None else tokens
        budget = min(budget, framing.input_tokens - tokens)
    context = context_tail(previous, budget)
    return f"{context}\n{chunk}" if context else chunk


# --------------------------------------------------------------------------- what is pending


def index_recipe(fingerprint: str, framing: Any) -> str:
    """Everything that shapes the stored vectors: the model, and how text is cut and framed."""
    return f"{fingerprint}|{Framing.of(framing).recipe}"


@dataclass
class CheckPlan:
    """What an index check must read, decided from the watermarks and Hermes's index alone.

    Hermes appends messages and never edits one in place (a rewind, ``restore_rewound`` or a
    compaction only flips ``active``), so once a complete pass has checked a session up to message
    N, the next pass need only read what came after N, unless the session's active messages up to
    N changed (count or id sum), in which case it reads the session again from its start. The
    watermarks live in embeddings.db, per recipe: every process starts where the last one ended.
    """

    after: dict[str, int]  # sessions to read, and the id after which to read them
    marks: dict[str, SessionMark]  # per session read: its mark now, saved after a complete pass
    state: dict[str, tuple[int, int]]  # every session's (count, id sum) now: the matrix cache's freshness
    to_read: int  # active messages (any role) the check will read

    @property
    def nothing_new(self) -> bool:
        return not self.after


EMPTY_MARK: SessionMark = (0, 0, 0)
EMPTY_TOTALS = (0, 0)


def plan_check(
    db: HermesDB, store: IndexStore, session_ids: Sequence[str], fingerprint: str, framing: Any
) -> CheckPlan:
    checked = store.watermarks(index_recipe(fingerprint, framing), session_ids)
    totals = db.session_totals(session_ids)
    state = {sid: totals.get(sid, EMPTY_TOTALS) for sid in session_ids}
    changed = [sid for sid in session_ids if sid not in checked or checked[sid][1:] != state[sid]]
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
    return CheckPlan(after=after, marks=moved, state=state, to_read=to_read)


@dataclass
class Pending:
    """What an index run must do for a scope: chunks to embed and chunk keys that are stale."""

    todo: list[tuple[ChunkKey, str, str]]  # (key, text, hash)
    stale: list[ChunkKey]
    live_messages: int
    plan: CheckPlan

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
    context = framing.context_messages
    recent: dict[str, deque[str]] = {}
    if context and messages:
        resumed = {m["session_id"]: after[m["session_id"]] for m in messages if after[m["session_id"]]}
        earlier = db.preceding_messages(resumed, context)
        recent = {sid: deque(texts, maxlen=context) for sid, texts in earlier.items()}
    todo: list[tuple[ChunkKey, str, str]] = []
    wanted: set[ChunkKey] = set()
    for message in messages:
        session_id, text = message["session_id"], message_text(message["content"])
        previous = recent.setdefault(session_id, deque(maxlen=max(1, context)))
        chunks = chunks_with_tokens(text, framing.chunk_size, framing.chunk_overlap)
        for index, (chunk, tokens) in enumerate(chunks):
            key = (session_id, message["message_id"], index)
            framed = embedded_text(chunk, list(previous) if context else [], framing, tokens)
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
    return Pending(todo=todo, stale=stale, live_messages=len(messages), plan=plan)


# --------------------------------------------------------------------------- building


def embed_pending(
    store: IndexStore,
    embedder: Any,
    pending: Pending,
    batch_size: int,
    deadline: float | None,
    should_continue: Callable[[], bool] | None = None,
) -> int:
    """Embed and store batches until done, past ``deadline`` or no longer allowed; returns chunks written.

    Texts go to the provider shortest first, so each batch holds texts of about one length and a
    model pads little (local ONNX pads every text of a batch to its longest).
    """
    written = 0
    if pending.stale:
        store.write_chunks(embedder.fingerprint, [], stale=pending.stale)
        pending.stale = []
    todo = sorted(pending.todo, key=lambda item: len(item[1]))
    done = 0
    try:
        while done < len(todo):
            if deadline is not None and time.monotonic() >= deadline:
                break
            if should_continue is not None and not should_continue():
                logger.info("indexing stopped: semantic search is no longer allowed for this project")
                break
            batch = todo[done : done + batch_size]
            vectors = embedder.embed_documents([text for _, text, _ in batch], deadline=deadline)
            store.write_chunks(embedder.fingerprint, [(*key, digest) for key, _, digest in batch], vectors)
            done += len(batch)
            written += len(batch)
    finally:
        pending.todo = todo[done:]
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
) -> tuple[int, bool]:
    """Index these sessions into a writable store (the caller holds the indexer lock).

    Returns (chunks written, complete). A complete pass records its watermarks in the store.
    """
    framing = Framing.of(embedding, embedder)
    pending = pending_chunks(db, store, session_ids, embedder.fingerprint, framing, plan)
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
        store.set_watermarks(index_recipe(embedder.fingerprint, framing), pending.plan.marks)
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
            written, complete = build_index(
                db,
                store,
                session_ids,
                env.settings.embedding,
                embedder,
                deadline,
                progress,
                should_continue=gate_check(identity),
            )
            if complete:
                _refresh_matrix_file(store, embedder.fingerprint, identity, session_ids)
            return written, complete


def _refresh_matrix_file(
    store: IndexStore, fingerprint: str, identity: dict[str, Any], session_ids: Any
) -> None:
    """Bring the project's matrix file up to date now, so the next process's first search maps it
    as it is instead of reading what changed out of SQLite. A derived file: failing is harmless."""
    from . import matrix_file

    try:
        key = matrix_file.identity_file_key(identity)
        if not matrix_file.is_current(store, fingerprint, key, session_ids):
            matrix_file.refresh(store, fingerprint, key, session_ids)
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
