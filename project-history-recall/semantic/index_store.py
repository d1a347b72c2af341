"""The plugin's own ``embeddings.db``: one :class:`IndexStore` per call, and the indexer lock.

A search opens the store read-only (``mode=ro``; nothing is created, no pragma is written, no
schema script runs), so a keyword search can never fail or wait because of this file. Only an
indexer holding :func:`indexer_lock` opens it for writing; that is where the file is created and
where the stored ``schema_version`` is read and migrated in numbered steps (as ``llm``'s
``embeddings_migrations.py`` does). A version newer than this code knows is refused, never
guessed at.

The file is created atomically (schema written to a temporary file that is renamed into place),
so an empty or schema-less ``embeddings.db`` is never ours: it is reported as damaged, with the
command that starts over, instead of being silently rebuilt.

Vectors are stored as little-endian float16 (half the bytes of float32, no loss in retrieval:
docs/benchmarks.md), one width per model fingerprint (table ``models``): a write of another width is
refused with :class:`WidthMismatch`, so the stored rows of one model can always be read as one
matrix. Per-session watermarks (table ``watermarks``) let the first index check of a process
read only what changed since the last complete pass of any process.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..store import ChunkKey, SessionMark

READ_BUSY_SECONDS = 0.5  # a search never waits longer than this for a writer of ours or anyone's
INLINE_BUSY_SECONDS = 0.5  # inline indexing during a search
BACKGROUND_BUSY_SECONDS = 15.0  # the background indexer and the CLI's `index` can wait


def purge_hint() -> str:
    """What to run when the index cannot be used as it is (every vector is embedded again)."""
    from ..store import hint

    return f"run {hint('project-history', 'revoke', '--purge')}, then {hint('project-history', 'allow')}"


# Numbered steps; each runs once, in one transaction, and records its number in meta.
MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (
        1,
        (
            """CREATE TABLE IF NOT EXISTS chunks (
                id INTEGER PRIMARY KEY,
                session_id TEXT NOT NULL,
                message_id INTEGER NOT NULL,
                chunk_index INTEGER NOT NULL,
                content_hash TEXT NOT NULL,
                model_fingerprint TEXT NOT NULL,
                vector BLOB NOT NULL,
                created_at REAL NOT NULL,
                UNIQUE(session_id, message_id, chunk_index, model_fingerprint)
            )""",
            "CREATE INDEX IF NOT EXISTS chunks_by_model_session ON chunks(model_fingerprint, session_id)",
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
            "INSERT OR IGNORE INTO meta (key, value) VALUES ('generation', '0')",
        ),
    ),
    (
        2,
        (
            # Per (recipe, session): the newest message id a complete pass has checked, and the
            # count and id sum of the session's active messages up to it at that time. A rewind or
            # SessionDB.restore_rewound below the mark changes those two, so the session is read
            # again from its start; otherwise only messages above the mark are read.
            """CREATE TABLE IF NOT EXISTS watermarks (
                recipe TEXT NOT NULL,
                session_id TEXT NOT NULL,
                checked_up_to INTEGER NOT NULL,
                active_count INTEGER NOT NULL,
                active_id_sum INTEGER NOT NULL,
                PRIMARY KEY (recipe, session_id)
            ) WITHOUT ROWID""",
        ),
    ),
    (
        3,
        (
            # One vector width per model: recorded from the stored rows, then enforced on write.
            """CREATE TABLE IF NOT EXISTS models (
                fingerprint TEXT PRIMARY KEY,
                width INTEGER NOT NULL,
                created_at REAL NOT NULL
            )""",
            "INSERT OR IGNORE INTO models (fingerprint, width, created_at) "
            "SELECT model_fingerprint, length(vector) / 4, min(created_at) FROM chunks "
            "GROUP BY model_fingerprint",
            # float32 -> float16 on disk (phr_float16 is registered by _migrate).
            "UPDATE chunks SET vector = phr_float16(vector)",
        ),
    ),
    (
        4,
        (
            # Chunks the provider failed on alone (semantic.pacing): not sent again while their
            # text (hash) is the same; `status` counts their messages as not indexed.
            """CREATE TABLE IF NOT EXISTS skipped (
                session_id TEXT NOT NULL,
                message_id INTEGER NOT NULL,
                chunk_index INTEGER NOT NULL,
                model_fingerprint TEXT NOT NULL,
                content_hash TEXT NOT NULL,
                reason TEXT NOT NULL,
                skipped_at REAL NOT NULL,
                PRIMARY KEY (model_fingerprint, session_id, message_id, chunk_index)
            ) WITHOUT ROWID""",
        ),
    ),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]

#: How vectors are stored: little-endian float16, ``width * VECTOR_BYTES`` bytes per row.
VECTOR_DTYPE = "<f2"
VECTOR_BYTES = 2


class IndexUnavailable(Exception):
    """embeddings.db cannot be used as it is; the message says what to do."""


class WidthMismatch(ValueError):
    """Vectors of another width than the model's stored ones: the model behind the name changed."""


def width_mismatch(path: Path, stored: int, got: int) -> WidthMismatch:
    return WidthMismatch(
        f"the embedding model now returns {got}-dimensional vectors but the semantic index {path} "
        f"holds {stored}-dimensional ones for the same model settings: the model behind the endpoint "
        f"changed. Point embedding.model (or base_url) at the model the index was built with, or "
        f"{purge_hint()}"
    )


def _float16_blob(blob: bytes) -> bytes:
    """Migration 3: one stored float32 vector as float16 (numpy is present wherever an indexer runs)."""
    import numpy as np

    if blob is None or len(blob) % 4:
        return blob
    return np.frombuffer(blob, dtype="<f4").astype(VECTOR_DTYPE).tobytes()


# --------------------------------------------------------------------------- file checks


def _check_file(path: Path) -> bool:
    """Refuse a file that is not a SQLite database before SQLite reads garbage pages; True when the
    file is shorter than its header says (see :func:`_whole`).

    The header's page count (valid when its change counter matches "version-valid-for") times
    the page size fits in a whole file. A file that is shorter is a half-truncated copy, or a
    checkpoint that ran out of disk while the WAL still holds every page: only SQLite can tell.
    """
    size = path.stat().st_size
    if size == 0:
        raise IndexUnavailable(f"the semantic index {path} is empty (damaged); {purge_hint()}")
    with path.open("rb") as handle:
        header = handle.read(100)
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        raise IndexUnavailable(
            f"the semantic index {path} is not a SQLite database (damaged); {purge_hint()}"
        )
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    return header[24:28] == header[92:96] and pages * page_size > size


def _whole(conn: sqlite3.Connection, path: Path) -> None:
    """For a file shorter than its header says: SQLite's own check, over the WAL too. A disk that
    filled during a checkpoint leaves such a file with everything still readable; a truncated
    copy fails here and is reported as damaged."""
    try:
        verdict = conn.execute("PRAGMA quick_check(1)").fetchone()
    except sqlite3.DatabaseError as error:
        verdict = (str(error),)
    if not verdict or verdict[0] != "ok":
        size = path.stat().st_size
        raise IndexUnavailable(
            f"the semantic index {path} is truncated ({size} bytes; SQLite: "
            f"{verdict[0] if verdict else 'no answer'}); {purge_hint()}"
        )


def _stored_version(conn: sqlite3.Connection, path: Path) -> int:
    has_meta = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
    if not has_meta:
        raise IndexUnavailable(f"the semantic index {path} has no schema (damaged); {purge_hint()}")
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    try:
        version = int(row[0]) if row else 0
    except (TypeError, ValueError):
        raise IndexUnavailable(
            f"the semantic index {path} has an unreadable schema version; {purge_hint()}"
        ) from None
    if version > SCHEMA_VERSION:
        raise IndexUnavailable(
            f"the semantic index {path} was written by a newer version of project-history-recall "
            f"(schema {version}, this one knows {SCHEMA_VERSION}): update the plugin, or {purge_hint()}"
        )
    return version


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``; rolled back (if still open) on any failure."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Run the numbered steps above the stored version, each in its own transaction."""
    version = _stored_version(conn, path)
    conn.create_function("phr_float16", 1, _float16_blob, deterministic=True)
    for number, statements in MIGRATIONS:
        if number <= version:
            continue
        with _transaction(conn):
            for statement in statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (str(number),),
            )


def _create(path: Path) -> None:
    """A new database with the first schema and a random instance id, renamed into place whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(staging, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    try:
        conn = sqlite3.connect(str(staging), isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")  # readers never wait for an indexer
            conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', '0'), ('instance', ?)",
                (uuid.uuid4().hex,),
            )
            _migrate(conn, staging)
        finally:
            conn.close()
        os.replace(staging, path)
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(str(staging) + suffix).unlink(missing_ok=True)


# --------------------------------------------------------------------------- the store


class IndexStore:
    """One connection to ``embeddings.db`` for the length of a call.

    A store opened read-only on a missing file is empty: every read returns nothing.
    """

    def __init__(
        self, path: Path, conn: sqlite3.Connection | None, writable: bool, outdated: bool = False
    ) -> None:
        self.path = path
        self.conn = conn
        self.writable = writable
        #: Opened read-only on an older schema: nothing is read until an indexer migrates it.
        self.outdated = outdated

    @classmethod
    def open_readonly(cls, path: Path, busy_seconds: float = READ_BUSY_SECONDS) -> IndexStore:
        if not path.exists():
            return cls(path, None, writable=False)
        short = _check_file(path)
        uri = path.resolve().as_uri() + "?mode=ro"
        conn = sqlite3.connect(
            uri, uri=True, timeout=busy_seconds, isolation_level=None, check_same_thread=False
        )
        try:
            if short:
                _whole(conn, path)
            if _stored_version(conn, path) < SCHEMA_VERSION:
                conn.close()  # the next indexer migrates it; until then there is nothing to read
                return cls(path, None, writable=False, outdated=True)
        except BaseException:
            conn.close()
            raise
        return cls(path, conn, writable=False)

    @classmethod
    def open_writable(cls, path: Path, busy_seconds: float = BACKGROUND_BUSY_SECONDS) -> IndexStore:
        """For an indexer that holds :func:`indexer_lock`: creates and migrates as needed."""
        if not path.exists():
            _create(path)
        short = _check_file(path)
        conn = sqlite3.connect(str(path), timeout=busy_seconds, isolation_level=None, check_same_thread=False)
        try:
            if short:  # a checkpoint cut off by a full disk: checkpoint again, now there is room
                _whole(conn, path)
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("PRAGMA synchronous = NORMAL")
            _migrate(conn, path)
        except BaseException:
            conn.close()
            raise
        return cls(path, conn, writable=True)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def __enter__(self) -> IndexStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _meta(self, key: str) -> str:
        if self.conn is None:
            return ""
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else ""

    @property
    def instance(self) -> str:
        """A random id given to this database when it was created: a purge makes a new one."""
        return self._meta("instance")

    @property
    def generation(self) -> int:
        """Bumped by every write batch: an in-memory vector matrix is fresh while this is unchanged."""
        return int(self._meta("generation") or 0)

    # ----------------------------------------------------------------------- reads

    def chunk_hashes(self, fingerprint: str, after_id_by_session: Mapping[str, int]) -> dict[ChunkKey, str]:
        """Stored chunk hashes of these sessions' messages newer than each one's id."""
        if self.conn is None:
            return {}
        wanted = json.dumps([[sid, after] for sid, after in after_id_by_session.items()])
        rows = self.conn.execute(
            "SELECT c.session_id, c.message_id, c.chunk_index, c.content_hash FROM json_each(?) AS wanted "
            # CROSS JOIN keeps the session list outside: SQLite would otherwise scan every chunk of
            # the model and re-read the list for each one (docs/benchmarks.md, "Code choices").
            "CROSS JOIN chunks c ON c.model_fingerprint = ? "
            "AND c.session_id = json_extract(wanted.value, '$[0]') "
            "AND c.message_id > json_extract(wanted.value, '$[1]')",
            (wanted, fingerprint),
        )
        return {(r[0], r[1], r[2]): r[3] for r in rows}

    def skipped_hashes(self, fingerprint: str, after_id_by_session: Mapping[str, int]) -> dict[ChunkKey, str]:
        """Chunks skipped after failing alone, of these sessions' messages newer than each one's id."""
        if self.conn is None or not after_id_by_session:
            return {}
        rows = self.conn.execute(
            "SELECT k.session_id, k.message_id, k.chunk_index, k.content_hash FROM json_each(?) AS wanted "
            "CROSS JOIN skipped k ON k.model_fingerprint = ? "
            "AND k.session_id = json_extract(wanted.value, '$[0]') "
            "AND k.message_id > json_extract(wanted.value, '$[1]')",
            (json.dumps([[sid, after] for sid, after in after_id_by_session.items()]), fingerprint),
        )
        return {(r[0], r[1], r[2]): r[3] for r in rows}

    def skipped_message_ids(self, fingerprint: str, session_ids: Sequence[str]) -> set[int]:
        return self._message_ids("skipped", fingerprint, session_ids)

    def _message_ids(self, table: str, fingerprint: str, session_ids: Sequence[str]) -> set[int]:
        """The message ids one model has rows for in ``table`` (``chunks`` or ``skipped``, a
        constant of this module, never input) among these sessions."""
        if self.conn is None:
            return set()
        rows = self.conn.execute(
            f"SELECT DISTINCT message_id FROM {table} "
            "WHERE model_fingerprint = ? AND session_id IN (SELECT value FROM json_each(?))",
            (fingerprint, json.dumps(list(session_ids))),
        )
        return {r[0] for r in rows}

    def chunk_ids(self, fingerprint: str, session_ids: Sequence[str]) -> list[int]:
        """Row ids of these sessions' chunks under one model, ascending (read from the index alone)."""
        if self.conn is None:
            return []
        rows = self.conn.execute(
            "SELECT id FROM chunks WHERE model_fingerprint = ? "
            "AND session_id IN (SELECT value FROM json_each(?)) ORDER BY id",
            (fingerprint, json.dumps(list(session_ids))),
        )
        return [r[0] for r in rows]

    def chunk_rows(self, fingerprint: str, ids: Sequence[int], block: int = 8192) -> Iterator[list[tuple]]:
        """(id, session_id, message_id, chunk_index, vector blob) of these row ids, in blocks, by id."""
        if self.conn is None:
            return
        for start in range(0, len(ids), block):
            part = ids[start : start + block]
            yield self.conn.execute(
                "SELECT id, session_id, message_id, chunk_index, vector FROM chunks "
                "WHERE id IN (SELECT value FROM json_each(?)) AND model_fingerprint = ? ORDER BY id",
                (json.dumps(list(part)), fingerprint),
            ).fetchall()

    def indexed_message_ids(self, fingerprint: str, session_ids: Sequence[str]) -> set[int]:
        return self._message_ids("chunks", fingerprint, session_ids)

    def model_width(self, fingerprint: str) -> int | None:
        """The vector width recorded for a model when its first vectors were written."""
        if self.conn is None:
            return None
        row = self.conn.execute("SELECT width FROM models WHERE fingerprint = ?", (fingerprint,)).fetchone()
        return int(row[0]) if row else None

    def watermarks(self, recipe: str, session_ids: Sequence[str]) -> dict[str, SessionMark]:
        """Per session: (checked_up_to, active_count, active_id_sum) of its last complete pass."""
        if self.conn is None:
            return {}
        rows = self.conn.execute(
            "SELECT w.session_id, w.checked_up_to, w.active_count, w.active_id_sum "
            "FROM json_each(?) AS wanted CROSS JOIN watermarks w "
            "ON w.recipe = ? AND w.session_id = wanted.value",
            (json.dumps(list(session_ids)), recipe),
        )
        return {r[0]: (r[1], r[2], r[3]) for r in rows}

    # ----------------------------------------------------------------------- writes

    def _require_writable(self) -> sqlite3.Connection:
        if not self.writable or self.conn is None:
            raise RuntimeError("IndexStore opened read-only")
        return self.conn

    def write_chunks(
        self,
        fingerprint: str,
        rows: Sequence[tuple[str, int, int, str]],
        vectors: Any = None,
        stale: Iterable[ChunkKey] = (),
        skipped: Sequence[tuple[ChunkKey, str, str]] = (),
    ) -> None:
        """One batch in one transaction: store (session, message, chunk, hash) with its vector (row i
        of ``vectors``, stored as float16), drop stale keys, and record ``skipped`` chunks
        ((key, hash, reason): failed alone; a stored chunk is no longer skipped).

        A changed chunk gets a new row id (``INSERT OR REPLACE``), so anything derived from the rows
        (the matrix files) sees it as one row gone and one new. Raises :class:`WidthMismatch` when
        the vectors are not as wide as the ones stored for this model.
        """
        import numpy as np

        conn = self._require_writable()
        now = time.time()
        stale = list(stale)
        matrix = np.asarray(vectors if vectors is not None else np.zeros((0, 0)), dtype=VECTOR_DTYPE)
        if rows and (matrix.ndim != 2 or len(matrix) != len(rows) or not matrix.shape[1]):
            raise ValueError(f"{len(rows)} chunks but vectors of shape {matrix.shape}")
        with _transaction(conn):
            if rows:
                width = int(matrix.shape[1])
                stored = self.model_width(fingerprint)
                if stored is None:
                    conn.execute(
                        "INSERT INTO models (fingerprint, width, created_at) VALUES (?, ?, ?)",
                        (fingerprint, width, now),
                    )
                elif stored != width:
                    raise width_mismatch(self.path, stored, width)
                conn.executemany(
                    "INSERT OR REPLACE INTO chunks (session_id, message_id, chunk_index, content_hash, "
                    "model_fingerprint, vector, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        (s, m, i, h, fingerprint, v.tobytes(), now)
                        for (s, m, i, h), v in zip(rows, matrix, strict=True)
                    ],
                )
            conn.executemany(
                "DELETE FROM chunks WHERE session_id = ? AND message_id = ? AND chunk_index = ? "
                "AND model_fingerprint = ?",
                [(*key, fingerprint) for key in stale],
            )
            conn.executemany(
                "DELETE FROM skipped WHERE session_id = ? AND message_id = ? AND chunk_index = ? "
                "AND model_fingerprint = ?",
                [(s, m, i, fingerprint) for s, m, i, _ in rows] + [(*key, fingerprint) for key in stale],
            )
            conn.executemany(
                "INSERT OR REPLACE INTO skipped (session_id, message_id, chunk_index, model_fingerprint, "
                "content_hash, reason, skipped_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(*key, fingerprint, digest, reason, now) for key, digest, reason in skipped],
            )
            conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")

    def set_watermarks(self, recipe: str, marks: Mapping[str, SessionMark]) -> None:
        """Record what a complete pass has checked (only the sessions whose mark moved)."""
        if not marks:
            return
        conn = self._require_writable()
        with _transaction(conn):
            conn.executemany(
                "INSERT OR REPLACE INTO watermarks "
                "(recipe, session_id, checked_up_to, active_count, active_id_sum) VALUES (?, ?, ?, ?, ?)",
                [(recipe, sid, *mark) for sid, mark in marks.items()],
            )


def delete_sessions(path: Path, session_ids: Sequence[str]) -> int:
    """Delete every stored vector, skipped chunk and watermark of these sessions, for every model,
    in one transaction (``forget``, issue 32), and the matrix files derived from the database
    (``matrix/``: they hold copies of the vectors; the next search rebuilds them). The caller holds
    :func:`indexer_lock`, so no indexer writes a batch of them afterwards. Returns the chunks
    deleted; no database is nothing to delete."""
    import shutil

    removed = 0
    if path.exists():
        store = IndexStore.open_writable(path)
        try:
            conn = store._require_writable()
            wanted = json.dumps(list(session_ids))
            conn.execute("PRAGMA secure_delete = ON")  # deleted rows zeroed (some builds default it off)
            with _transaction(conn):
                removed = conn.execute(
                    "DELETE FROM chunks WHERE session_id IN (SELECT value FROM json_each(?))", (wanted,)
                ).rowcount
                for table in ("skipped", "watermarks"):
                    conn.execute(
                        f"DELETE FROM {table} WHERE session_id IN (SELECT value FROM json_each(?))",
                        (wanted,),
                    )
                # A matrix in memory (another Hermes process) is fresh only while this is unchanged.
                conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")
            if removed:  # the deleted rows' bytes leave the file and its WAL too
                try:
                    conn.execute("VACUUM")
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                except sqlite3.OperationalError:  # a reader in the way: the rows are gone all the same
                    pass
        finally:
            store.close()
    derived = path.parent / "matrix"
    if derived.is_dir():
        shutil.rmtree(derived, ignore_errors=True)
    return removed


def purge(path: Path) -> bool:
    """Delete every stored vector (``disable --purge``): the database, its WAL files and the
    matrix files derived from it (``matrix/`` next to it)."""
    import shutil

    removed = False
    for suffix in ("", "-wal", "-shm"):
        target = Path(str(path) + suffix)
        if target.exists():
            target.unlink()
            removed = True
    derived = path.parent / "matrix"
    if derived.is_dir():
        shutil.rmtree(derived, ignore_errors=True)
        removed = True
    return removed


# --------------------------------------------------------------------------- the indexer lock


#: How long an indexer keeps trying for the lock before leaving the work to its holder: long
#: enough that a status probe holding it for microseconds never makes an indexer give up.
LOCK_RETRY_SECONDS = 0.25


class UnsafeLockFile(Exception):
    """A lock file's path is a symbolic link (planted, or left by something else): the plugin never
    follows it, as it would create or lock a file outside its folder. The message says what to do."""


def open_lock_file(path: Path, flags: int = os.O_RDWR | os.O_CREAT) -> int:
    """``path`` opened as a lock file (created 0600): never through a symbolic link
    (``O_NOFOLLOW``), so a link planted there cannot make the plugin create or touch a file
    elsewhere; :class:`UnsafeLockFile` says so instead."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW, 0o600)
    except OSError as error:
        if error.errno == errno.ELOOP or os.path.islink(path):
            raise UnsafeLockFile(
                f"{path} is a symbolic link, which the plugin does not follow: remove it "
                "(it is recreated as a plain file)"
            ) from None
        raise


@contextmanager
def file_lock(path: Path, wait_seconds: float) -> Iterator[bool]:
    """An exclusive ``flock`` on ``path`` (created 0600, never through a symbolic link:
    :func:`open_lock_file`), tried for up to ``wait_seconds``.

    Yields whether it was taken. Per open file description, so two threads of one process
    exclude each other too.
    """
    fd = open_lock_file(path)
    try:
        give_up = time.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= give_up:
                    yield False
                    return
                time.sleep(0.02)
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def indexer_lock(data_dir: Path, wait_seconds: float = LOCK_RETRY_SECONDS) -> Iterator[bool]:
    """One indexer at a time across processes, so two Hermes windows never embed the same text twice.

    Yields whether the lock was taken within ``wait_seconds``; a process that does not get it
    leaves the work to the one that has it. An ``OSError`` (a read-only folder) propagates to
    the caller's boundary.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(data_dir / "indexer.lock", wait_seconds) as taken:
        yield taken


def indexer_busy(data_dir: Path) -> bool:
    """Is some indexer (of this process or another) holding the lock right now?

    Probed with a shared lock, which never blocks another probe and is held for microseconds,
    which an indexer's :data:`LOCK_RETRY_SECONDS` outlasts.
    """
    path = data_dir / "indexer.lock"
    try:
        fd = open_lock_file(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except UnsafeLockFile:
        return False  # no indexer runs under a lock it cannot open
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
