"""Every database and filesystem access of the plugin.

Hermes's data is read through short read-only connections (``mode=ro`` on a URI-encoded path,
so a ``#`` or ``?`` in ``HERMES_HOME`` cannot open a different, writable file). The one write to
Hermes's data is :func:`update_session_cwd`, through Hermes's own ``SessionDB``. Paths come from
``get_hermes_home()`` at call time: a profile switch or a test's ``HERMES_HOME`` is honoured
without a restart.

The schema is detected, not assumed: 0.19.0 has no ``sessions.hidden`` and inline FTS tables;
upstream adds ``hidden``, ``messages.display_kind`` and external-content FTS with more columns.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import sqlite3
import subprocess
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

PLUGIN_DIR_NAME = "project-history-recall"
BUSY_TIMEOUT_SECONDS = 5.0
# Sources that are not a person's conversation (as in Hermes's own session_search).
HIDDEN_SOURCES = ("subagent", "tool")
SEARCHED_ROLES = ("user", "assistant")
MULTIMODAL_PREFIX = "\x00json:"


# --------------------------------------------------------------------------- paths


def hermes_home() -> Path:
    from hermes_constants import get_hermes_home

    return Path(get_hermes_home())


def state_db_path() -> Path:
    return hermes_home() / "state.db"


def projects_db_path() -> Path:
    return hermes_home() / "projects.db"


def plugin_data_dir() -> Path:
    """``$HERMES_HOME/plugins/project-history-recall``: where the spec keeps our own files."""
    return hermes_home() / "plugins" / PLUGIN_DIR_NAME


def active_profile_name() -> str:
    try:
        from hermes_cli.profiles import get_active_profile_name

        return get_active_profile_name()
    except Exception:
        return "default"


def junk_roots() -> tuple[str, ...]:
    """Folders that are never an automatic repo project (as on the desktop)."""
    return (str(Path.home()), str(hermes_home()))


def home_folder() -> str:
    """Where "move to Home" puts a conversation: ``terminal.cwd`` if it names a folder, else ~."""
    configured = str((read_config().get("terminal") or {}).get("cwd") or "").strip()
    if configured and configured not in (".", "auto", "cwd"):
        candidate = Path(configured).expanduser()
        if candidate.is_dir():
            return str(candidate.resolve())
    return str(Path.home())


# --------------------------------------------------------------------------- config


def read_config() -> dict[str, Any]:
    """Hermes's config.yaml as Hermes reads it (mtime-cached by Hermes, so cheap per call)."""
    try:
        from hermes_cli.config import load_config

        return load_config() or {}
    except Exception:
        logger.debug("could not load config.yaml", exc_info=True)
        return {}


def read_settings():
    from .config_schema import PLUGIN_KEY, parse_settings

    plugins = read_config().get("plugins") or {}
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


# --------------------------------------------------------------------------- connections


def connect_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection that can never create or write the file."""
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    conn = sqlite3.connect(
        uri, uri=True, timeout=BUSY_TIMEOUT_SECONDS, isolation_level=None, check_same_thread=False
    )
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
    return conn


@contextmanager
def reading(path: Path) -> Iterator[sqlite3.Connection]:
    conn = connect_readonly(path)
    try:
        yield conn
    finally:
        conn.close()


# --------------------------------------------------------------------------- state.db schema


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


def detect_schema(conn: sqlite3.Connection) -> StateSchema:
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return StateSchema(
        session_columns=frozenset(_columns(conn, "sessions")),
        message_columns=frozenset(_columns(conn, "messages")),
        fts_columns=tuple(_columns(conn, "messages_fts")) if "messages_fts" in tables else (),
        has_trigram="messages_fts_trigram" in tables,
    )


# --------------------------------------------------------------------------- sessions

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


def _session_select(schema: StateSchema) -> str:
    present = [f"s.{name}" for name in _SESSION_FIELDS if name in schema.session_columns]
    return ", ".join(present)


def read_session(conn: sqlite3.Connection, schema: StateSchema, session_id: str) -> dict[str, Any] | None:
    row = conn.execute(
        f"SELECT {_session_select(schema)} FROM sessions s WHERE s.id = ?", (session_id,)
    ).fetchone()
    return dict(row) if row else None


def read_visible_sessions(conn: sqlite3.Connection, schema: StateSchema) -> list[dict[str, Any]]:
    """Every session that can be a search result: not archived, not hidden, a person's."""
    rows = conn.execute(
        f"SELECT {_session_select(schema)} FROM sessions s WHERE {schema.visible_session_sql} "
        "ORDER BY s.started_at"
    ).fetchall()
    return [dict(row) for row in rows]


def compression_ancestors(conn: sqlite3.Connection, session_id: str) -> list[str]:
    """The sessions this one continues after context compression: the same conversation."""
    chain: list[str] = []
    seen = {session_id}
    current = session_id
    while True:
        row = conn.execute(
            "SELECT p.id, p.end_reason FROM sessions c JOIN sessions p ON p.id = c.parent_session_id "
            "WHERE c.id = ?",
            (current,),
        ).fetchone()
        if row is None or row["id"] in seen or row["end_reason"] != "compression":
            return chain
        chain.append(row["id"])
        seen.add(row["id"])
        current = row["id"]


# --------------------------------------------------------------------------- git


_GIT_TIMEOUT_SECONDS = 1.5
_NEGATIVE_TTL_SECONDS = 30.0
_git_lock = threading.Lock()
_repo_root_cache: dict[str, tuple[str, str]] = {}
_not_a_repo_until: dict[str, float] = {}


def _run_git(cwd: str, *args: str) -> str:
    """``git -C cwd ...``: stripped stdout, or "" on any failure. Never takes a lock in the repo."""
    try:
        result = subprocess.run(
            ["git", "-C", cwd, *args],
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=_GIT_TIMEOUT_SECONDS,
            check=False,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0"},
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


def _probe_repo_roots(cwd: str) -> tuple[str, str]:
    """(common root, worktree root): the main repository folding linked worktrees (what Hermes
    stores), and the top of the checkout the cwd is in (differs in a linked worktree)."""
    lines = _run_git(
        cwd, "rev-parse", "--path-format=absolute", "--git-common-dir", "--show-toplevel"
    ).splitlines()
    if len(lines) != 2:
        return "", ""
    git_dir, toplevel = os.path.realpath(lines[0]), lines[1]
    if os.path.basename(git_dir) == ".git":
        return os.path.dirname(git_dir), toplevel
    return toplevel, toplevel


def repo_roots(cwd: str) -> tuple[str, str]:
    """Cached per cwd: positive answers for the process, "not a repo" for 30 s."""
    if not cwd or not os.path.isdir(cwd):
        return "", ""
    with _git_lock:
        if cwd in _repo_root_cache:
            return _repo_root_cache[cwd]
        if _not_a_repo_until.get(cwd, 0.0) > time.monotonic():
            return "", ""
    roots = _probe_repo_roots(cwd)
    with _git_lock:
        if roots[0]:
            _repo_root_cache[cwd] = roots
        else:
            _not_a_repo_until[cwd] = time.monotonic() + _NEGATIVE_TTL_SECONDS
    return roots


def common_repo_root(cwd: str) -> str:
    return repo_roots(cwd)[0]


def git_branch(cwd: str) -> str:
    return _run_git(cwd, "branch", "--show-current") or _run_git(cwd, "rev-parse", "--short", "HEAD")


def _needs_probe(row: Mapping[str, Any]) -> bool:
    """A cwd whose recorded root is missing, or does not contain it (stale, or a linked worktree)."""
    from .attribution import trusted_repo_root

    cwd = (row.get("cwd") or "").strip()
    return bool(cwd) and not trusted_repo_root(cwd, row.get("git_repo_root"))


def fill_repo_roots(rows: Sequence[dict[str, Any]], budget_seconds: float = 3.0) -> list[dict[str, Any]]:
    """Rows with their git roots as git sees them now, where the recorded root cannot be trusted.

    Hermes's CLI records a cwd but no repo root; without this, CLI conversations would never
    form automatic repo projects. A recorded root that does not contain the cwd is either stale
    (Hermes 0.19 cannot clear it after a move) or the main repo of a linked worktree elsewhere;
    git tells which, and the row also gets ``git_worktree_root`` (the checkout holding the cwd)
    so :func:`attribution.trusted_repo_root` can accept the worktree case. Probes run per
    distinct cwd, in parallel, within a time budget; a cwd not probed in time keeps what Hermes
    recorded for this search (and a stale root is then still ignored by the reader guard).
    """
    missing = sorted({r["cwd"].strip() for r in rows if _needs_probe(r)})
    roots: dict[str, tuple[str, str]] = {}
    if missing:
        pool = ThreadPoolExecutor(max_workers=min(8, len(missing)))
        futures = {cwd: pool.submit(repo_roots, cwd) for cwd in missing}
        done, _ = wait(futures.values(), timeout=budget_seconds)
        pool.shutdown(wait=False, cancel_futures=True)
        roots = {cwd: f.result() for cwd, f in futures.items() if f in done}
    filled = []
    for row in rows:
        common, worktree = roots.get((row.get("cwd") or "").strip(), ("", ""))
        if common and _needs_probe(row):
            row = {**row, "git_repo_root": common, "git_worktree_root": worktree}
        filled.append(row)
    return filled


# --------------------------------------------------------------------------- projects.db


def read_projects() -> list[dict[str, Any]]:
    """Active projects with their folders; [] when projects.db does not exist (spec §七)."""
    path = projects_db_path()
    if not path.exists():
        return []
    from hermes_cli import projects_db

    try:
        with reading(path) as conn:
            return [project.to_dict() for project in projects_db.list_projects(conn)]
    except sqlite3.Error:
        logger.warning("projects.db unreadable; falling back to automatic repo projects", exc_info=True)
        return []


def read_project(project_id: str) -> dict[str, Any] | None:
    path = projects_db_path()
    if not path.exists():
        return None
    from hermes_cli import projects_db

    with reading(path) as conn:
        project = projects_db.get_project(conn, project_id)
        return project.to_dict() if project else None


def primary_folder(project: dict[str, Any]) -> str:
    """Primary folder as Hermes picks it: primary_path, else the primary folder, else the first."""
    if project.get("primary_path"):
        return project["primary_path"]
    folders = project.get("folders") or []
    for folder in folders:
        if folder.get("is_primary"):
            return folder["path"]
    return folders[0]["path"] if folders else ""


# --------------------------------------------------------------------------- keyword queries


def _scope_sql() -> str:
    return "m.session_id IN (SELECT value FROM json_each(?))"


# Matching messages read per session in one query step: a search returns one message per session.
PER_SESSION_SCAN = 5


def fts_messages(
    conn: sqlite3.Connection,
    schema: StateSchema,
    table: str,
    match: str,
    session_ids: Sequence[str],
    scan_limit: int,
) -> list[dict[str, Any]]:
    """Live user/assistant messages of the given sessions matching ``match``, best bm25 first.

    At most :data:`PER_SESSION_SCAN` per session, so one conversation repeating a word hundreds
    of times cannot fill ``scan_limit`` and hide every other conversation.
    """
    if table == "messages_fts" and len(schema.fts_columns) > 1:
        match = f"{{{schema.fts_columns[0]}}} : ({match})"  # upstream's FTS also indexes tool columns
    sql = f"""
        SELECT message_id, session_id, role, content, timestamp, rank FROM (
            SELECT m.id AS message_id, m.session_id, m.role, m.content, m.timestamp, f.rank AS rank,
                   ROW_NUMBER() OVER (PARTITION BY m.session_id ORDER BY f.rank, m.id) AS nth
            FROM {table} f
            JOIN messages m ON m.id = f.rowid
            WHERE {table} MATCH ?
              AND m.role IN ('user', 'assistant')
              AND {schema.live_message_sql}
              AND {_scope_sql()}
        )
        WHERE nth <= ?
        ORDER BY rank, message_id
        LIMIT ?
    """
    params = (match, json.dumps(list(session_ids)), PER_SESSION_SCAN, scan_limit)
    return [dict(row) for row in conn.execute(sql, params).fetchall()]


def _like_pattern(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _like(column: str) -> str:
    return f"({column} LIKE ? ESCAPE '\\')"


# FTS5 precedence (NOT, then AND, then OR; adjacent terms AND) is SQL's once NOT is "AND NOT".
_SQL_OPERATORS = {"AND": "AND", "OR": "OR", "NOT": "AND NOT"}


def _like_boolean(expression: Sequence[tuple[str, str]], column: str) -> tuple[str, list[str]]:
    """``[("term", "a"), ("op", "NOT"), ("term", "b")]`` as SQL over LIKE, with its parameters."""
    parts: list[str] = []
    params: list[str] = []
    previous = "op"
    for kind, value in expression:
        if kind == "term":
            if previous == "term":
                parts.append("AND")
            parts.append(_like(column))
            params.append(_like_pattern(value))
        else:
            parts.append(_SQL_OPERATORS[value])
        previous = kind
    return "(" + " ".join(parts) + ")", params


def like_messages(
    conn: sqlite3.Connection,
    schema: StateSchema,
    terms: Sequence[str],
    session_ids: Sequence[str],
    require_all: bool,
    scan_limit: int,
    expression: Sequence[tuple[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """Substring search for what FTS cannot tokenise (short CJK terms, FTS errors).

    A message matches when it contains every term (``require_all``) or any of them; or, given
    an ``expression`` of ``("term", text)`` and ``("op", "AND" | "OR" | "NOT")`` items, when
    that boolean query holds, as FTS5 would read it. Ranked by how many terms a message
    contains, newest first among equals; at most :data:`PER_SESSION_SCAN` per session.
    """
    if not terms:
        return []
    hits = " + ".join(_like("m.content") for _ in terms)
    if expression:
        condition, condition_params = _like_boolean(expression, "content")
    else:
        condition, condition_params = "matched >= ?", [len(terms) if require_all else 1]
    sql = f"""
        SELECT message_id, session_id, role, content, timestamp, matched FROM (
            SELECT *, ROW_NUMBER() OVER (
                PARTITION BY session_id ORDER BY matched DESC, message_id DESC
            ) AS nth
            FROM (
                SELECT m.id AS message_id, m.session_id, m.role, m.content, m.timestamp,
                       ({hits}) AS matched
                FROM messages m
                WHERE m.role IN ('user', 'assistant')
                  AND {schema.live_message_sql}
                  AND {_scope_sql()}
            )
            WHERE {condition}
        )
        WHERE nth <= ?
        ORDER BY matched DESC, message_id DESC
        LIMIT ?
    """
    params = [
        *(_like_pattern(t) for t in terms),
        json.dumps(list(session_ids)),
        *condition_params,
        PER_SESSION_SCAN,
        scan_limit,
    ]
    return [dict(row) for row in conn.execute(sql, params).fetchall()]


def live_messages(
    conn: sqlite3.Connection, schema: StateSchema, sessions: Mapping[str, int] | Sequence[str]
) -> list[dict[str, Any]]:
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
          AND {schema.live_message_sql}
        ORDER BY m.id
    """
    wanted = json.dumps([[sid, after] for sid, after in after_id_by_session.items()])
    return [dict(r) for r in conn.execute(sql, (wanted,)).fetchall()]


def preceding_messages(
    conn: sqlite3.Connection, schema: StateSchema, up_to_id_by_session: Mapping[str, int], count: int
) -> dict[str, list[str]]:
    """Per session, the text of its last ``count`` live user/assistant messages up to an id, oldest first."""
    earlier: dict[str, list[str]] = {}
    for session_id, up_to in up_to_id_by_session.items():
        rows = conn.execute(
            f"SELECT m.content FROM messages m WHERE m.session_id = ? AND m.id <= ? "
            f"AND m.role IN ('user', 'assistant') AND {schema.live_message_sql} "
            "ORDER BY m.id DESC LIMIT ?",
            (session_id, up_to, count),
        ).fetchall()
        texts = [message_text(row[0]) for row in reversed(rows)]
        earlier[session_id] = [text for text in texts if text.strip()]
    return earlier


def messages_by_id(conn: sqlite3.Connection, message_ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    ids = list(message_ids)
    if not ids:
        return {}
    rows = conn.execute(
        "SELECT m.id AS message_id, m.session_id, m.role, m.content, m.timestamp FROM messages m "
        "WHERE m.id IN (SELECT value FROM json_each(?))",
        (json.dumps(ids),),
    ).fetchall()
    return {row["message_id"]: dict(row) for row in rows}


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


# --------------------------------------------------------------------------- the one write


def update_session_cwd(session_id: str, cwd: str, git_branch_name: str, git_repo_root: str) -> None:
    """Record a new cwd through Hermes's own ``SessionDB.update_session_cwd`` (spec §3.3).

    Upstream's ``replace_git_meta=True`` overwrites stale git fields; 0.19.0 cannot clear them,
    which :func:`attribution.trusted_repo_root` compensates for when reading.
    """
    from hermes_state import SessionDB

    db = SessionDB(db_path=state_db_path())
    try:
        kwargs: dict[str, Any] = {}
        if "replace_git_meta" in inspect.signature(db.update_session_cwd).parameters:
            kwargs["replace_git_meta"] = True
        db.update_session_cwd(
            session_id, cwd, git_branch=git_branch_name or None, git_repo_root=git_repo_root or None, **kwargs
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


# --------------------------------------------------------------------------- consent.json


def consent_path() -> Path:
    return plugin_data_dir() / "consent.json"


def read_consent() -> dict[str, Any] | None:
    path = consent_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        logger.warning("consent.json is unreadable; semantic search needs confirming again")
        return None
    return data if isinstance(data, dict) else None


def write_consent(record: dict[str, Any]) -> None:
    """Atomic replace, so a crash never leaves half a consent behind."""
    path = consent_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_api_key() -> str | None:
    """``PROJECT_HISTORY_EMBEDDING_API_KEY`` from the environment, else ``$HERMES_HOME/.env``.

    ``hermes`` loads .env at start-up, but a process that only imports ``model_tools`` does not.
    The key is returned to the provider and nowhere else: never logged, stored or echoed.
    """
    from .config_schema import API_KEY_ENV

    key = os.environ.get(API_KEY_ENV, "").strip()
    if key:
        return key
    env_file = hermes_home() / ".env"
    if not env_file.exists():
        return None
    try:
        from dotenv import dotenv_values

        return (dotenv_values(env_file).get(API_KEY_ENV) or "").strip() or None
    except Exception:
        return None


# --------------------------------------------------------------------------- embeddings.db

EMBEDDINGS_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    message_id INTEGER NOT NULL,
    chunk_index INTEGER NOT NULL,
    content_hash TEXT NOT NULL,
    model_fingerprint TEXT NOT NULL,
    vector BLOB NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE(session_id, message_id, chunk_index, model_fingerprint)
);
CREATE INDEX IF NOT EXISTS chunks_by_model_session ON chunks(model_fingerprint, session_id);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
EMBEDDINGS_SCHEMA_VERSION = "1"

ChunkKey = tuple[str, int, int]  # (session_id, message_id, chunk_index)


def embeddings_db_path() -> Path:
    return plugin_data_dir() / "embeddings.db"


def connect_embeddings(path: Path | None = None) -> sqlite3.Connection:
    """Our own database: WAL so searches read while an indexer writes; created on first use."""
    path = path or embeddings_db_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=15.0, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.executescript(EMBEDDINGS_SCHEMA)
    conn.execute(
        "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?), ('generation', '0'), "
        "('instance', ?)",
        (EMBEDDINGS_SCHEMA_VERSION, uuid.uuid4().hex),
    )
    return conn


def embeddings_instance(conn: sqlite3.Connection) -> str:
    """A random id given to this database when it was created: a purge makes a new one."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'instance'").fetchone()
    return row["value"] if row else ""


def embeddings_generation(conn: sqlite3.Connection) -> int:
    """Bumped by every write batch: an in-memory vector matrix is fresh while this is unchanged."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
    return int(row["value"]) if row else 0


def chunk_hashes(
    conn: sqlite3.Connection, fingerprint: str, after_id_by_session: Mapping[str, int]
) -> dict[ChunkKey, str]:
    """Stored chunk hashes of these sessions' messages newer than each one's id."""
    wanted = json.dumps([[sid, after] for sid, after in after_id_by_session.items()])
    rows = conn.execute(
        "SELECT c.session_id, c.message_id, c.chunk_index, c.content_hash FROM json_each(?) AS wanted "
        # CROSS JOIN keeps the session list outside: SQLite would otherwise scan every chunk of
        # the model and re-read the list for each one (34 s for 10k chunks, measured).
        "CROSS JOIN chunks c ON c.model_fingerprint = ? "
        "AND c.session_id = json_extract(wanted.value, '$[0]') "
        "AND c.message_id > json_extract(wanted.value, '$[1]')",
        (wanted, fingerprint),
    )
    return {(r[0], r[1], r[2]): r[3] for r in rows}


def write_chunks(
    conn: sqlite3.Connection,
    fingerprint: str,
    rows: Sequence[tuple[str, int, int, str, bytes]],
    stale: Iterable[ChunkKey] = (),
) -> None:
    """One batch in one transaction: upsert (session, message, chunk, hash, vector), drop stale keys."""
    now = time.time()
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.executemany(
            "INSERT INTO chunks (session_id, message_id, chunk_index, content_hash, model_fingerprint, "
            "vector, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT(session_id, message_id, chunk_index, model_fingerprint) DO UPDATE SET "
            "content_hash = excluded.content_hash, vector = excluded.vector, "
            "created_at = excluded.created_at",
            [(s, m, i, h, fingerprint, v, now) for s, m, i, h, v in rows],
        )
        conn.executemany(
            "DELETE FROM chunks WHERE session_id = ? AND message_id = ? AND chunk_index = ? "
            "AND model_fingerprint = ?",
            [(*key, fingerprint) for key in stale],
        )
        conn.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def chunk_vectors(
    conn: sqlite3.Connection, fingerprint: str, session_ids: Sequence[str]
) -> list[tuple[str, int, int, bytes]]:
    """(session_id, message_id, chunk_index, vector blob) of these sessions under one model."""
    return conn.execute(
        "SELECT session_id, message_id, chunk_index, vector FROM chunks "
        "WHERE model_fingerprint = ? AND session_id IN (SELECT value FROM json_each(?)) "
        "ORDER BY message_id, chunk_index",
        (fingerprint, json.dumps(list(session_ids))),
    ).fetchall()


def indexed_message_ids(conn: sqlite3.Connection, fingerprint: str, session_ids: Sequence[str]) -> set[int]:
    rows = conn.execute(
        "SELECT DISTINCT message_id FROM chunks "
        "WHERE model_fingerprint = ? AND session_id IN (SELECT value FROM json_each(?))",
        (fingerprint, json.dumps(list(session_ids))),
    )
    return {r[0] for r in rows}


def purge_embeddings() -> bool:
    """Delete every stored vector (``disable --purge``): the database and its WAL files."""
    removed = False
    for suffix in ("", "-wal", "-shm"):
        path = Path(str(embeddings_db_path()) + suffix)
        if path.exists():
            path.unlink()
            removed = True
    return removed


@contextmanager
def indexer_lock(blocking: bool = False) -> Iterator[bool]:
    """One indexer at a time across processes, so two Hermes windows never embed the same text twice.

    Yields whether the lock was taken; a process that does not get it leaves the work to the one
    that has it.
    """
    import fcntl

    path = plugin_data_dir() / "indexer.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def indexer_busy() -> bool:
    """Is some process (this one included) holding the indexer lock right now?"""
    with indexer_lock() as taken:
        return not taken


def live_signature(conn: sqlite3.Connection, schema: StateSchema, session_ids: Sequence[str]) -> tuple:
    """Changes whenever a message of these sessions is added, rewound, compacted or removed."""
    compacted = "total(m.compacted)" if "compacted" in schema.message_columns else "0"
    row = conn.execute(
        f"SELECT count(*), max(m.id), total(m.active), {compacted} FROM messages m WHERE {_scope_sql()}",
        (json.dumps(list(session_ids)),),
    ).fetchone()
    return tuple(row)


def live_message_ids(conn: sqlite3.Connection, schema: StateSchema, session_ids: Sequence[str]) -> set[int]:
    rows = conn.execute(
        f"SELECT m.id FROM messages m WHERE m.role IN ('user', 'assistant') "
        f"AND {schema.live_message_sql} AND {_scope_sql()}",
        (json.dumps(list(session_ids)),),
    )
    return {r[0] for r in rows}
