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
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from .hermes_db import ChunkKey

READ_BUSY_SECONDS = 0.5  # a search never waits longer than this for a writer of ours or anyone's
INLINE_BUSY_SECONDS = 0.5  # inline indexing during a search
BACKGROUND_BUSY_SECONDS = 15.0  # the background indexer and the CLI's `index` can wait

PURGE_HINT = "run `hermes project-history disable --purge`, then `hermes project-history enable`"

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
)
SCHEMA_VERSION = MIGRATIONS[-1][0]


class IndexUnavailable(Exception):
    """embeddings.db cannot be used as it is; the message says what to do."""


# --------------------------------------------------------------------------- file checks


def _check_file(path: Path) -> None:
    """Refuse a file that is not a whole SQLite database before SQLite reads garbage pages.

    The header's page count (valid when its change counter matches "version-valid-for") times
    the page size must fit in the file: a half-truncated copy fails here, at no cost.
    """
    size = path.stat().st_size
    if size == 0:
        raise IndexUnavailable(f"the semantic index {path} is empty (damaged); {PURGE_HINT}")
    with path.open("rb") as handle:
        header = handle.read(100)
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        raise IndexUnavailable(f"the semantic index {path} is not a SQLite database (damaged); {PURGE_HINT}")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    if header[24:28] == header[92:96] and pages * page_size > size:
        raise IndexUnavailable(
            f"the semantic index {path} is truncated ({size} of {pages * page_size} bytes); {PURGE_HINT}"
        )


def _stored_version(conn: sqlite3.Connection, path: Path) -> int:
    has_meta = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
    if not has_meta:
        raise IndexUnavailable(f"the semantic index {path} has no schema (damaged); {PURGE_HINT}")
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    try:
        version = int(row[0]) if row else 0
    except (TypeError, ValueError):
        raise IndexUnavailable(
            f"the semantic index {path} has an unreadable schema version; {PURGE_HINT}"
        ) from None
    if version > SCHEMA_VERSION:
        raise IndexUnavailable(
            f"the semantic index {path} was written by a newer version of project-history-recall "
            f"(schema {version}, this one knows {SCHEMA_VERSION}): update the plugin, or {PURGE_HINT}"
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

    def __init__(self, path: Path, conn: sqlite3.Connection | None, writable: bool) -> None:
        self.path = path
        self.conn = conn
        self.writable = writable

    @classmethod
    def open_readonly(cls, path: Path, busy_seconds: float = READ_BUSY_SECONDS) -> IndexStore:
        if not path.exists():
            return cls(path, None, writable=False)
        _check_file(path)
        uri = path.resolve().as_uri() + "?mode=ro"
        conn = sqlite3.connect(
            uri, uri=True, timeout=busy_seconds, isolation_level=None, check_same_thread=False
        )
        try:
            if _stored_version(conn, path) < SCHEMA_VERSION:
                conn.close()  # the next indexer migrates it; until then there is nothing to read
                return cls(path, None, writable=False)
        except BaseException:
            conn.close()
            raise
        return cls(path, conn, writable=False)

    @classmethod
    def open_writable(cls, path: Path, busy_seconds: float = BACKGROUND_BUSY_SECONDS) -> IndexStore:
        """For an indexer that holds :func:`indexer_lock`: creates and migrates as needed."""
        if not path.exists():
            _create(path)
        _check_file(path)
        conn = sqlite3.connect(str(path), timeout=busy_seconds, isolation_level=None, check_same_thread=False)
        try:
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
            # the model and re-read the list for each one (34 s for 10k chunks, measured).
            "CROSS JOIN chunks c ON c.model_fingerprint = ? "
            "AND c.session_id = json_extract(wanted.value, '$[0]') "
            "AND c.message_id > json_extract(wanted.value, '$[1]')",
            (wanted, fingerprint),
        )
        return {(r[0], r[1], r[2]): r[3] for r in rows}

    def chunk_vectors(
        self, fingerprint: str, session_ids: Sequence[str]
    ) -> list[tuple[str, int, int, bytes]]:
        """(session_id, message_id, chunk_index, vector blob) of these sessions under one model."""
        if self.conn is None:
            return []
        return self.conn.execute(
            "SELECT session_id, message_id, chunk_index, vector FROM chunks "
            "WHERE model_fingerprint = ? AND session_id IN (SELECT value FROM json_each(?)) "
            "ORDER BY message_id, chunk_index",
            (fingerprint, json.dumps(list(session_ids))),
        ).fetchall()

    def indexed_message_ids(self, fingerprint: str, session_ids: Sequence[str]) -> set[int]:
        if self.conn is None:
            return set()
        rows = self.conn.execute(
            "SELECT DISTINCT message_id FROM chunks "
            "WHERE model_fingerprint = ? AND session_id IN (SELECT value FROM json_each(?))",
            (fingerprint, json.dumps(list(session_ids))),
        )
        return {r[0] for r in rows}

    # ----------------------------------------------------------------------- writes

    def write_chunks(
        self,
        fingerprint: str,
        rows: Sequence[tuple[str, int, int, str, bytes]],
        stale: Iterable[ChunkKey] = (),
    ) -> None:
        """One batch in one transaction: upsert (session, message, chunk, hash, vector), drop stale keys."""
        if not self.writable or self.conn is None:
            raise RuntimeError("IndexStore opened read-only")
        now = time.time()
        with _transaction(self.conn):
            self.conn.executemany(
                "INSERT INTO chunks (session_id, message_id, chunk_index, content_hash, model_fingerprint, "
                "vector, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(session_id, message_id, chunk_index, model_fingerprint) DO UPDATE SET "
                "content_hash = excluded.content_hash, vector = excluded.vector, "
                "created_at = excluded.created_at",
                [(s, m, i, h, fingerprint, v, now) for s, m, i, h, v in rows],
            )
            self.conn.executemany(
                "DELETE FROM chunks WHERE session_id = ? AND message_id = ? AND chunk_index = ? "
                "AND model_fingerprint = ?",
                [(*key, fingerprint) for key in stale],
            )
            self.conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")


def purge(path: Path) -> bool:
    """Delete every stored vector (``disable --purge``): the database and its WAL files."""
    removed = False
    for suffix in ("", "-wal", "-shm"):
        target = Path(str(path) + suffix)
        if target.exists():
            target.unlink()
            removed = True
    return removed


# --------------------------------------------------------------------------- the indexer lock


#: How long an indexer keeps trying for the lock before leaving the work to its holder: long
#: enough that a status probe holding it for microseconds never makes an indexer give up.
LOCK_RETRY_SECONDS = 0.25


@contextmanager
def indexer_lock(data_dir: Path, wait_seconds: float = LOCK_RETRY_SECONDS) -> Iterator[bool]:
    """One indexer at a time across processes, so two Hermes windows never embed the same text twice.

    Yields whether the lock was taken within ``wait_seconds``; a process that does not get it
    leaves the work to the one that has it. An ``OSError`` (a read-only folder) propagates to
    the caller's boundary.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / "indexer.lock", os.O_RDWR | os.O_CREAT, 0o600)
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


def indexer_busy(data_dir: Path) -> bool:
    """Is some indexer (of this process or another) holding the lock right now?

    Probed with a shared lock, which never blocks another probe and is held for microseconds,
    which an indexer's :data:`LOCK_RETRY_SECONDS` outlasts.
    """
    path = data_dir / "indexer.lock"
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
