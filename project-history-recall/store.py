"""What Hermes keeps, as this plugin reads it: its home and config (:class:`HermesEnv`), and its
databases, ``state.db`` and ``projects.db`` (:class:`HermesDB`), read-only; fenced apart at the
bottom, the plugin's one write to Hermes's data, the move's ``update_session_cwd`` (spec §二's
``store.py``, §八).

:class:`HermesEnv` is resolved at call time from ``get_hermes_home()``, so a profile switch or a
test's ``HERMES_HOME`` is honoured without a restart; a call takes one snapshot and passes it down.

:class:`HermesDB` opens ``state.db`` once per call, read-only (``mode=ro`` on a URI-encoded path,
so a ``#`` or ``?`` in ``HERMES_HOME`` cannot open a different, writable file), and
``projects.db`` at most once, on first use. Reads stay short and in autocommit, so a Hermes
writer is never held up by us.

The schema is detected, not assumed: 0.19.0 has no ``sessions.hidden`` and inline FTS tables;
upstream adds ``hidden``, ``messages.display_kind`` and external-content FTS with more columns.
A ``state.db`` without ``sessions``/``messages`` is no session database: Hermes 0.19 creates one
holding only ``async_delegations`` the first time ``model_tools`` is imported (spec §七 ``no_db``).
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import os
import shlex
import sqlite3
import string
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

BUSY_TIMEOUT_SECONDS = 5.0
# Sources that are not a person's conversation (as in Hermes's own session_search).
HIDDEN_SOURCES = ("subagent", "tool")
MULTIMODAL_PREFIX = "\x00json:"

ChunkKey = tuple[str, int, int]  # (session_id, message_id, chunk_index)
#: A session's active messages: (newest id, count, sum of ids). Hermes appends messages and only
#: ever flips ``active`` (rewind, restore_rewound, compaction), so a change to any of the three
#: is a change to the session's live history.
SessionMark = tuple[int, int, int]
#: (count, id sum) of a session with no active messages (``HermesDB.session_totals`` leaves it out).
EMPTY_TOTALS = (0, 0)


class NoSessionDatabase(Exception):
    """state.db is missing, or holds no sessions table yet (spec §七 ``no_db``)."""


#: What a search says when another connection held state.db locked past the keyword deadline
#: (a Hermes write on a filesystem without WAL, a VACUUM, a backup tool): not a failure.
STATE_BUSY = (
    "The history database (state.db) is busy: another program holds a lock on it, so nothing "
    "could be read in time; try again in a moment"
)
STATE_BUSY_REASON = (
    "the history database (state.db) is busy (locked by another program); try again in a moment"
)


def is_busy(error: BaseException) -> bool:
    """Is this SQLite's answer to a lock another connection holds ("database is locked", busy)?"""
    if not isinstance(error, sqlite3.OperationalError):
        return False
    text = str(error).casefold()
    return "locked" in text or "busy" in text


# =========================================================================== the environment

PLUGIN_DIR_NAME = "project-history-recall"


def hermes_home() -> Path:
    from hermes_constants import get_hermes_home

    return Path(get_hermes_home())


def install_command(*packages: str) -> str:
    """The exact command that installs ``packages`` for the Python running Hermes (not any other)."""
    return " ".join(shlex.quote(part) for part in (sys.executable, "-m", "pip", "install", *packages))


def hermes_program() -> str:
    """The command the user runs Hermes with: ``hermes``, or ``hermesx`` for the 0.20 build that
    names its entry point so. The running program when it is one of Hermes's console scripts
    (``hermes_cli.main:main``), else the one such script installed, else ``hermes``."""
    scripts = _hermes_scripts()
    ran = os.path.basename(sys.argv[0] if sys.argv and sys.argv[0] else "")
    ran = ran.removesuffix(".exe")
    if ran in scripts:
        return ran
    if "hermes" in scripts or not scripts:
        return "hermes"
    return scripts[0]


def _hermes_scripts() -> tuple[str, ...]:
    try:
        from importlib.metadata import entry_points

        return tuple(
            sorted(
                {
                    entry.name
                    for entry in entry_points(group="console_scripts")
                    if entry.value.replace(" ", "") == "hermes_cli.main:main"
                }
            )
        )
    except Exception:
        return ()


def command_line(*args: str, profile: str | None = None) -> str:
    """A Hermes command that pastes into a shell as it is: the program the user runs, ``-p`` and
    the profile when it is not the default one, then ``args``, every word quoted where a shell
    would read it otherwise (so a folder or project name can never run as a command)."""
    if profile is None:
        profile = _active_profile_name()
    words = [hermes_program()]
    if profile and profile not in ("default", "custom"):
        words += ["-p", profile]
    return " ".join(shlex.quote(word) for word in (*words, *args))


def hint(*args: str) -> str:
    """:func:`command_line` as a message shows it: between backticks."""
    return f"`{command_line(*args)}`"


def _active_profile_name() -> str:
    try:
        from hermes_cli.profiles import get_active_profile_name

        return get_active_profile_name()
    except Exception:
        return "default"


def _load_config() -> dict[str, Any]:
    """Hermes's config.yaml as Hermes reads it (mtime-cached by Hermes, so cheap per call).

    The plugin only reads it, so Hermes's read-only accessor is used where it exists: it skips
    the defensive deep copy, which is most of a keyword search's own time otherwise.
    """
    try:
        from hermes_cli import config as hermes_config

        load = getattr(hermes_config, "load_config_readonly", None) or hermes_config.load_config
        return load() or {}
    except Exception:
        logger.warning("could not load config.yaml; using defaults", exc_info=True)
        return {}


@dataclass
class HermesEnv:
    """One snapshot of where Hermes keeps things and how the plugin is configured."""

    home: Path
    profile: str
    config: dict[str, Any] = field(repr=False)  # Hermes's cached dict: never modify it

    @classmethod
    def current(cls) -> HermesEnv:
        return cls(home=hermes_home(), profile=_active_profile_name(), config=_load_config())

    # -- files
    @property
    def state_db(self) -> Path:
        return self.home / "state.db"

    @property
    def projects_db(self) -> Path:
        return self.home / "projects.db"

    @property
    def data_dir(self) -> Path:
        """``$HERMES_HOME/plugins/project-history-recall``: where the spec keeps our own files."""
        return self.home / "plugins" / PLUGIN_DIR_NAME

    @property
    def index_path(self) -> Path:
        return self.data_dir / "embeddings.db"

    @property
    def consent_path(self) -> Path:
        return self.data_dir / "consent.json"

    # -- config
    @cached_property
    def settings(self):
        """The plugin's settings; every rejected value is logged once per snapshot."""
        from .config_schema import PLUGIN_KEY, parse_settings

        plugins = self.config.get("plugins") or {}
        if not isinstance(plugins, dict):
            plugins = {}
        entries = plugins.get("entries") or {}
        entry = entries.get(PLUGIN_KEY) if isinstance(entries, dict) else None
        settings = parse_settings(
            plugins.get(PLUGIN_KEY), entry.get("settings") if isinstance(entry, dict) else None
        )
        for problem in settings.problems:
            logger.warning("project-history-recall config: %s", problem)
        return settings

    def api_key(self) -> str | None:
        """``PROJECT_HISTORY_EMBEDDING_API_KEY`` from the environment, else ``$HERMES_HOME/.env``.

        ``hermes`` loads .env at start-up, but a process that only imports ``model_tools`` does
        not. The key goes to the provider and nowhere else: never logged, stored or echoed.
        """
        from .config_schema import API_KEY_ENV

        key = os.environ.get(API_KEY_ENV, "").strip()
        if key:
            return key
        env_file = self.home / ".env"
        if not env_file.exists():
            return None
        try:
            from dotenv import dotenv_values

            return (dotenv_values(env_file).get(API_KEY_ENV) or "").strip() or None
        except Exception:
            logger.warning("could not read %s", env_file, exc_info=True)
            return None

    # -- folders
    def excluded_roots(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Git roots that are never an automatic repo project, as on the desktop
        (``_is_repo_junk``): the home folder itself, and ``HERMES_HOME`` with everything under it
        (a repository in ``$HERMES_HOME/plugins/`` is a plugin, not a project). As (exact roots,
        trees); :mod:`projects.scope` adds their real paths."""
        return (str(Path.home()),), (str(self.home),)

    def home_folder(self) -> str:
        """Where "move to Home" puts a conversation: ``terminal.cwd`` if it names a folder, else ~."""
        terminal = self.config.get("terminal") or {}
        configured = str((terminal.get("cwd") if isinstance(terminal, dict) else "") or "").strip()
        if configured and configured not in (".", "auto", "cwd"):
            candidate = Path(configured).expanduser()
            if candidate.is_dir():
                return str(candidate.resolve())
        return str(Path.home())


# =========================================================================== the databases


def replace_private_file(path: Path, text: str) -> None:
    """Replace one of the plugin's own small files in its data folder (:attr:`HermesEnv.data_dir`:
    consent, the forgotten conversations) whole: written to a unique temporary name created 0600,
    then renamed over ``path``, so a reader sees the old file or the new one, never a part. The
    caller holds the file's lock."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def connect_readonly(path: Path, timeout: float = BUSY_TIMEOUT_SECONDS) -> sqlite3.Connection:
    """A read-only connection that can never create or write the file."""
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    return conn


def set_busy_timeout(conn: sqlite3.Connection, seconds: float) -> None:
    """How long this connection's statements wait for another's lock before "database is locked"."""
    conn.execute(f"PRAGMA busy_timeout = {max(0, math.ceil(seconds * 1000))}")


def _left(deadline: float | None, longest: float) -> float:
    """``longest`` seconds, or what is left until ``deadline`` when that is less (never below 0)."""
    if deadline is None:
        return longest
    return max(0.0, min(longest, deadline - time.monotonic()))


_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def sqlite_lower(text: str) -> str:
    """``text`` as SQLite's ``lower()`` returns it (without ICU): ASCII letters only."""
    return text.translate(_ASCII_LOWER)


def message_text(content: Any) -> str:
    """Plain text of a message; multimodal rows (``\\x00json:`` + parts) keep their text parts."""
    if content is None:
        return ""
    text = str(content)
    if not text.startswith(MULTIMODAL_PREFIX):
        return text
    try:
        parts = json.loads(text[len(MULTIMODAL_PREFIX) :])
    except ValueError:
        return ""
    if isinstance(parts, str):
        return parts
    pieces = []
    for part in parts if isinstance(parts, list) else []:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            pieces.append(part["text"])
        elif isinstance(part, str):
            pieces.append(part)
    return "\n".join(pieces)


@dataclass(frozen=True)
class StateSchema:
    """What this state.db has; decided by looking, because 0.19.0 and upstream differ."""

    session_columns: frozenset[str]
    message_columns: frozenset[str]
    fts_columns: tuple[str, ...]  # messages_fts columns, () when there is no FTS table
    has_trigram: bool

    @property
    def live_message_sql(self) -> str:
        """Live rows, as Hermes's own search sees them: compacted rows are still discoverable."""
        live = "(m.active = 1 OR m.compacted = 1)" if "compacted" in self.message_columns else "m.active = 1"
        if "display_kind" in self.message_columns:
            live += " AND COALESCE(m.display_kind, '') != 'hidden'"
        return live

    @property
    def visible_session_sql(self) -> str:
        clauses = [f"COALESCE(s.source, '') NOT IN ({', '.join(repr(s) for s in HIDDEN_SOURCES)})"]
        if "archived" in self.session_columns:
            clauses.append("COALESCE(s.archived, 0) = 0")
        if "hidden" in self.session_columns:
            clauses.append("COALESCE(s.hidden, 0) = 0")
        return " AND ".join(clauses)


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


class SchemaCache:
    """What each state.db has, remembered by the process per file and ``PRAGMA schema_version``
    (which changes with every schema change), so a call pays one pragma instead of four reads.
    Owned by the plugin's :class:`ProcessState`."""

    LIMIT = 32

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[tuple[str, int], StateSchema] = {}

    def detect(self, conn: sqlite3.Connection, path: Path) -> StateSchema:
        key = (str(path), conn.execute("PRAGMA schema_version").fetchone()[0])
        with self._lock:
            known = self._known.get(key)
        if known is not None:
            return known
        schema = detect_schema(conn)
        with self._lock:
            if len(self._known) >= self.LIMIT:
                self._known.clear()
            self._known[key] = schema
        return schema


def detect_schema(conn: sqlite3.Connection) -> StateSchema:
    """What this state.db has: its tables' columns, read now."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not {"sessions", "messages"} <= tables:
        raise NoSessionDatabase("state.db has no sessions yet")
    return StateSchema(
        session_columns=frozenset(_columns(conn, "sessions")),
        message_columns=frozenset(_columns(conn, "messages")),
        fts_columns=tuple(_columns(conn, "messages_fts")) if "messages_fts" in tables else (),
        has_trigram="messages_fts_trigram" in tables,
    )


_SESSION_FIELDS = (
    "id",
    "source",
    "title",
    "started_at",
    "cwd",
    "git_repo_root",
    "parent_session_id",
    "end_reason",
)
_SCOPE_SQL = "m.session_id IN (SELECT value FROM json_each(?))"


class HermesDB:
    """Read-only access to one home's ``state.db`` (and ``projects.db``), opened once per call.

    Use as a context manager; :meth:`open` raises :class:`NoSessionDatabase` when there is
    nothing to read yet.
    """

    def __init__(
        self,
        env: HermesEnv,
        conn: sqlite3.Connection,
        schema: StateSchema,
        ident: tuple[int, int] | None = None,
    ) -> None:
        self.env = env
        self.conn = conn
        self.schema = schema
        self.ident = ident  # (device, inode) of state.db: which file the process's memory is of
        self.deadline: float | None = None  # time.monotonic() past which no read waits for a lock
        self._projects: list[dict[str, Any]] | None = None

    @classmethod
    def open(
        cls, env: HermesEnv, schemas: SchemaCache | None = None, deadline: float | None = None
    ) -> HermesDB:
        """``state.db`` read-only; ``schemas``: the process's memory of its schema (else read now).
        ``deadline`` (``time.monotonic()``): no read of this call waits for another connection's
        lock past it (SQLite's busy timeout is cut to what is left, :meth:`bound_waits`); a read
        still locked out then raises ``sqlite3.OperationalError`` ("database is locked",
        :func:`is_busy`). None: :data:`BUSY_TIMEOUT_SECONDS` per statement."""
        try:
            st = os.stat(env.state_db)
        except OSError:
            raise NoSessionDatabase("state.db not found") from None
        conn = connect_readonly(env.state_db, _left(deadline, BUSY_TIMEOUT_SECONDS))
        try:
            schema = schemas.detect(conn, env.state_db) if schemas is not None else detect_schema(conn)
            db = cls(env, conn, schema, (st.st_dev, st.st_ino))
            db.deadline = deadline
            return db
        except BaseException:
            conn.close()
            raise

    def wait_seconds(self, longest: float = BUSY_TIMEOUT_SECONDS) -> float:
        """How long a read may wait for a lock now: ``longest``, cut to what the deadline leaves."""
        return _left(self.deadline, longest)

    def bound_waits(self) -> None:
        """Cut SQLite's busy timeout to what the deadline leaves (a lock taken since the call
        began waits no longer than the call may take)."""
        if self.deadline is not None:
            set_busy_timeout(self.conn, self.wait_seconds())

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> HermesDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------- sessions

    def _session_select(self) -> str:
        return ", ".join(f"s.{name}" for name in _SESSION_FIELDS if name in self.schema.session_columns)

    def session(self, session_id: str) -> dict[str, Any] | None:
        row = self.conn.execute(
            f"SELECT {self._session_select()} FROM sessions s WHERE s.id = ?", (session_id,)
        ).fetchone()
        return dict(row) if row else None

    def session_links(
        self,
    ) -> list[tuple[str, str | None, str | None, int, str | None, str | None, str | None]]:
        """Every session as ``(id, cwd, git_repo_root, visible, continues, profile, title)``, oldest
        first.

        ``visible``: 1 when it can be a search result (not archived, not hidden, a person's).
        ``continues``: the session it continues after Hermes compressed the context, as
        ``SessionDB.get_compression_tip`` follows it (the parent ended with ``compression``; not
        a branch, a delegation or a tool run), else None. ``profile``: the profile the session was
        recorded under (``profile_name``; None for the default profile and older rows).
        ``title``: Hermes's one-line summary, read here because reaching any column past
        ``system_prompt`` (kilobytes per session in a real home) walks its overflow pages: the
        search's titles come from this read, not from a second pass over the same rows. Plain
        tuples: this is read on every change of state.db and holds every session.
        """
        columns = self.schema.session_columns

        def config_key(key: str) -> str:
            if "model_config" not in columns:
                return "1"
            return (
                "(CASE WHEN json_valid(s.model_config) "
                f"THEN json_extract(s.model_config, '$.{key}') END IS NULL)"
            )

        cwd = "s.cwd" if "cwd" in columns else "NULL"
        profile = "s.profile_name" if "profile_name" in columns else "NULL"
        root = "s.git_repo_root" if "git_repo_root" in columns else "NULL"
        title = "s.title" if "title" in columns else "NULL"
        if "parent_session_id" in columns and "end_reason" in columns:
            continues = (
                "CASE WHEN p.end_reason = 'compression' "
                f"AND {config_key('_branched_from')} AND {config_key('_delegate_from')} "
                "AND COALESCE(s.source, '') != 'tool' THEN s.parent_session_id END"
            )
            join = "LEFT JOIN sessions p ON p.id = s.parent_session_id"
        else:
            continues, join = "NULL", ""
        order = "s.started_at, s.id" if "started_at" in columns else "s.id"
        sql = (
            f"SELECT s.id, {cwd}, {root}, CASE WHEN {self.schema.visible_session_sql} THEN 1 ELSE 0 END, "
            f"{continues}, {profile}, {title} FROM sessions s {join} ORDER BY {order}"
        )
        conn = self.conn
        factory, conn.row_factory = conn.row_factory, None
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.row_factory = factory

    def titles(self, session_ids: Iterable[str]) -> dict[str, str | None]:
        ids = list(session_ids)
        if not ids or "title" not in self.schema.session_columns:
            return {}
        rows = self.conn.execute(
            "SELECT s.id, s.title FROM sessions s WHERE s.id IN (SELECT value FROM json_each(?))",
            (json.dumps(ids),),
        ).fetchall()
        return {row[0]: row[1] for row in rows}

    # ----------------------------------------------------------------------- projects.db

    def projects(self) -> list[dict[str, Any]]:
        """Active projects with their folders; [] when projects.db does not exist (spec §七)."""
        if self._projects is None:
            self._projects = self._read_projects()
        return self._projects

    def _read_projects(self) -> list[dict[str, Any]]:
        path = self.env.projects_db
        if not path.exists():
            return []
        from hermes_cli import projects_db

        try:
            conn = connect_readonly(path, self.wait_seconds())
            try:
                return [project.to_dict() for project in projects_db.list_projects(conn)]
            finally:
                conn.close()
        except sqlite3.Error:
            logger.warning("projects.db unreadable; falling back to automatic repo projects", exc_info=True)
            return []

    def project(self, id_or_slug: str) -> dict[str, Any] | None:
        """A project by id, else by slug (as ``projects_db.get_project``); archived ones are no target."""
        projects = self.projects()
        for wanted, key in ((id_or_slug, "id"), (id_or_slug.lower(), "slug")):
            for project in projects:
                if project.get(key) == wanted:
                    return project
        return None

    # ----------------------------------------------------------------------- messages

    def sessions_active_between(
        self, session_ids: Iterable[str], windows: Sequence[tuple[float, float]]
    ) -> set[str]:
        """The sessions with a live user/assistant message timestamped inside one of the windows.

        One range seek of Hermes's ``(session_id, timestamp)`` index per session and window.
        """
        ids = json.dumps(list(dict.fromkeys(session_ids)))
        found: set[str] = set()
        for start, end in windows:
            rows = self.conn.execute(
                f"""
                SELECT wanted.value FROM json_each(?) AS wanted
                WHERE EXISTS (
                    SELECT 1 FROM messages m
                    WHERE m.session_id = wanted.value AND m.timestamp >= ? AND m.timestamp < ?
                      AND m.role IN ('user', 'assistant') AND {self.schema.live_message_sql}
                )
                """,
                (ids, start, end),
            ).fetchall()
            found.update(row[0] for row in rows)
        return found

    def live_messages(self, sessions: Mapping[str, int] | Sequence[str]) -> list[dict[str, Any]]:
        """Live user/assistant messages of these sessions, in order: what the semantic index covers.

        ``sessions`` maps a session to the message id after which to read (a list means all).
        """
        after_id_by_session = sessions if isinstance(sessions, Mapping) else dict.fromkeys(sessions, 0)
        sql = f"""
            SELECT m.id AS message_id, m.session_id, m.role, m.content, m.timestamp
            FROM json_each(?) AS wanted
            CROSS JOIN messages m ON m.session_id = json_extract(wanted.value, '$[0]')
                           AND m.id > json_extract(wanted.value, '$[1]')
            WHERE m.role IN ('user', 'assistant')
              AND {self.schema.live_message_sql}
            ORDER BY m.id
        """
        wanted = json.dumps([[sid, after] for sid, after in after_id_by_session.items()])
        return [dict(r) for r in self.conn.execute(sql, (wanted,)).fetchall()]

    def preceding_messages(self, up_to_id_by_session: Mapping[str, int], count: int) -> dict[str, list[str]]:
        """Per session, the text of its last ``count`` live user/assistant messages up to an id."""
        earlier: dict[str, list[str]] = {}
        for session_id, up_to in up_to_id_by_session.items():
            rows = self.conn.execute(
                f"SELECT m.content FROM messages m WHERE m.session_id = ? AND m.id <= ? "
                f"AND m.role IN ('user', 'assistant') AND {self.schema.live_message_sql} "
                "ORDER BY m.id DESC LIMIT ?",
                (session_id, up_to, count),
            ).fetchall()
            texts = [message_text(row[0]) for row in reversed(rows)]
            earlier[session_id] = [text for text in texts if text.strip()]
        return earlier

    def messages_by_id(self, message_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
        ids = list(message_ids)
        if not ids:
            return {}
        rows = self.conn.execute(
            "SELECT m.id AS message_id, m.session_id, m.role, m.content, m.timestamp FROM messages m "
            "WHERE m.id IN (SELECT value FROM json_each(?))",
            (json.dumps(ids),),
        ).fetchall()
        return {row["message_id"]: dict(row) for row in rows}

    def session_totals(self, session_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        """Per session, (count, sum of ids) of its active messages, read from Hermes's
        (session_id, active, ...) index alone, never a row. Sessions with none are left out.

        The cheapest exact-enough signal of change there is: an append, a rewind, a
        ``restore_rewound``, a compaction or a rewrite each change the count or the sum.
        """
        rows = self.conn.execute(
            f"SELECT m.session_id, count(*), sum(m.id) FROM messages m WHERE {_SCOPE_SQL} AND m.active = 1 "
            "GROUP BY m.session_id",
            (json.dumps(list(session_ids)),),
        )
        return {r[0]: (r[1], r[2]) for r in rows}

    def session_marks(self, session_ids: Sequence[str]) -> dict[str, SessionMark]:
        """Per session, the :data:`SessionMark` of its active messages (index only, as above)."""
        rows = self.conn.execute(
            "SELECT m.session_id, max(m.id), count(*), sum(m.id) FROM messages m "
            f"WHERE {_SCOPE_SQL} AND m.active = 1 GROUP BY m.session_id",
            (json.dumps(list(session_ids)),),
        )
        return {r[0]: (r[1], r[2], r[3]) for r in rows}

    def active_after(self, after_id_by_session: Mapping[str, int]) -> dict[str, tuple[int, int]]:
        """Per session, (count, sum of ids) of its active messages newer than the given id."""
        if not after_id_by_session:
            return {}
        rows = self.conn.execute(
            "SELECT json_extract(wanted.value, '$[0]'), count(*), sum(m.id) FROM json_each(?) AS wanted "
            "CROSS JOIN messages m ON m.session_id = json_extract(wanted.value, '$[0]') "
            "AND m.active = 1 AND m.id > json_extract(wanted.value, '$[1]') GROUP BY wanted.key",
            (json.dumps([[sid, after] for sid, after in after_id_by_session.items()]),),
        )
        return {r[0]: (r[1], r[2]) for r in rows}

    def nonlive_message_ids(self, session_ids: Sequence[str]) -> list[int]:
        """Messages of these sessions that are stored but not live (rewound; hidden upstream)."""
        scope = json.dumps(list(session_ids))
        condition = "m.active = 0"
        if "compacted" in self.schema.message_columns:
            condition += " AND COALESCE(m.compacted, 0) = 0"
        ids = [
            r[0]
            for r in self.conn.execute(
                f"SELECT m.id FROM messages m WHERE {_SCOPE_SQL} AND {condition}", (scope,)
            )
        ]
        if "display_kind" in self.schema.message_columns:
            ids += [
                r[0]
                for r in self.conn.execute(
                    f"SELECT m.id FROM messages m WHERE {_SCOPE_SQL} AND m.display_kind = 'hidden'", (scope,)
                )
            ]
        return ids

    def live_message_ids(self, session_ids: Sequence[str]) -> set[int]:
        rows = self.conn.execute(
            f"SELECT m.id FROM messages m WHERE m.role IN ('user', 'assistant') "
            f"AND {self.schema.live_message_sql} AND {_SCOPE_SQL}",
            (json.dumps(list(session_ids)),),
        )
        return {r[0] for r in rows}


# =========================================================================== the one write
# Everything above only reads. The move below is the plugin's single write to Hermes's data, and
# it goes through Hermes's own SessionDB (spec §八), never through SQL of ours.


def update_session_cwd(
    env: HermesEnv, session_ids: str | Sequence[str], cwd: str, git_branch_name: str, git_repo_root: str
) -> None:
    """Record a new cwd through Hermes's own ``SessionDB.update_session_cwd`` (spec §3.3), for one
    session or every session of a compressed conversation (one SessionDB, one write each).

    Upstream's ``replace_git_meta=True`` overwrites stale git fields; 0.19.0 cannot clear them,
    which :func:`attribution.trusted_repo_root` compensates for when reading.
    """
    from hermes_state import SessionDB

    db = SessionDB(db_path=env.state_db)
    try:
        kwargs: dict[str, Any] = {}
        if "replace_git_meta" in inspect.signature(db.update_session_cwd).parameters:
            kwargs["replace_git_meta"] = True
        for session_id in [session_ids] if isinstance(session_ids, str) else session_ids:
            db.update_session_cwd(
                session_id,
                cwd,
                git_branch=git_branch_name or None,
                git_repo_root=git_repo_root or None,
                **kwargs,
            )
    finally:
        db.close()


def reanchor_live_session(task_id: str | None, path: str, name: str) -> bool:
    """Re-anchor the running session where Hermes exposes the hook its ``project_switch`` uses.

    The TUI/desktop gateway installs it; the CLI does not, and then the running process keeps
    its cwd until the conversation is resumed.
    """
    try:
        from tools import project_tools
    except Exception:
        return False
    callback = getattr(project_tools, "_workspace_callback", None)
    if callback is None or not task_id:
        return False
    try:
        callback(task_id, path, name)
    except Exception:
        logger.warning("live workspace re-anchor failed", exc_info=True)
        return False
    return True
