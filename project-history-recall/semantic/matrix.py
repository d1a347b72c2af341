"""A derived float32 copy of one project's vectors on disk, memory-mapped by every search.

``embeddings.db`` stays the only source of truth. A matrix file is a cache built from it, and
rebuilt whenever it is missing, unreadable, or from another database, model or width: deleting
the folder loses nothing. It exists because a fresh process (every ``hermes chat -q``) would
otherwise read every vector of the project out of SQLite and convert it before its first query.
Mapping the file costs nothing up front; the pages come from the OS page cache as the first
matrix-vector product touches them, and they are shared between processes rather than copied
into each one.

Layout, in ``<data_dir>/matrix/``, per (embeddings.db instance, model, project):

* ``<name>.json``: the header, replaced atomically; it names the two data files and how many
  rows of them are valid, so a reader never sees a half-written row.
* ``<name>.<token>.f32``: rows of ``width`` little-endian float32, as stored (unit vectors).
* ``<name>.<token>.rows``: per row, its chunk id (``chunks.id``), message id, chunk index and
  the index of its session in the header's ``sessions`` list.

Rows are only ever appended. A row whose chunk is gone from embeddings.db (a stale chunk, or one
re-embedded under a new id) is listed in ``dropped`` and masked; when too many are, the file is
rewritten. ``covered`` lists the sessions whose rows were all present at ``generation`` (the
write counter of embeddings.db): while the counter has not moved, a scope within ``covered``
needs no SQL at all. Writers (searches and indexers) take ``<name>.lock``; readers take nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..store import EMPTY_TOTALS, HermesDB
from .chunking import content_hash
from .index_store import (
    VECTOR_BYTES,
    VECTOR_DTYPE,
    IndexStore,
    WidthMismatch,
    file_lock,
    purge_hint,
    width_mismatch,
)

logger = logging.getLogger(__name__)

FORMAT = 1
#: Rewrite the file once more than this share of its rows is dropped.
MAX_DROPPED_SHARE = 0.25
LOCK_WAIT_SECONDS = 2.0
ROW_FIELDS = (("chunk_id", "<i8"), ("message_id", "<i8"), ("chunk_index", "<i4"), ("session", "<i4"))


def matrix_dir(index_path: Path) -> Path:
    return index_path.parent / "matrix"


def _private(path: Path) -> Any:
    """A new file only its owner can read, like embeddings.db: the vectors are the same."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")


def identity_file_key(identity: dict[str, Any]) -> str:
    """Which matrix file a project's vectors live in (one per project, whatever the current session)."""
    from ..attribution import scope_key

    kind, value = scope_key(identity)
    return f"{kind}:{value}"


def file_name(instance: str, fingerprint: str, scope_key: str) -> str:
    return hashlib.sha256(f"{instance}\n{fingerprint}\n{scope_key}".encode()).hexdigest()[:24]


@dataclass
class Matrix:
    """One model's vectors for (a superset of) a scope, rows aligned with their ids."""

    vectors: Any  # (n, width) float32: a read-only memory map, or an in-memory array
    rows: Any  # structured (n,) array of ROW_FIELDS
    sessions: list[str]  # rows["session"] indexes this list
    width: int
    generation: int = -1
    covered: frozenset[str] = frozenset()
    dropped: Any = None  # int64 chunk ids of rows that are gone from embeddings.db
    token: str = ""  # which data files (empty: built in memory)
    session_index: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rows)

    def covers(self, session_ids: Sequence[str], generation: int) -> bool:
        return self.generation == generation and all(sid in self.covered for sid in session_ids)


def _row_dtype() -> Any:
    import numpy as np

    return np.dtype(list(ROW_FIELDS))


# --------------------------------------------------------------------------- reading


def is_current(store: IndexStore, fingerprint: str, scope_key: str, session_ids: Sequence[str]) -> bool:
    """Does the file already hold every row of these sessions as embeddings.db has them now?
    (The header alone is read.)"""
    instance = store.instance
    path = matrix_dir(store.path) / f"{file_name(instance, fingerprint, scope_key)}.json"
    try:
        header = json.loads(path.read_text(encoding="utf-8"))
        covered = set(header["covered"])
        return (
            header.get("format") == FORMAT
            and header.get("instance") == instance
            and header.get("fingerprint") == fingerprint
            and int(header["generation"]) == store.generation
            and all(sid in covered for sid in session_ids)
        )
    except (OSError, ValueError, KeyError, TypeError):
        return False


def read(folder: Path, name: str, instance: str, fingerprint: str) -> Matrix | None:
    """The matrix file as its header describes it, or None when it is missing or not for this
    database and model (any damage reads as missing: the caller rebuilds)."""
    import numpy as np

    try:
        header = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
        if (
            header.get("format") != FORMAT
            or header.get("instance") != instance
            or header.get("fingerprint") != fingerprint
        ):
            return None
        count, width, token = int(header["count"]), int(header["width"]), str(header["token"])
        rows_path = folder / f"{name}.{token}.rows"
        vectors_path = folder / f"{name}.{token}.f32"
        dtype = _row_dtype()
        if (
            rows_path.stat().st_size < count * dtype.itemsize
            or vectors_path.stat().st_size < count * width * 4
        ):
            return None
        vectors: np.ndarray  # a read-only memory map, or an in-memory array when empty
        if count:
            rows = np.fromfile(rows_path, dtype=dtype, count=count)
            vectors = np.memmap(vectors_path, dtype="<f4", mode="r", shape=(count, width))
        else:
            rows = np.zeros(0, dtype=dtype)
            vectors = np.zeros((0, width), dtype=np.float32)
        sessions = list(header["sessions"])
        return Matrix(
            vectors=vectors,
            rows=rows,
            sessions=sessions,
            width=width,
            generation=int(header["generation"]),
            covered=frozenset(header["covered"]),
            dropped=np.asarray(header.get("dropped", []), dtype=np.int64),
            token=token,
            session_index={sid: i for i, sid in enumerate(sessions)},
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


# --------------------------------------------------------------------------- writing


def _file_lock(folder: Path, name: str):
    """Whether this process may write the file now (waits up to LOCK_WAIT_SECONDS)."""
    return file_lock(folder / f"{name}.lock", LOCK_WAIT_SECONDS)


def _fill(
    store: IndexStore,
    fingerprint: str,
    ids: Sequence[int],
    width: int | None,
    sessions: list[str],
    session_index: dict[str, int],
    sink: Any,
) -> int | None:
    """Read these chunk rows from embeddings.db block by block, hand (vectors, rows) to ``sink``.

    Each stored row's length is checked: a row of another width (a model swapped under the same
    name before widths were enforced) stops the read with the reason instead of a reshape error.
    """
    import numpy as np

    dtype = _row_dtype()
    for block in store.chunk_rows(fingerprint, ids):
        if not block:
            continue
        if width is None:
            width = len(block[0][4]) // VECTOR_BYTES
        expected = width * VECTOR_BYTES
        for row in block:
            if len(row[4]) != expected:
                raise width_mismatch(store.path, width, len(row[4]) // VECTOR_BYTES)
        vectors = np.frombuffer(b"".join(row[4] for row in block), dtype=VECTOR_DTYPE).reshape(
            len(block), width
        )
        meta = np.empty(len(block), dtype=dtype)
        meta["chunk_id"] = [row[0] for row in block]
        meta["message_id"] = [row[2] for row in block]
        meta["chunk_index"] = [row[3] for row in block]
        index = []
        for row in block:
            position = session_index.get(row[1])
            if position is None:
                position = session_index[row[1]] = len(sessions)
                sessions.append(row[1])
            index.append(position)
        meta["session"] = index
        sink(vectors, meta)
    return width


def build_in_memory(store: IndexStore, fingerprint: str, session_ids: Sequence[str]) -> Matrix:
    """The same matrix without a file (the folder is not writable): a preallocated array filled
    block by block from the cursor, so memory peaks at the matrix plus one block."""
    import numpy as np

    ids = store.chunk_ids(fingerprint, session_ids)
    width = store.model_width(fingerprint)
    dtype = _row_dtype()
    sessions: list[str] = []
    session_index: dict[str, int] = {}
    rows = np.empty(len(ids), dtype=dtype)
    vectors = np.empty((len(ids), width or 0), dtype=np.float32) if width else None
    filled = 0

    def sink(block_vectors: Any, meta: Any) -> None:
        nonlocal filled, vectors
        if vectors is None:
            vectors = np.empty((len(ids), block_vectors.shape[1]), dtype=np.float32)
        vectors[filled : filled + len(meta)] = block_vectors
        rows[filled : filled + len(meta)] = meta
        filled += len(meta)

    width = _fill(store, fingerprint, ids, width, sessions, session_index, sink)
    if vectors is None:
        vectors = np.zeros((0, width or 0), dtype=np.float32)
    return Matrix(
        vectors=vectors[:filled],
        rows=rows[:filled],
        sessions=sessions,
        width=width or 0,
        generation=store.generation,
        covered=frozenset(session_ids),
        dropped=np.zeros(0, dtype=np.int64),
        session_index=session_index,
    )


def refresh(
    store: IndexStore,
    fingerprint: str,
    scope_key: str,
    session_ids: Sequence[str],
    current: Matrix | None = None,
) -> Matrix:
    """The matrix file for this scope, brought up to date with embeddings.db (appended to, or
    rewritten when too much of it is dropped); built in memory when the folder cannot be written
    or another process is writing the same file right now."""
    import numpy as np

    folder = matrix_dir(store.path)
    instance, generation = store.instance, store.generation
    name = file_name(instance, fingerprint, scope_key)
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if folder.stat().st_mode & 0o077:
            folder.chmod(0o700)  # made by a version that left it readable to others
        with _file_lock(folder, name) as taken:
            if not taken:
                return build_in_memory(store, fingerprint, session_ids)
            existing = read(folder, name, instance, fingerprint)
            if existing is not None and existing.covers(session_ids, generation):
                return existing
            ids = np.asarray(store.chunk_ids(fingerprint, session_ids), dtype=np.int64)
            width = store.model_width(fingerprint)
            if existing is not None and width is not None and existing.width != width:
                existing = None
            if existing is not None:
                scope = np.zeros(len(existing.sessions) + 1, dtype=bool)
                for sid in session_ids:
                    position = existing.session_index.get(sid)
                    if position is not None:
                        scope[position] = True
                have = existing.rows["chunk_id"]
                in_scope = scope[existing.rows["session"]]
                gone = have[in_scope & ~np.isin(have, ids, assume_unique=True)]
                dropped = np.union1d(existing.dropped, gone)
                missing = np.setdiff1d(ids, have, assume_unique=True)
                if len(dropped) < 1000 or len(dropped) <= MAX_DROPPED_SHARE * (len(have) + len(missing)):
                    return _append(
                        store, folder, name, existing, fingerprint, missing, dropped, session_ids, generation
                    )
            return _rewrite(store, folder, name, fingerprint, ids, width, session_ids, generation)
    except OSError as error:
        logger.debug("matrix file unavailable (%s); building the matrix in memory", error)
        return build_in_memory(store, fingerprint, session_ids)


def _header(
    name: str,
    store: IndexStore,
    fingerprint: str,
    token: str,
    count: int,
    width: int,
    sessions: list[str],
    covered: Sequence[str],
    dropped: Any,
    generation: int,
) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "instance": store.instance,
        "fingerprint": fingerprint,
        "token": token,
        "count": count,
        "width": width,
        "generation": generation,
        "sessions": sessions,
        "covered": sorted(covered),
        "dropped": [int(x) for x in dropped],
    }


def _publish(folder: Path, name: str, header: dict[str, Any]) -> None:
    staging = folder / f".{name}.{uuid.uuid4().hex}.json"
    with _private(staging) as file:
        file.write(json.dumps(header, separators=(",", ":")).encode("utf-8"))
    os.replace(staging, folder / f"{name}.json")


def _write_rows(
    store: IndexStore,
    fingerprint: str,
    ids: Any,
    width: int | None,
    sessions: list[str],
    session_index: dict[str, int],
    vectors_file: Any,
    rows_file: Any,
) -> tuple[int, int | None]:
    import numpy as np

    written = 0

    def sink(block_vectors: Any, meta: Any) -> None:
        nonlocal written
        vectors_file.write(np.ascontiguousarray(block_vectors, dtype="<f4").tobytes())
        rows_file.write(meta.tobytes())
        written += len(meta)

    width = _fill(store, fingerprint, [int(x) for x in ids], width, sessions, session_index, sink)
    for handle in (vectors_file, rows_file):
        handle.flush()
        os.fsync(handle.fileno())
    return written, width


def _append(
    store: IndexStore,
    folder: Path,
    name: str,
    existing: Matrix,
    fingerprint: str,
    missing: Any,
    dropped: Any,
    session_ids: Sequence[str],
    generation: int,
) -> Matrix:
    count = len(existing)
    sessions = list(existing.sessions)
    session_index = dict(existing.session_index)
    dtype = _row_dtype()
    with (
        open(folder / f"{name}.{existing.token}.f32", "r+b") as vectors_file,
        open(folder / f"{name}.{existing.token}.rows", "r+b") as rows_file,
    ):
        # Anything past the valid rows is a write that never got published: drop it.
        vectors_file.truncate(count * existing.width * 4)
        rows_file.truncate(count * dtype.itemsize)
        vectors_file.seek(0, os.SEEK_END)
        rows_file.seek(0, os.SEEK_END)
        added, _ = _write_rows(
            store, fingerprint, missing, existing.width, sessions, session_index, vectors_file, rows_file
        )
    header = _header(
        name,
        store,
        fingerprint,
        existing.token,
        count + added,
        existing.width,
        sessions,
        session_ids,
        dropped,
        generation,
    )
    _publish(folder, name, header)
    return read(folder, name, store.instance, fingerprint) or build_in_memory(store, fingerprint, session_ids)


def _rewrite(
    store: IndexStore,
    folder: Path,
    name: str,
    fingerprint: str,
    ids: Any,
    width: int | None,
    session_ids: Sequence[str],
    generation: int,
) -> Matrix:
    token = uuid.uuid4().hex[:12]
    sessions: list[str] = []
    session_index: dict[str, int] = {}
    with (
        _private(folder / f"{name}.{token}.f32") as vectors_file,
        _private(folder / f"{name}.{token}.rows") as rows_file,
    ):
        count, width = _write_rows(
            store, fingerprint, ids, width, sessions, session_index, vectors_file, rows_file
        )
    header = _header(
        name, store, fingerprint, token, count, width or 0, sessions, session_ids, [], generation
    )
    _publish(folder, name, header)
    _prune(folder, name, token, store.instance)
    return read(folder, name, store.instance, fingerprint) or build_in_memory(store, fingerprint, session_ids)


def _prune(folder: Path, name: str, token: str, instance: str) -> None:
    """Remove this file's older data files, and every file of another (purged) embeddings.db."""
    for path in folder.iterdir():
        parts = path.name.split(".")
        try:
            if parts[0] == name and len(parts) == 3 and parts[1] != token:
                path.unlink()
            elif path.suffix == ".json" and not path.name.startswith("."):
                other = json.loads(path.read_text(encoding="utf-8"))
                if other.get("instance") != instance:
                    stem = path.name[: -len(".json")]
                    for leftover in folder.glob(f"{stem}.*"):
                        leftover.unlink()
        except (OSError, ValueError):
            continue


# --------------------------------------------------------------------------- a scope's view, and the query


def active_totals_now(db: HermesDB, session_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
    """Every session's (count, id sum) of active messages now (when no index check computed it)."""
    totals = db.session_totals(session_ids)
    return {sid: totals.get(sid, EMPTY_TOTALS) for sid in session_ids}


@dataclass
class ScopeMatrix:
    """A matrix file seen from one scope: the rows that may be returned now, and the rest masked."""

    matrix: Matrix
    excluded: Any  # numpy int64: row positions outside the scope, dropped or not live
    count: int  # rows that may be returned

    def __len__(self) -> int:
        return self.count

    @property
    def width(self) -> int:
        return self.matrix.width


def _scope_view(db: HermesDB, matrix: Matrix, session_ids: Sequence[str]) -> ScopeMatrix:
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
        active_totals: dict[str, tuple[int, int]] | None = None,
    ) -> ScopeMatrix:
        scope_hash = content_hash("\n".join(sorted(session_ids)))
        key = scope_key or "sessions:" + scope_hash
        slot = (str(store.path), fingerprint, key)
        if active_totals is None:
            active_totals = active_totals_now(db, session_ids)
        instance, generation = store.instance, store.generation
        freshness = (
            instance,
            generation,
            scope_hash,
            tuple(active_totals.get(sid, EMPTY_TOTALS) for sid in session_ids),
        )
        with self._lock:
            cached = self._entries.get(slot)
        if cached and cached[0] == freshness:
            return cached[1]
        matrix = cached[1].matrix if cached and cached[0][0] == instance else None
        if matrix is None or not matrix.covers(session_ids, generation):
            folder = matrix_dir(store.path)
            matrix = read(folder, file_name(instance, fingerprint, key), instance, fingerprint)
            if matrix is None or not matrix.covers(session_ids, generation):
                matrix = refresh(store, fingerprint, key, session_ids)
        view = _scope_view(db, matrix, session_ids)
        with self._lock:
            self._entries[slot] = (freshness, view)
        return view


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
            f"{matrix.width}-dimensional ones: the model behind the endpoint changed; {purge_hint()}"
        )
    # einsum runs on this thread: BLAS's threads stall whenever another process has the other
    # cores (docs/benchmarks.md, "Code choices").
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


def nearest(matrix: ScopeMatrix, query_vector: Any, top_k: int) -> tuple[list, float, int]:
    """:func:`top_messages`, the scope's mean cosine for the query and how many chunks that mean
    averages: the background the ranking measures a hit's lift against
    (``ranking.rank.with_lift``; too few chunks, and there is none)."""
    stats: dict[str, float] = {}
    hits = top_messages(matrix, query_vector, top_k, stats)
    return hits, stats.get("mean", 0.0), int(stats.get("count", 0))
