"""Where a folder really is, and which git repository it is in, as git decides it.

Hermes's CLI records a cwd but no repo root, so CLI conversations would never form automatic
repo projects without asking git. This module answers, deterministically:

- :func:`real_path`: a POSIX path with its symlinks resolved where they exist (git reports
  resolved paths, and a symlink inside a project can point into another one).
- :meth:`GitProbe.marker`: the nearest folder, from a cwd upwards, that holds a ``.git`` entry.
  Git's own discovery walks the same way, so every folder below one marker gets git's answer for
  that marker: 5,000 cwds in one repository cost one ``git`` run, and a cwd with no marker above
  it is in no repository without running git at all.
- :meth:`GitProbe.answers`: git's answer per marker (``rev-parse --git-common-dir
  --show-toplevel``), cached in memory and persisted in ``git_roots.db`` in the plugin's data
  folder (one row per marker), so a new process does not ask again. An answer stays valid while
  the marker's ``.git`` entry is the same (inode and mtime; size too for a worktree's ``.git``
  file) and for at most :data:`ANSWER_TTL_SECONDS`. The store is a cache: any failure of it is logged
  and ignored, never failing a search.

Git runs at most :data:`PROBE_WORKERS` at a time, in one pool shared by the process. A caller
waits for the markers it needs for at most a budget; answers that arrive later are kept for the
next call, and :attr:`GitProbe.generation` changes so cached scopes know to look again.

Filesystem facts (real paths, markers) are remembered for :data:`FACTS_TTL_SECONDS`, then looked
up again: a new symlink or ``git init`` is seen within that time.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import stat
import subprocess
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from .. import attribution

logger = logging.getLogger(__name__)

GIT_TIMEOUT_SECONDS = 1.5
FILL_BUDGET_SECONDS = 3.0  # how long a search waits for git about other conversations' folders
FACTS_TTL_SECONDS = 60.0
ANSWER_TTL_SECONDS = 24 * 3600.0
PROBE_WORKERS = 4
STORE_NAME = "git_roots.db"
STORE_VERSION = 1
# Variables that would make every folder look like one repository, or none.
_GIT_ENV_DROPPED = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_INDEX_FILE", "GIT_CEILING_DIRECTORIES")

NO_REPO = ("", "")


def _git(cwd: str, *args: str) -> str | None:
    """``git -C cwd ...``: stdout without its last line break (a path may end in a space); "" when
    git said no (not a repository, ...); None when git gave no answer (not installed, timed out).
    Never takes a lock in the repo."""
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV_DROPPED}
    env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0")
    try:
        result = subprocess.run(
            ["git", "-C", cwd, *args],
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if result.returncode != 0:
        return ""
    return result.stdout[:-1] if result.stdout.endswith("\n") else result.stdout


def _run_git(cwd: str, *args: str) -> str:
    return _git(cwd, *args) or ""


def _probe_repo_roots(cwd: str) -> tuple[str, str] | None:
    """(common root, worktree root): the main repository folding linked worktrees (what Hermes
    stores), and the top of the checkout the cwd is in (differs in a linked worktree).
    ``NO_REPO`` when git says it is in none; None when git gave no answer (nothing is learnt)."""
    out = _git(cwd, "rev-parse", "--path-format=absolute", "--git-common-dir", "--show-toplevel")
    if out is None:
        return None
    lines = out.split("\n")
    if len(lines) != 2:  # no repository, or a path with a line break in it: ask one at a time
        git_dir = _git(cwd, "rev-parse", "--path-format=absolute", "--git-common-dir")
        top = _git(cwd, "rev-parse", "--path-format=absolute", "--show-toplevel")
        if git_dir is None or top is None:
            return None
        if not git_dir or not top:
            return NO_REPO
        lines = [git_dir, top]
    git_dir, toplevel = os.path.realpath(lines[0]), os.path.realpath(lines[1])
    if os.path.basename(git_dir) == ".git":
        return os.path.dirname(git_dir), toplevel
    return toplevel, toplevel


def git_branch(cwd: str) -> str:
    branch = _run_git(cwd, "branch", "--show-current") or _run_git(cwd, "rev-parse", "--short", "HEAD")
    return branch.strip()


def is_host_path(path: str) -> bool:
    """An absolute path of this machine's kind (POSIX here, Windows on Windows)."""
    return bool(path) and attribution.is_windows_path(path) == (os.name == "nt") and os.path.isabs(path)


def real_path(path: str | None) -> str:
    """The path with its symlinks resolved as far as it exists; other paths unchanged.

    Only absolute paths of this host's kind are resolved (a Windows path recorded on a POSIX
    host names no folder here, and :mod:`attribution` normalises it lexically). ``..`` after a
    symlink is resolved physically, as the kernel does.
    """
    value = path or ""
    if not is_host_path(value):
        return value
    try:
        return os.path.realpath(value)
    except (OSError, ValueError):  # ValueError: an embedded NUL
        return value


def registered_folders(path: str) -> list[str]:
    """The folders a project folder recorded by Hermes's ``projects_db`` names, as real paths.

    ``projects_db`` strips the path it registers, so ``/work/shop `` is recorded as
    ``/work/shop``. When the recorded folder exists it is the one meant (a folder beside it
    whose name only adds whitespace stays outside: tests/test_hostile.py); when it does not,
    the folders beside it that are its name plus trailing whitespace are (issue 31)."""
    value = path or ""
    if not is_host_path(value) or os.path.lexists(value):
        return [real_path(value)]
    parent, name = os.path.split(value)
    try:
        spelled = sorted(
            entry.path
            for entry in os.scandir(parent)
            if entry.name != name and entry.name.rstrip() == name and entry.is_dir()
        )
    except (OSError, ValueError):
        spelled = []
    return [real_path(folder) for folder in spelled] or [real_path(value)]


def _git_entry_signature(marker: str) -> str:
    """What must stay the same for git's answer about ``marker`` to stay true ("" if gone)."""
    try:
        st = os.lstat(os.path.join(marker, ".git"))
    except (OSError, ValueError):
        return ""
    if stat.S_ISDIR(st.st_mode):
        # mtime: a repository re-created in place may get the same inode; git's own commands
        # touch .git too, which only costs one more run of git for that repository.
        return f"d:{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}"
    # A linked worktree or a submodule: a "gitdir: ..." file; its content decides.
    return f"f:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


@dataclass
class Answer:
    signature: str
    common: str
    worktree: str
    probed_at: float  # wall clock, so it survives the process in git_roots.db

    def valid(self, signature: str, now: float) -> bool:
        return (
            bool(signature) and signature == self.signature and 0 <= now - self.probed_at < ANSWER_TTL_SECONDS
        )

    @property
    def roots(self) -> tuple[str, str]:
        return (self.common, self.worktree)


# --------------------------------------------------------------------------- the persisted answers


def _open_store(path: Path) -> sqlite3.Connection:
    """git_roots.db, created 0600 if missing; raises sqlite3.Error/OSError on any trouble.

    A file that is not a database (damaged) is only a cache: it is replaced.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    for attempt in (1, 2):
        if not path.exists():
            with contextlib.suppress(FileExistsError):
                os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
        conn = sqlite3.connect(str(path), timeout=1.0, isolation_level=None, check_same_thread=False)
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] != STORE_VERSION:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.execute("DROP TABLE IF EXISTS answers")
                    conn.execute(
                        "CREATE TABLE answers (marker TEXT PRIMARY KEY, signature TEXT NOT NULL, "
                        "common TEXT NOT NULL, worktree TEXT NOT NULL, probed_at REAL NOT NULL)"
                    )
                    conn.execute(f"PRAGMA user_version = {STORE_VERSION}")
                    conn.execute("COMMIT")
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                    raise
            return conn
        except sqlite3.DatabaseError as error:
            conn.close()
            if attempt == 2 or isinstance(error, sqlite3.OperationalError):
                raise
            logger.warning("%s is damaged (%s); starting it again", path, error)
            path.unlink(missing_ok=True)
        except BaseException:
            conn.close()
            raise
    raise AssertionError("unreachable")


def _write_answers(conn: sqlite3.Connection, answers: dict[str, Answer]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany(
            "INSERT OR REPLACE INTO answers (marker, signature, common, worktree, probed_at) "
            "VALUES (?, ?, ?, ?, ?)",
            [(m, a.signature, a.common, a.worktree, a.probed_at) for m, a in answers.items()],
        )
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise


class _StoreSession:
    """git_roots.db for one call: opened on first use, at most once, closed at the end."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.path_key = str(path) if path is not None else ""
        self._conn: sqlite3.Connection | None = None
        self._failed = False

    def connection(self, create: bool) -> sqlite3.Connection | None:
        if self._conn is None and not self._failed and self.path is not None:
            if not create and not self.path.exists():
                return None
            try:
                self._conn = _open_store(self.path)
            except BaseException:
                self._failed = True  # one failure per call is enough to log
                raise
        return self._conn

    def __enter__(self) -> _StoreSession:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()


class GitProbe:
    """The process's knowledge of folders and repositories; thread-safe, shared by every call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._epoch = -1
        self._real: dict[str, str] = {}
        self._registered: dict[str, list[str]] = {}
        self._markers: dict[str, str] = {}
        self._answers: dict[str, Answer] = {}
        self._persisted: dict[str, set[str]] = {}  # store path -> markers written or read there
        self._inflight: dict[str, Future] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._warned: set[str] = set()  # stores whose failure was logged at WARNING once
        self.generation = 0  # changes whenever an answer is learnt or forgotten

    def _warn_once(self, path: Path | None, message: str) -> None:
        if str(path) not in self._warned:
            self._warned.add(str(path))
            logger.warning(message, path, exc_info=True)
        else:
            logger.debug(message, path, exc_info=True)

    # -- filesystem facts
    def facts_epoch(self) -> int:
        """Changes every FACTS_TTL_SECONDS; real paths and markers are looked up again then."""
        epoch = int(time.monotonic() // FACTS_TTL_SECONDS)
        if epoch != self._epoch:
            with self._lock:
                if epoch != self._epoch:
                    self._real.clear()
                    self._registered.clear()
                    self._markers.clear()
                    self._epoch = epoch
        return self._epoch

    def real(self, path: str | None) -> str:
        value = path or ""
        known = self._real.get(value)
        if known is None:
            known = self._real[value] = real_path(value)
        return known

    def registered(self, path: str | None) -> list[str]:
        """:func:`registered_folders`, remembered for the facts epoch like :meth:`real`."""
        value = path or ""
        known = self._registered.get(value)
        if known is None:
            known = self._registered[value] = registered_folders(value)
        return known

    def marker(self, folder: str) -> str | None:
        """The nearest folder from ``folder`` (a real path) up holding ``.git``; "" if none;
        None when ``folder`` is no path of this host, or nothing of it exists (git cannot run
        there). A folder removed since (a session's scratch subfolder) is looked up from its
        nearest existing ancestor: the repository that held it still holds its recorded path."""
        known = self._markers.get(folder)
        if known is not None:
            return known
        if not is_host_path(folder):
            return None
        current = folder
        while not os.path.isdir(current):
            parent = os.path.dirname(current)
            if parent == current:
                return None
            current = parent
        walked = [folder] if current != folder else []
        while True:
            known = self._markers.get(current)
            if known is not None:
                break
            walked.append(current)
            if _git_entry_signature(current):
                known = current
                break
            parent = os.path.dirname(current)
            if parent == current:
                known = ""
                break
            current = parent
        for path in walked:
            self._markers[path] = known
        return known

    # -- git's answers
    def _known(self, marker: str, now: float) -> Answer | None:
        answer = self._answers.get(marker)
        if answer is not None and answer.valid(_git_entry_signature(marker), now):
            return answer
        return None

    def _learn(self, marker: str, roots: tuple[str, str] | None) -> None:
        if roots is None:  # git did not answer: ask again next time, remember nothing
            logger.debug("git gave no answer for %s", marker)
            return
        answer = Answer(_git_entry_signature(marker), roots[0], roots[1], time.time())
        with self._lock:
            self._answers[marker] = answer
            for written in self._persisted.values():
                written.discard(marker)
            self.generation += 1

    def _probe(self, marker: str) -> None:
        try:
            self._learn(marker, _probe_repo_roots(marker))
        finally:
            with self._lock:
                self._inflight.pop(marker, None)

    def _submit(self, marker: str) -> Future:
        with self._lock:
            future = self._inflight.get(marker)
            if future is None:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(PROBE_WORKERS, thread_name_prefix="phr-git-probe")
                future = self._inflight[marker] = self._pool.submit(self._probe, marker)
        return future

    def _probe_now(self, marker: str) -> None:
        """Ask git in this thread (or wait for the probe already running for ``marker``)."""
        with self._lock:
            running = self._inflight.get(marker)
        if running is not None:
            running.result()
        else:
            self._learn(marker, _probe_repo_roots(marker))

    def answers(
        self,
        markers: Iterable[str],
        *,
        store: Path | None = None,
        first: Iterable[str] = (),
        budget_seconds: float = FILL_BUDGET_SECONDS,
    ) -> dict[str, tuple[str, str]]:
        """Git's (common root, worktree root) per marker, as far as known within the budget.

        ``first`` are asked in this thread and always answered (the current conversation's
        folder decides what the scope is); the others get ``budget_seconds`` together, and a
        marker missing from the result is still being probed in the background. ``store``
        (git_roots.db) is opened at most once, to read it the first time and to add new answers.
        """
        first = set(first)
        wanted = set(markers) | first
        with _StoreSession(store) as persisted:
            now = time.time()
            found = {m: a.roots for m in wanted if (a := self._known(m, now))}
            if len(found) < len(wanted) and persisted.path_key not in self._persisted:
                self._load(persisted)
                found.update({m: a.roots for m in wanted - found.keys() if (a := self._known(m, now))})
            for marker in first - found.keys():
                self._probe_now(marker)
            missing = [self._submit(m) for m in wanted - found.keys() - first]
            if missing:
                wait(missing, timeout=max(0.0, budget_seconds))
            now = time.time()
            found.update({m: a.roots for m in wanted - found.keys() if (a := self._known(m, now))})
            self._save(persisted, found.keys())
        return found

    # -- git_roots.db
    def _load(self, persisted: _StoreSession) -> None:
        try:
            conn = persisted.connection(create=False)
            if conn is None:
                return
            rows = conn.execute("SELECT marker, signature, common, worktree, probed_at FROM answers")
            loaded = {row[0]: Answer(*row[1:]) for row in rows}
        except (sqlite3.Error, OSError):
            self._warn_once(persisted.path, "could not read %s; asking git again")
            return
        with self._lock:
            for marker, answer in loaded.items():
                mine = self._answers.get(marker)
                if mine is None or mine.probed_at < answer.probed_at:
                    self._answers[marker] = answer
            self._persisted[persisted.path_key] = set(loaded)

    def _save(self, persisted: _StoreSession, markers: Iterable[str]) -> None:
        if persisted.path is None:
            return
        with self._lock:
            written = self._persisted.setdefault(persisted.path_key, set())
            fresh = {m: self._answers[m] for m in markers if m not in written and m in self._answers}
        if not fresh:
            return
        try:
            conn = persisted.connection(create=True)
            if conn is not None:
                _write_answers(conn, fresh)
        except (sqlite3.Error, OSError):
            logger.warning(
                "could not write %s; git will be asked again next time", persisted.path, exc_info=True
            )
            return
        with self._lock:
            written.update(fresh)

    # -- one folder, now (a move's target, the CLI's current folder)
    def repo_roots(self, cwd: str, store: Path | None = None) -> tuple[str, str]:
        self.facts_epoch()
        marker = self.marker(self.real(cwd))
        if not marker:
            return NO_REPO
        return self.answers((), store=store, first=[marker]).get(marker, NO_REPO)

    def common_repo_root(self, cwd: str, store: Path | None = None) -> str:
        return self.repo_roots(cwd, store)[0]

    def close(self) -> None:
        """Stop the probe threads (a probe already running finishes on its own, bounded by git's
        timeout)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
