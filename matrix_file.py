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
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .index_db import VECTOR_BYTES, VECTOR_DTYPE, IndexStore, file_lock, width_mismatch

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
    from .attribution import scope_key

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
