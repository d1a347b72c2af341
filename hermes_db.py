"""Hermes's databases: a read-only reader of ``state.db`` and ``projects.db``, and, fenced apart at
the bottom, the plugin's one write to Hermes's data (the move's ``update_session_cwd``).

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
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .hermes_env import HermesEnv

logger = logging.getLogger(__name__)

BUSY_TIMEOUT_SECONDS = 5.0
# Sources that are not a person's conversation (as in Hermes's own session_search).
HIDDEN_SOURCES = ("subagent", "tool")
MULTIMODAL_PREFIX = "\x00json:"
# Matching messages read per session in one query step: a search returns one message per session.
PER_SESSION_SCAN = 5

ChunkKey = tuple[str, int, int]  # (session_id, message_id, chunk_index)
#: A session's active messages: (newest id, count, sum of ids). Hermes appends messages and only
#: ever flips ``active`` (rewind, restore_rewound, compaction), so a change to any of the three
#: is a change to the session's live history.
SessionMark = tuple[int, int, int]


class NoSessionDatabase(Exception):
    """state.db is missing, or holds no sessions table yet (spec §七 ``no_db``)."""


def connect_readonly(path: Path, timeout: float = BUSY_TIMEOUT_SECONDS) -> sqlite3.Connection:
    """A read-only connection that can never create or write the file."""
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=timeout, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    return conn


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


_SCHEMAS: dict[tuple[str, int], StateSchema] = {}


def detect_schema(conn: sqlite3.Connection, path: Path | None = None) -> StateSchema:
    """What this state.db has; remembered per file and ``PRAGMA schema_version`` (which changes
    with every schema change), so a call pays one pragma instead of four reads."""
    key = None
    if path is not None:
        key = (str(path), conn.execute("PRAGMA schema_version").fetchone()[0])
        known = _SCHEMAS.get(key)
        if known is not None:
            return known
    schema = _detect_schema(conn)
    if key is not None:
        if len(_SCHEMAS) > 32:
            _SCHEMAS.clear()
        _SCHEMAS[key] = schema
    return schema


def _detect_schema(conn: sqlite3.Connection) -> StateSchema:
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


class HermesDB:
    """Read-only access to one home's ``state.db`` (and ``projects.db``), opened once per call.

    Use as a context manager; :meth:`open` raises :class:`NoSessionDatabase` when there is
    nothing to read yet.
    """

    def __init__(self, env: HermesEnv, conn: sqlite3.Connection, schema: StateSchema) -> None:
        self.env = env
        self.conn = conn
        self.schema = schema
        self._projects: list[dict[str, Any]] | None = None

    @classmethod
    def open(cls, env: HermesEnv) -> HermesDB:
        if not env.state_db.exists():
            raise NoSessionDatabase("state.db not found")
        conn = connect_readonly(env.state_db)
        try:
            return cls(env, conn, detect_schema(conn, env.state_db))
        except BaseException:
            conn.close()
            raise

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

    def session_links(self) -> list[tuple[str, str | None, str | None, int, str | None]]:
        """Every session as ``(id, cwd, git_repo_root, visible, continues)``, oldest first.

        ``visible``: 1 when it can be a search result (not archived, not hidden, a person's).
        ``continues``: the session it continues after Hermes compressed the context, as
        ``SessionDB.get_compression_tip`` follows it (the parent ended with ``compression``; not
        a branch, a delegation or a tool run), else None. Plain tuples: this is read on every
        change of state.db and holds every session.
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
        root = "s.git_repo_root" if "git_repo_root" in columns else "NULL"
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
            f"{continues} FROM sessions s {join} ORDER BY {order}"
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
            conn = connect_readonly(path)
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

    # ----------------------------------------------------------------------- keyword queries

    def fts_messages(
        self,
        table: str,
        match: str,
        in_scope: Mapping[str, str],
        scan_limit: int,
        enough_groups: int | None = None,
        per_session: int = PER_SESSION_SCAN,
    ) -> list[dict]:
        """Live user/assistant messages of the sessions in ``in_scope`` matching ``match``, best
        bm25 first.

        One FTS query shaped like Hermes's own ``search_messages`` (FTS table outer, ``messages``
        joined by rowid, ``ORDER BY rank``), with the scope as one bound JSON array in the SQL, so
        bm25 is computed and sorted for in-scope rows only: at 300k messages in 50 projects most
        matches of a common word lie in other projects, and reading them into Python to drop them
        cost 6.8x ``search_messages``' time (``docs/performance.md``). ``CROSS JOIN`` keeps the FTS
        table outer: driven from the scope's sessions, SQLite would re-run the MATCH per message.
        Rows stream in rank order, at most ``per_session`` (default :data:`PER_SESSION_SCAN`) per
        session (one conversation repeating a word hundreds of times cannot fill ``scan_limit`` and
        hide every other one). ``in_scope`` maps each session to its conversation; with
        ``enough_groups`` reading stops once that many conversations have a message, since nothing
        read later can rank above them. Contents are read for the kept rows only, so the sort
        never carries message bodies.
        """
        if table == "messages_fts" and len(self.schema.fts_columns) > 1:
            match = f"{{{self.schema.fts_columns[0]}}} : ({match})"  # upstream also indexes tool columns
        sql = f"""
            SELECT m.id, m.session_id, m.role, m.timestamp, f.rank
            FROM {table} f
            CROSS JOIN messages m ON m.id = f.rowid
            WHERE {table} MATCH ?
              AND m.role IN ('user', 'assistant')
              AND {self.schema.live_message_sql}
              AND {_SCOPE_SQL}
            ORDER BY f.rank, m.id
        """
        kept: list[dict[str, Any]] = []
        taken: dict[str, int] = {}
        groups: set[str] = set()
        cursor = self.conn.cursor()
        cursor.row_factory = None
        for message_id, session_id, role, timestamp, rank in cursor.execute(
            sql, (match, json.dumps(list(in_scope)))
        ):
            if taken.get(session_id, 0) >= per_session:
                continue
            taken[session_id] = taken.get(session_id, 0) + 1
            groups.add(in_scope[session_id])
            kept.append(
                {
                    "message_id": message_id,
                    "session_id": session_id,
                    "role": role,
                    "timestamp": timestamp,
                    "rank": rank,
                }
            )
            if len(kept) >= scan_limit or (enough_groups and len(groups) >= enough_groups):
                break
        cursor.close()
        return self._with_content(kept)

    def _with_content(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not rows:
            return rows
        contents = self.conn.execute(
            "SELECT m.id, m.content FROM messages m WHERE m.id IN (SELECT value FROM json_each(?))",
            (json.dumps([row["message_id"] for row in rows]),),
        ).fetchall()
        by_id = {row[0]: row[1] for row in contents}
        for row in rows:
            row["content"] = by_id.get(row["message_id"])
        return rows

    def previous_messages(self, message_ids: Iterable[int]) -> dict[int, int | None]:
        """For each message, the live user/assistant message just before it in its session (or None).

        Tool rows and hidden rows in between are skipped. One descent of Hermes's
        ``(session_id, timestamp)`` index per message that stops at the first conversational row,
        so the cost does not grow with the session's length.
        """
        ids = list(message_ids)
        if not ids:
            return {}
        sql = f"""
            SELECT h.id, (
                SELECT m.id FROM messages m
                WHERE m.session_id = h.session_id AND m.timestamp <= h.timestamp
                  AND NOT (m.timestamp = h.timestamp AND m.id >= h.id)
                  AND m.role IN ('user', 'assistant') AND {self.schema.live_message_sql}
                ORDER BY m.timestamp DESC, m.id DESC LIMIT 1
            ) AS previous_id
            FROM messages h WHERE h.id IN (SELECT value FROM json_each(?))
        """
        return {row[0]: row[1] for row in self.conn.execute(sql, (json.dumps(ids),)).fetchall()}

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

    def conversations_matching(self, table: str, match: str, in_scope: Mapping[str, str], enough: int) -> int:
        """How many of ``in_scope``'s conversations (its values) have a live user/assistant message
        matching ``match``, counted up to ``enough``: reading stops there.

        Unranked (no bm25, no sort), so a word's rows are read in index order and a common word stops
        early. For ``search.common_words``.
        """
        if table == "messages_fts" and len(self.schema.fts_columns) > 1:
            match = f"{{{self.schema.fts_columns[0]}}} : ({match})"
        sql = f"""
            SELECT m.session_id
            FROM {table} f
            CROSS JOIN messages m ON m.id = f.rowid
            WHERE {table} MATCH ?
              AND m.role IN ('user', 'assistant')
              AND {self.schema.live_message_sql}
              AND {_SCOPE_SQL}
        """
        found: set[str] = set()
        cursor = self.conn.cursor()
        cursor.row_factory = None
        try:
            for (session_id,) in cursor.execute(sql, (match, json.dumps(list(in_scope)))):
                found.add(in_scope[session_id])
                if len(found) >= enough:
                    break
        finally:
            cursor.close()
        return len(found)

    def like_messages(
        self,
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
                      AND {self.schema.live_message_sql}
                      AND {_SCOPE_SQL}
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
        return [dict(row) for row in self.conn.execute(sql, params).fetchall()]

    # ----------------------------------------------------------------------- what the index covers

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

    def live_signature(self, session_ids: Sequence[str]) -> tuple:
        """Changes whenever a message of these sessions is added, rewound, compacted or removed."""
        compacted = "total(m.compacted)" if "compacted" in self.schema.message_columns else "0"
        row = self.conn.execute(
            f"SELECT count(*), max(m.id), total(m.active), {compacted} FROM messages m WHERE {_SCOPE_SQL}",
            (json.dumps(list(session_ids)),),
        ).fetchone()
        return tuple(row)

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
