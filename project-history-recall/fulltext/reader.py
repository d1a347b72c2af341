"""The keyword engine's reads of Hermes's full-text tables (``messages_fts``, unicode61, and
``messages_fts_trigram``) and of the scope's message ids; nothing here writes.

:class:`FullTextReader` works on one call's :class:`store.HermesDB` connection. FTS5 knows nothing of
sessions, so a scope is applied either as the set of the scope's message ids the process keeps
(:class:`SessionMessages`, asked through an SQL function from C) or, the first time a process sees
a scope, by joining the matches to ``messages``: both give the same rows (``docs/design.md``,
"Keyword path").
"""

from __future__ import annotations

import itertools
import json
import logging
import sqlite3
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..store import HermesDB, is_busy, set_busy_timeout, sqlite_lower

logger = logging.getLogger(__name__)

# Matching messages read per session in one query step: a search returns one message per session.
PER_SESSION_SCAN = 5
# FTS rows checked for liveness and session per statement while a ranked FTS query is read: small
# first (keyword mode often needs three conversations), larger as more is read, and never more
# than the rows still wanted (the check costs per row: a 512-row block to keep 140 more rows was
# a third of a rare word's search in a large project).
FTS_BLOCKS = (32, 128, 512)
# SQLite virtual-machine steps between two looks at the clock while a deadline holds: about a
# millisecond of work, so a statement stops within milliseconds of it at a negligible cost.
PROGRESS_STEPS = 10_000
_now = time.monotonic  # the deadline's clock
_SCOPE_SQL = "m.session_id IN (SELECT value FROM json_each(?))"
# A message with no text is never a result: Hermes's FTS tables index content || tool_name ||
# tool_calls, so an assistant row that only called a tool matches on the tool's name. (trim, not
# length: SQLite's length stops at the NUL that starts a multimodal row.) The first characters are
# looked at first: trim copies what it keeps, the whole of a long message, for every row checked.
_WHITESPACE = "char(32, 9, 10, 13)"
_HAS_TEXT_SQL = (
    f"(CASE WHEN trim(substr(m.content, 1, 64), {_WHITESPACE}) != '' THEN 1 "
    f"ELSE trim(m.content, {_WHITESPACE}) != '' END)"
)
# A row as a result could show it (user/assistant with text: 1), or what the agent did or saw (0).
_SPOKEN_SQL = f"(m.role IN ('user', 'assistant') AND {_HAS_TEXT_SQL})"


def _session_end_sql(session: str, end: str) -> str:
    """The first (``end`` "min") or last ("max") message id of the session ``session`` (an SQL
    expression), from the session index alone.

    The lookups around a matched row (its turn's opener, its answer, a session's first user
    message) walk ``messages`` in id order from the row, between these bounds, with the session
    compared as ``+m.session_id`` so that SQLite keeps to the id order: through the session index
    it would read every row of the session and sort them, for each row looked up."""
    return f"(SELECT {end}(f.id) FROM messages f WHERE f.session_id = {session})"


def _rows_sql(activity: bool) -> str:
    """The rows a match may be: user/assistant rows with text, and with ``activity`` also what
    the agent did or saw (tool rows, assistant rows without text)."""
    return "m.role IN ('user', 'assistant', 'tool')" if activity else _SPOKEN_SQL


@dataclass
class ScopeIds:
    """One scope's messages as the process remembers them: each id's session (``owner``, asked
    through ``owner.__contains__`` by FTS5), and answers about the scope
    (:meth:`FullTextReader.in_conversations`), kept until the scope gains a message or its sessions
    are grouped into conversations otherwise (:meth:`answers_for`). A rewind or restore in another
    session does not clear them: they decide which words rank, never what is in scope
    or what may be returned, and a message later restored is re-counted when the scope next grows.
    """

    owner: dict[int, str]
    answers: dict[tuple, frozenset[str]] = field(default_factory=dict)
    low: int = 0  # the smallest and largest id of the scope: FTS5 reads only that range
    high: int = 0
    counted_with: Mapping[str, str] | None = None  # the session -> conversation map of the answers

    def __post_init__(self) -> None:
        if self.owner and not self.high:
            self.low, self.high = min(self.owner), max(self.owner)

    def add(self, message_id: int, session_id: str) -> None:
        self.owner[message_id] = session_id
        self.low = min(self.low, message_id) if self.low else message_id
        self.high = max(self.high, message_id)
        self.answers = {}  # the scope gained a message: counts may have grown (a new dict: a
        # search still counting under the old one writes its answer there, not here)

    def answers_for(self, in_scope: Mapping[str, str]) -> dict[tuple, frozenset[str]]:
        """The answers kept for these sessions grouped as ``in_scope`` groups them: the answers
        name conversations, and the same sessions are fewer conversations once Hermes links a
        compression's continuation to its parent, so answers counted under another grouping go."""
        if self.counted_with is not in_scope:
            if self.counted_with != in_scope:
                self.answers = {}
            self.counted_with = in_scope
        return self.answers


class SessionMessages:
    """Which message ids each session holds, for one ``state.db``, remembered by the process and
    brought up to date by reading only the messages added since the last call.

    Why it exists: FTS5 knows nothing of sessions, so a scope filter used to join every match to
    ``messages``, in scope or not, before bm25 was sorted. At 300k messages the join cost more than
    the match itself (a common word matches a third of the table, most of it in other projects).
    The scope's message ids, registered as an SQL function (``dict.__contains__``, called from C),
    let FTS5 stay alone on its table and compute bm25 for in-scope rows only: faster than the join
    and than Hermes's own ``search_messages`` for the same MATCH (docs/benchmarks.md).

    Exact by construction: a message's session never changes and ids only grow (AUTOINCREMENT), so
    appending what lies above the newest id seen keeps every list complete. Ids of every role are
    kept: Hermes's ``(session_id, ...)`` index holds them, so a scope loads from the index alone,
    without reading a row for its role. Role and liveness are checked on the rows read
    (:meth:`FullTextReader.fts_messages`): a tool row can be ranked, never returned.
    """

    #: Scopes kept at once (each costs about 80 bytes per message). One evicted is rebuilt from
    #: the per-session arrays (8 bytes per message, all kept), never loaded from SQL again. A
    #: project of more than ``rank.COMMON_RECENT_CONVERSATIONS`` conversations uses two (its
    #: scope, and its recent conversations that ``rank.common_words`` counts in, whose answers go
    #: with the set): four keep two such projects' answers while a gateway alternates between them.
    MAX_SCOPES = 4
    #: More new messages than this since the last call: forget everything and load what is asked
    #: (reading only the scope's sessions), instead of reading every new message of the home.
    MAX_CATCH_UP = 50_000

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ident: tuple[int, int] | None = None
        self.top = 0  # every user/assistant message up to this id is in by_session, for its sessions
        self.by_session: dict[str, array] = {}
        self.scopes: OrderedDict[frozenset[str], ScopeIds] = OrderedDict()
        self.asked: OrderedDict[frozenset[str], None] = OrderedDict()  # asked once, not loaded

    def _reset(self, ident: tuple[int, int] | None) -> None:
        self.ident, self.top = ident, 0
        self.by_session.clear()
        self.scopes.clear()
        self.asked.clear()

    def members(
        self,
        conn: sqlite3.Connection,
        ident: tuple[int, int] | None,
        sessions: Iterable[str],
        load: bool = False,
    ) -> ScopeIds | None:
        """Every message of these sessions, live or not, as of now; None the first time a scope
        with sessions not known yet is asked for.

        Loading a scope costs more than one search's join for most queries, and a process that
        searches once (every ``hermes chat -q``) would never get it back. So a scope is loaded when
        a later search asks for it again (a search asks once: :meth:`FullTextReader.scope_members`), or
        at once with ``load``.
        """
        wanted = frozenset(sessions)
        with self.lock:
            if ident != self.ident:  # another file under the same path: nothing known holds
                self._reset(ident)
            self._catch_up(conn)
            missing = [sid for sid in wanted if sid not in self.by_session]
            if missing:
                if not load and wanted not in self.asked:
                    self.asked[wanted] = None
                    while len(self.asked) > 2 * self.MAX_SCOPES:
                        self.asked.popitem(last=False)
                    return None
                self._load(conn, missing)
            scope = self.scopes.get(wanted)
            if scope is None:
                owner: dict[int, str] = {}
                for sid in wanted:
                    owner.update(dict.fromkeys(self.by_session[sid], sid))
                scope = self.scopes[wanted] = ScopeIds(owner)
                while len(self.scopes) > self.MAX_SCOPES:
                    self.scopes.popitem(last=False)
            else:
                self.scopes.move_to_end(wanted)
            return scope

    def _catch_up(self, conn: sqlite3.Connection) -> None:
        top = conn.execute("SELECT max(id) FROM messages").fetchone()[0] or 0
        if top < self.top or top - self.top > self.MAX_CATCH_UP:
            self._reset(self.ident)  # the newest messages were deleted, or far too much is new
        if not self.by_session:
            self.top = top
            return
        if top == self.top:
            return
        rows = conn.execute(
            "SELECT m.id, m.session_id FROM messages m WHERE m.id > ? AND m.id <= ?", (self.top, top)
        )
        for message_id, session_id in rows:
            ids = self.by_session.get(session_id)
            if ids is None:
                continue
            ids.append(message_id)
            for sessions, scope in self.scopes.items():
                if session_id in sessions:
                    scope.add(message_id, session_id)
        self.top = top

    def _load(self, conn: sqlite3.Connection, session_ids: Sequence[str]) -> None:
        """The messages of these sessions up to :attr:`top` (newer ones come with the next catch-up),
        read from Hermes's ``(session_id, ...)`` index alone."""
        loaded: dict[str, array] = {sid: array("q") for sid in session_ids}
        rows = conn.execute(
            "SELECT m.session_id, m.id FROM json_each(?) AS wanted "
            "CROSS JOIN messages m ON m.session_id = wanted.value WHERE m.id <= ?",
            (json.dumps(list(session_ids)), self.top),
        )
        for session_id, message_id in rows:
            loaded[session_id].append(message_id)
        self.by_session.update(loaded)


class ScopeIdRegisters:
    """The process's :class:`SessionMessages`, one per ``state.db`` path; owned by the plugin's
    :class:`ProcessState`."""

    LIMIT = 8

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._registers: dict[str, SessionMessages] = {}

    def for_path(self, path: Path) -> SessionMessages:
        key = str(path)
        with self._lock:
            register = self._registers.get(key)
            if register is None:
                if len(self._registers) >= self.LIMIT:
                    self._registers.clear()
                register = self._registers[key] = SessionMessages()
            return register


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


class FullTextReader:
    """Full-text reads over one call's ``state.db`` connection, with the process's memory of the
    scope's message ids (``registers``; None: every scope is joined, nothing is remembered)."""

    def __init__(
        self,
        db: HermesDB,
        registers: ScopeIdRegisters | None = None,
        titles: Mapping[str, tuple[str, str]] | None = None,
    ) -> None:
        self.db = db
        self.conn = db.conn
        self.schema = db.schema
        #: session -> (title, as SQLite lowercases it) of the titled sessions, as the scope's
        #: snapshot read them with the session rows (:meth:`store.HermesDB.session_links`);
        #: None: read when asked
        self.titles = titles
        self._register = registers.for_path(db.env.state_db) if registers is not None else None
        self._members: dict[frozenset[str], ScopeIds | None] = {}
        self.out_of_time = False  # a statement was stopped at the deadline (:meth:`deadline`)
        self.locked_out = False  # ... because another connection held state.db locked until then

    @contextmanager
    def deadline(self, at: float | None) -> Iterator[None]:
        """Within this block SQLite stops any statement of this connection once
        ``time.monotonic()`` passes ``at``: the progress handler interrupts it
        (``sqlite3.OperationalError``, "interrupted") and :attr:`out_of_time` is set, so that the
        ranking keeps what it has instead of taking the error for a bad FTS query (issue 18.11:
        a long LIKE scan once took 22 s). None: no deadline.

        A lock another connection holds on state.db is waited for until ``at`` at most (SQLite's
        busy timeout is cut to what is left): a statement still locked out then fails as one
        stopped at the deadline would, with :attr:`locked_out` set as well."""
        if at is None:
            yield
            return

        def past_deadline() -> int:
            if _now() > at:
                self.out_of_time = True
                return 1
            return 0

        set_busy_timeout(self.conn, max(0.0, at - _now()))
        self.conn.set_progress_handler(past_deadline, PROGRESS_STEPS)
        try:
            yield
        finally:
            self.conn.set_progress_handler(None, 0)

    def stopped(self, error: BaseException) -> bool:
        """Did ``error`` end a read at the deadline: interrupted by it, or locked out until it
        (:func:`store.is_busy`)? Then the ranking keeps what was read, and nothing is retried."""
        if is_busy(error):
            self.out_of_time = self.locked_out = True
        return self.out_of_time

    def fts_messages(
        self,
        table: str,
        match: str,
        in_scope: Mapping[str, str],
        scan_limit: int,
        enough_groups: int | None = None,
        per_session: int = PER_SESSION_SCAN,
        with_content: bool = True,
        activity_per_session: int = 0,
        activity_limit: int = 0,
    ) -> list[dict]:
        """Live user/assistant messages of the sessions in ``in_scope`` matching ``match``, best
        bm25 first.

        One FTS query shaped like Hermes's own ``search_messages`` (``MATCH``, ``ORDER BY rank``),
        with the scope applied before bm25 is sorted, in one of two ways that give the same rows:

        * a scope this process knows (:class:`SessionMessages`) is a set of message ids asked
          through an SQL function (``set.__contains__``), so FTS5 stays alone on its table and
          computes bm25 for in-scope rows only; no out-of-scope row is ever joined
          (docs/benchmarks.md).
          Ordering by ``rank, rowid`` rather than ``rank`` keeps FTS5 from ranking every match
          first. The rows read are checked in blocks for what can change (still live) and what
          must hold (the session is in scope);
        * otherwise (a scope's first search in this process) every match is joined to
          ``messages`` and filtered there (``CROSS JOIN`` keeps the FTS table outer: driven from
          the scope's sessions, SQLite would re-run the MATCH per message).

        Rows stream in rank order, at most ``per_session`` (default :data:`PER_SESSION_SCAN`) per
        session (one conversation repeating a word hundreds of times cannot fill ``scan_limit`` and
        hide every other one). ``in_scope`` maps each session to its conversation; with
        ``enough_groups`` reading stops once that many conversations have a message, since nothing
        read later can rank above them. Contents are read for the kept rows only (``with_content``).
        Messages without text never match; ``tool_meta`` says that the row also has tool-call
        columns, which the FTS tables index with its text (:meth:`tool_texts`).

        ``activity_per_session``: also keep up to that many matching rows per session of what the
        agent did and saw (``tool`` rows, assistant rows with only ``tool_calls``), marked
        ``activity``, the best ``activity_limit`` of them in all (each is looked up again for its
        turn); they count towards no other limit and are never results themselves: retrieval
        credits them to the message that opened their turn (:meth:`turn_openers`; issue 30.1).
        """
        match = self._text_match(table, match)
        members = self.scope_members(in_scope)
        cursor = self.conn.cursor()
        cursor.row_factory = None
        kept: list[dict[str, Any]] = []
        activity: list[dict[str, Any]] = []
        taken: dict[str, int] = {}
        seen_activity: dict[str, int] = {}
        groups: set[str] = set()
        try:
            for message_id, session_id, role, timestamp, rank, tool_meta, spoken in self._ranked(
                cursor,
                table,
                match,
                in_scope,
                members,
                lambda: scan_limit - len(kept),
                lambda: activity_per_session > 0 and len(activity) < activity_limit,
            ):
                if not spoken:
                    if (
                        seen_activity.get(session_id, 0) < activity_per_session
                        and len(activity) < activity_limit
                    ):
                        seen_activity[session_id] = seen_activity.get(session_id, 0) + 1
                        activity.append(
                            {
                                "message_id": message_id,
                                "session_id": session_id,
                                "role": role,
                                "rank": rank,
                                "timestamp": timestamp,
                                "tool_meta": True,
                                "activity": True,
                            }
                        )
                    continue
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
                        "tool_meta": bool(tool_meta),
                    }
                )
                if len(kept) >= scan_limit or (enough_groups and len(groups) >= enough_groups):
                    break
        finally:
            cursor.close()
        return (self._with_content(kept) if with_content else kept) + activity

    def _text_match(self, table: str, match: str) -> str:
        """``match`` limited to the message text: upstream's ``messages_fts`` also indexes tool
        columns."""
        if table == "messages_fts" and len(self.schema.fts_columns) > 1:
            return f"{{{self.schema.fts_columns[0]}}} : ({match})"
        return match

    def scope_members(self, session_ids: Iterable[str], load: bool = False) -> ScopeIds | None:
        """:meth:`SessionMessages.members` for this call, asked once per scope however many FTS
        passes the search makes (a first search's OR pass must not load what its AND pass joined);
        ``load``: now, for a caller that cannot do without it."""
        wanted = frozenset(session_ids)
        if self._register is None:
            if not load:
                return None
            register = SessionMessages()  # this call's alone
            return register.members(self.conn, self.db.ident, wanted, load=True)
        if self._members.get(wanted) is None and (load or wanted not in self._members):
            self._members[wanted] = self._register.members(self.conn, self.db.ident, wanted, load=load)
        return self._members[wanted]

    def _ranked(
        self,
        cursor: sqlite3.Cursor,
        table: str,
        match: str,
        in_scope: Mapping[str, str],
        members: ScopeIds | None,
        wanted: Callable[[], int],
        activity: Callable[[], bool] = lambda: False,
    ) -> Iterator[tuple[int, str, str, Any, float, int, int]]:
        """(id, session, role, timestamp, rank, tool_meta, spoken) of the live in-scope matches
        with text (``spoken`` 1), and while ``activity()`` holds also of its tool rows and
        assistant rows without text (``spoken`` 0), best first; ``wanted()``: how many more rows
        the reader would keep now (a block is read no larger, and no smaller than the first).
        Once the reader wants no more activity, a block's tool rows are left at their role: their
        later columns (the liveness, the timestamp) lie past a large output's overflow pages."""
        if members is None:
            activity_wanted = activity()
            columns = f"m.id, m.session_id, m.role, m.timestamp, f.rank, {self._tool_meta_sql}, {_SPOKEN_SQL}"
            yield from cursor.execute(
                self._joined_matches_sql(table, columns, activity_wanted) + " ORDER BY f.rank, m.id",
                (match, json.dumps(list(in_scope))),
            )
            return
        self.conn.create_function("phr_in_scope", 1, members.owner.__contains__)
        cursor.execute(
            f"SELECT f.rowid, f.rank FROM {table} f WHERE {table} MATCH ? "
            f"AND f.rowid BETWEEN ? AND ? AND phr_in_scope(f.rowid) ORDER BY f.rank, f.rowid",
            (match, members.low, members.high),
        )
        for step in itertools.count():
            size = max(FTS_BLOCKS[0], min(FTS_BLOCKS[min(step, len(FTS_BLOCKS) - 1)], wanted()))
            block = cursor.fetchmany(size)
            if not block:
                return
            live = self._live_conversational([message_id for message_id, _ in block], activity())
            for message_id, rank in block:
                found = live.get(message_id)
                if found is not None and found[0] in in_scope:  # else rewound since, or not ours
                    session_id, role, timestamp, tool_meta, spoken = found
                    yield (message_id, session_id, role, timestamp, rank, tool_meta, spoken)

    def _joined_matches_sql(self, table: str, columns: str, activity: bool = False) -> str:
        """``columns`` of every match of a ``MATCH ?`` joined to its live user/assistant message with
        text (``activity``: or its live tool row, or assistant row without text) in the sessions of
        a JSON list (``?``): the plan for a scope whose ids this process does not hold (``CROSS
        JOIN`` keeps the FTS table outer: driven from the scope's sessions, SQLite would re-run the
        MATCH per message)."""
        return (
            f"SELECT {columns} FROM {table} f CROSS JOIN messages m ON m.id = f.rowid "
            f"WHERE {table} MATCH ? AND {_rows_sql(activity)} AND {self.schema.live_message_sql} "
            f"AND {_SCOPE_SQL}"
        )

    @property
    def _tool_meta_sql(self) -> str:
        """Does the row hold indexed text besides its words: tool-call columns, or a multimodal
        row's JSON (``\\x00json:``, whose keys and URLs the FTS tables index too)?"""
        columns = [c for c in ("tool_calls", "tool_name") if c in self.schema.message_columns]
        # Starts with NUL: a comparison stops at the first byte; instr() would scan the whole
        # text of every candidate (3x the cost of the block's read on 12k-character messages).
        checks = [f"m.{c} IS NOT NULL" for c in columns] + ["(m.content >= char(0) AND m.content < char(1))"]
        return "(" + " OR ".join(checks) + ")"

    def _live_conversational(
        self, message_ids: Sequence[int], activity: bool = False
    ) -> dict[int, tuple[str, str, Any, int, int]]:
        """(session, role, timestamp, tool_meta, spoken) of those of these messages that are live
        user/assistant rows with text (``spoken`` 1), and with ``activity`` also live tool rows
        and assistant rows without text (``spoken`` 0)."""
        found = self.conn.execute(
            f"SELECT m.id, m.session_id, m.role, m.timestamp, {self._tool_meta_sql}, {_SPOKEN_SQL} "
            f"FROM messages m WHERE m.id IN (SELECT value FROM json_each(?)) AND {_rows_sql(activity)} "
            f"AND {self.schema.live_message_sql}",
            (json.dumps(list(message_ids)),),
        ).fetchall()
        return {row[0]: (row[1], row[2], row[3], row[4], row[5]) for row in found}

    def turn_openers(
        self, message_ids: Iterable[int], own_tools: Sequence[str]
    ) -> dict[int, tuple[int, Any]]:
        """For each of these rows of what the agent did or saw (a ``tool`` row, an assistant row's
        ``tool_calls``), the live user message with text that opened its turn: row id -> (that
        message's id, its timestamp). Rows of ``own_tools`` (the plugin's own calls, named or
        answering a call of one, and assistant rows calling one) have none: the plugin's own
        calls and results are never evidence (spec 19.4)."""
        ids = list(dict.fromkeys(message_ids))
        if not ids:
            return {}
        named: dict[str, Any] = {f"own{i}": tool for i, tool in enumerate(own_tools)}
        own = [self._results_of_sql("t", list(named))]
        if "tool_calls" in self.schema.message_columns:  # an assistant row calling one
            own += [
                f"(t.role = 'assistant' AND instr(COALESCE(t.tool_calls, ''), :{key}) > 0)" for key in named
            ]
        not_own = f"NOT ({' OR '.join(own)})"
        named["ids"] = json.dumps(ids)
        # Walking back from the row (a turn's rows follow its user message): _session_end_sql.
        rows = self.conn.execute(
            f"""
            WITH opened AS (
                SELECT t.id AS id, (
                    SELECT m.id FROM messages m
                    WHERE m.id < t.id AND m.id >= {_session_end_sql("t.session_id", "min")}
                      AND +m.session_id = t.session_id
                      AND m.role = 'user' AND {self.schema.live_message_sql} AND {_HAS_TEXT_SQL}
                    ORDER BY m.id DESC LIMIT 1
                ) AS opener
                FROM json_each(:ids) AS wanted CROSS JOIN messages t ON t.id = wanted.value
                WHERE {not_own}
            )
            SELECT opened.id, opened.opener, m.timestamp
            FROM opened CROSS JOIN messages m ON m.id = opened.opener
            """,
            named,
        ).fetchall()
        return {row[0]: (row[1], row[2]) for row in rows}

    def tool_texts(self, message_ids: Iterable[int]) -> dict[int, tuple[str, str]]:
        """(text, tool-call text) of these messages: what the FTS tables index besides the text."""
        columns = [c for c in ("tool_name", "tool_calls") if c in self.schema.message_columns]
        meta = " || ' ' || ".join(f"COALESCE(m.{c}, '')" for c in columns) or "''"
        rows = self.conn.execute(
            f"SELECT m.id, m.content, {meta} FROM messages m WHERE m.id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(message_ids)),),
        ).fetchall()
        return {row[0]: (row[1] or "", row[2] or "") for row in rows}

    def activity_texts(self, rows: Mapping[int, int]) -> dict[int, str]:
        """``rows``: shown message -> a row of tool activity credited to it. The text of each such
        row as the FTS tables matched it: a tool row's output, an assistant row's tool calls."""
        if not rows or "tool_calls" not in self.schema.message_columns:
            return {}
        texts = dict(
            self.conn.execute(
                "SELECT m.id, CASE WHEN m.role = 'tool' THEN m.content ELSE m.tool_calls END FROM messages m "
                "WHERE m.id IN (SELECT value FROM json_each(?))",
                (json.dumps(list(set(rows.values()))),),
            ).fetchall()
        )
        return {shown: texts[row] for shown, row in rows.items() if isinstance(texts.get(row), str)}

    def own_tool_results(self, session_ids: Iterable[str], tool: str, limit: int, chars: int) -> list[tuple]:
        """(session, text) of the ``tool`` rows (the plugin's own results) of these sessions: rows
        of role ``tool`` named ``tool``, or answering a call of ``tool`` in the same session's
        assistant ``tool_calls``; at most ``limit`` rows, the first ``chars`` characters of each.
        A chat that holds one recalled other conversations (``retrieval.recall_citations``)."""
        own = self._results_of_sql("m", ["tool"])
        if own == "0":
            return []
        sessions = self._sessions_naming(session_ids, tool)
        if not sessions:
            return []
        rows = self.conn.execute(
            "SELECT m.session_id, substr(m.content, 1, :chars) FROM messages m "
            "WHERE m.session_id IN (SELECT value FROM json_each(:sessions)) AND m.role = 'tool' "
            f"AND {self.schema.live_message_sql} AND {own} ORDER BY m.id LIMIT :limit",
            {"tool": tool, "chars": chars, "sessions": json.dumps(sorted(sessions)), "limit": limit},
        ).fetchall()
        return [(row[0], row[1] or "") for row in rows]

    def _sessions_naming(self, session_ids: Iterable[str], tool: str) -> set[str]:
        """Those of these sessions with a row whose indexed text names ``tool``: every result of a
        tool names it in the FTS table, as its ``tool_name`` or in its session's assistant
        ``tool_calls`` (both indexed with the text), so :meth:`own_tool_results` reads the rows of
        these few sessions instead of every tool row of every candidate. All of them without an
        FTS table."""
        wanted = set(session_ids)
        if not self.schema.fts_columns:
            return wanted
        rows = self.conn.execute(
            "SELECT DISTINCT m.session_id FROM messages_fts f CROSS JOIN messages m ON m.id = f.rowid "
            f"WHERE messages_fts MATCH ? AND {_SCOPE_SQL}",
            ('"' + tool.replace('"', '""') + '"', json.dumps(sorted(wanted))),
        ).fetchall()
        return {row[0] for row in rows}

    def _results_of_sql(self, alias: str, keys: Sequence[str]) -> str:
        """Is the message row ``alias`` a result of one of the tools named by the parameters
        ``keys``: a ``tool`` row named so, or, without its name, answering a call of one in its
        session's assistant ``tool_calls``? ("0" when the schema can tell neither.) Never NULL (``NOT``
        of a NULL would drop the row), and plain ``AND``/``OR`` terms a ``WHERE`` clause can stop
        at the first that decides: inside an expression such as ``COALESCE`` SQLite computes
        every term, the correlated subquery too, for every row."""
        columns = self.schema.message_columns
        tools = ", ".join(f":{key}" for key in keys)
        found = []
        if "tool_name" in columns:
            named = f"{alias}.tool_name IS NOT NULL AND {alias}.tool_name IN ({tools})"
            found.append(f"({alias}.role = 'tool' AND {named})")
        if {"tool_call_id", "tool_calls"} <= columns:  # a row without its name answers a call of it
            unnamed = f"{alias}.tool_name IS NULL AND " if "tool_name" in columns else ""
            mentions = " OR ".join(f"a.tool_calls LIKE '%' || :{key} || '%'" for key in keys)
            found.append(
                f"({alias}.role = 'tool' AND {unnamed}{alias}.tool_call_id IS NOT NULL "
                f"AND {alias}.tool_call_id IN ("
                "SELECT json_extract(c.value, '$.id') FROM messages a, json_each(a.tool_calls) c "
                f"WHERE a.session_id = {alias}.session_id AND a.role = 'assistant' AND ({mentions}) "
                f"AND json_valid(a.tool_calls) AND json_extract(c.value, '$.function.name') IN ({tools}) "
                "AND json_extract(c.value, '$.id') IS NOT NULL))"
            )
        return f"({' OR '.join(found)})" if found else "0"

    def session_titles(
        self, session_ids: Sequence[str], needles: Sequence[str]
    ) -> tuple[int, list[int], list[tuple[str, str]]]:
        """Of these sessions' titles (Hermes's one-line summaries), when one or more hold one of
        ``needles`` (lowercase, as a substring of the ASCII-lowercased title, as SQLite's
        ``lower`` has it): how many titles there are, how many hold each needle, and (session,
        title) of those that hold one; else ``(0, [0, ...], [])``. The titles are the scope's
        (:attr:`titles`, read with the session rows), else read now."""
        if not session_ids or not needles:
            return 0, [0] * len(needles), []
        titles = self._titles_of(session_ids)
        lowered = [low for _, _, low in titles]
        holders = [[i for i, low in enumerate(lowered) if needle in low] for needle in needles]
        held = [titles[i][:2] for i in sorted(set().union(*holders))]
        holding = [len(found) for found in holders]
        if not held:
            return 0, [0] * len(needles), []
        return len(titles), holding, held

    def _titles_of(self, session_ids: Sequence[str]) -> list[tuple[str, str, str]]:
        """(session, title, title as SQLite lowercases it) of those of these sessions that have a
        title, in their order."""
        if self.titles is not None:
            known = self.titles
            return [(sid, *known[sid]) for sid in session_ids if sid in known]
        if "title" not in self.schema.session_columns:
            return []
        rows = dict(
            self.conn.execute(
                "SELECT s.id, s.title FROM sessions s WHERE s.id IN (SELECT value FROM json_each(?)) "
                "AND s.title IS NOT NULL AND s.title != ''",
                (json.dumps(list(session_ids)),),
            ).fetchall()
        )
        return [(sid, rows[sid], sqlite_lower(rows[sid])) for sid in session_ids if sid in rows]

    def first_user_messages(self, session_ids: Sequence[str]) -> dict[str, tuple[int, Any]]:
        """session -> (id, timestamp) of its first live user message with text (what a result
        found by its title alone shows)."""
        if not session_ids:
            return {}
        # Walking forward from each session's first id: _session_end_sql.
        rows = self.conn.execute(
            f"""
            WITH bounds AS (
                SELECT wanted.value AS sid, {_session_end_sql("wanted.value", "min")} AS first,
                  {_session_end_sql("wanted.value", "max")} AS last
                FROM json_each(?) AS wanted
            )
            SELECT bounds.sid, (
                SELECT m.id FROM messages m WHERE m.id >= bounds.first AND m.id <= bounds.last
                  AND +m.session_id = bounds.sid AND m.role = 'user'
                  AND {self.schema.live_message_sql} AND {_HAS_TEXT_SQL}
                ORDER BY m.id LIMIT 1
            ) FROM bounds WHERE bounds.first IS NOT NULL
            """,
            (json.dumps(list(dict.fromkeys(session_ids))),),
        ).fetchall()
        first = {row[0]: row[1] for row in rows if row[1] is not None}
        if not first:
            return {}
        stamps = dict(
            self.conn.execute(
                "SELECT m.id, m.timestamp FROM messages m WHERE m.id IN (SELECT value FROM json_each(?))",
                (json.dumps(list(first.values())),),
            ).fetchall()
        )
        return {sid: (mid, stamps.get(mid)) for sid, mid in first.items()}

    def containing(self, message_ids: Iterable[int], needles: Sequence[str]) -> dict[int, int]:
        """How many of ``needles`` each of these messages' text contains (case as written: the
        needles are CJK), for the messages that contain one or more."""
        ids = list(message_ids)
        if not ids or not needles:
            return {}
        count = " + ".join("(instr(m.content, ?) > 0)" for _ in needles)
        rows = self.conn.execute(
            f"SELECT m.id, {count} FROM messages m WHERE m.id IN (SELECT value FROM json_each(?))",
            (*needles, json.dumps(ids)),
        ).fetchall()
        return {row[0]: row[1] for row in rows if row[1]}

    def contents(self, message_ids: Iterable[int]) -> dict[int, Any]:
        """The stored content of these messages (for the rows a search returns)."""
        rows = self.conn.execute(
            "SELECT m.id, m.content FROM messages m WHERE m.id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(message_ids)),),
        ).fetchall()
        return {row[0]: row[1] for row in rows}

    def answer_windows(self, message_ids: Iterable[int]) -> dict[int, tuple[str, Any]]:
        """What answers each of these shown messages, in one query (issue 30.3): for a user
        message, the last assistant words of its turn (the fix follows the error; Hermes splits a
        turn into an assistant row with only ``tool_calls``, ``tool`` rows, then the words, and only
        rows with text count); for an assistant message, the user message it answered. Always of
        the message's own session (nothing of another project), live user/assistant rows only, so
        no tool output and none of the plugin's own results: message id -> (role, content)."""
        ids = list(dict.fromkeys(message_ids))
        if not ids:
            return {}
        live = self.schema.live_message_sql
        # Each lookup walks from the hit within its session's first and last ids: _session_end_sql.
        sql = f"""
            WITH hit AS (
                SELECT m.id AS id, m.session_id AS sid, m.role AS role,
                  {_session_end_sql("m.session_id", "min")} AS first,
                  {_session_end_sql("m.session_id", "max")} AS last
                FROM json_each(?) AS wanted CROSS JOIN messages m ON m.id = wanted.value
                WHERE m.role IN ('user', 'assistant')
            ),
            turn AS (
                SELECT hit.id, hit.sid, COALESCE((
                    SELECT m.id FROM messages m WHERE m.id > hit.id AND m.id <= hit.last
                      AND +m.session_id = hit.sid AND m.role = 'user' AND {live} ORDER BY m.id LIMIT 1
                ), hit.last + 1) AS ends
                FROM hit WHERE hit.role = 'user'
            ),
            near AS (
                SELECT turn.id AS hit_id, (
                    SELECT m.id FROM messages m WHERE m.id > turn.id AND m.id < turn.ends
                      AND +m.session_id = turn.sid AND m.role = 'assistant' AND {live} AND {_HAS_TEXT_SQL}
                    ORDER BY m.id DESC LIMIT 1
                ) AS near_id FROM turn
                UNION ALL
                SELECT hit.id, (
                    SELECT m.id FROM messages m WHERE m.id < hit.id AND m.id >= hit.first
                      AND +m.session_id = hit.sid AND m.role = 'user' AND {live} AND {_HAS_TEXT_SQL}
                    ORDER BY m.id DESC LIMIT 1
                ) FROM hit WHERE hit.role = 'assistant'
            )
            SELECT near.hit_id, m.role, m.content FROM near CROSS JOIN messages m ON m.id = near.near_id
        """
        rows = self.conn.execute(sql, (json.dumps(ids),)).fetchall()
        return {row[0]: (row[1], row[2]) for row in rows}

    def _with_content(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not rows:
            return rows
        by_id = self.contents(row["message_id"] for row in rows)
        for row in rows:
            row["content"] = by_id.get(row["message_id"])
        return rows

    def in_conversations(self, table: str, match: str, in_scope: Mapping[str, str], at_least: int) -> bool:
        """Do at least ``at_least`` of ``in_scope``'s conversations (its values) have a live
        user/assistant message matching ``match``? For ``rank.common_words``.

        Counting by joining every global match costs as much for a small project as for the
        whole home. Here FTS5 reads only the scope's id range and asks the scope's ids
        (:meth:`scope_members`, loaded now if need be), which name each row's session, so only one
        row per conversation not yet counted is checked for role and liveness (in batches; a row
        that fails gives way to the conversation's next); reading stops once enough are counted
        (grouping the rows per session in SQL instead was slower: it cannot stop early). The
        answer is kept with the scope until it gains a message (:class:`ScopeIds`).
        """
        return len(self.conversations_with(table, match, in_scope, at_least)) >= at_least

    def conversations_with(
        self,
        table: str,
        match: str,
        in_scope: Mapping[str, str],
        enough: int,
        load: bool = True,
        activity: bool = False,
    ) -> frozenset[str]:
        """The conversations of ``in_scope`` with a live user/assistant message matching ``match``
        (``activity``: or a live row of what the agent did or saw, a tool row or call), read until
        ``enough`` are found (so all of them when fewer); as :meth:`in_conversations` reads them,
        and kept with the scope in the same way. ``load=False``: a scope this process has not
        loaded is not loaded for this (a rare phrase's matches are fewer than a large scope's
        ids): its matches are joined to ``messages`` instead, and nothing is kept."""
        scope = self.scope_members(in_scope, load=load)
        if scope is None:
            return self._conversations_joined(table, match, in_scope, enough, activity)
        key = (table, match, enough, activity)
        answers = scope.answers_for(in_scope)
        known = answers.get(key)
        if known is not None:
            return known
        match = self._text_match(table, match)
        owner = scope.owner
        self.conn.create_function("phr_in_scope", 1, owner.__contains__)
        counted: set[str] = set()
        waiting: dict[str, list[int]] = {}  # conversation -> its rows not checked yet, oldest first
        batch: dict[str, int] = {}  # conversation -> the row being checked for it

        def refill() -> None:  # the next row of each conversation not decided, not being checked
            for conversation, rows in waiting.items():
                if rows and conversation not in batch:
                    batch[conversation] = rows.pop(0)

        def check() -> None:
            live = self._live_conversational(list(batch.values()), activity)
            for conversation, message_id in batch.items():
                if message_id in live:
                    counted.add(conversation)
                    waiting.pop(conversation, None)
            batch.clear()
            refill()

        cursor = self.conn.cursor()
        cursor.row_factory = None
        try:
            cursor.execute(
                f"SELECT f.rowid FROM {table} f WHERE {table} MATCH ? "
                "AND f.rowid BETWEEN ? AND ? AND phr_in_scope(f.rowid)",
                (match, scope.low, scope.high),
            )
            for (message_id,) in cursor:
                conversation = in_scope.get(owner[message_id])
                if conversation is None or conversation in counted:
                    continue
                if conversation in batch or conversation in waiting:
                    waiting.setdefault(conversation, []).append(message_id)
                    continue
                batch[conversation] = message_id
                if len(batch) >= 256:
                    check()
                    if len(counted) >= enough:
                        break
            while len(counted) < enough and (batch or any(waiting.values())):
                refill()  # rows that came after their conversation's last check
                check()
        finally:
            cursor.close()
        answer = frozenset(counted)
        answers[key] = answer
        return answer

    def _conversations_joined(
        self, table: str, match: str, in_scope: Mapping[str, str], enough: int, activity: bool = False
    ) -> frozenset[str]:
        """:meth:`conversations_with` for a scope not loaded: every match joined to ``messages``
        (the FTS table outer), read until ``enough`` conversations are found."""
        found: set[str] = set()
        cursor = self.conn.cursor()
        cursor.row_factory = None
        try:
            cursor.execute(
                self._joined_matches_sql(table, "m.session_id", activity),
                (self._text_match(table, match), json.dumps(list(in_scope))),
            )
            for (session_id,) in cursor:
                found.add(in_scope[session_id])
                if len(found) >= enough:
                    break
        finally:
            cursor.close()
        return frozenset(found)

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

        Every message of the scope is read, unless all terms must match and some have three
        characters or more: then the trigram table names the candidates (a case-insensitive
        substring index, so a superset of what LIKE accepts for those terms) and LIKE decides
        for them alone (docs/benchmarks.md).
        """
        if not terms:
            return []
        long_terms = [t for t in terms if len(t) >= 3]
        if require_all and not expression and long_terms and self.schema.has_trigram:
            match = " ".join('"' + t.replace('"', '""') + '"' for t in long_terms)
            try:
                return self._like(terms, session_ids, require_all, scan_limit, None, match)
            except sqlite3.OperationalError as error:
                if self.stopped(error):
                    raise
                logger.debug("trigram candidates for %r failed (%s); reading the scope", match, error)
        return self._like(terms, session_ids, require_all, scan_limit, expression, None)

    def _like(
        self,
        terms: Sequence[str],
        session_ids: Sequence[str],
        require_all: bool,
        scan_limit: int,
        expression: Sequence[tuple[str, str]] | None,
        trigram_match: str | None,
    ) -> list[dict[str, Any]]:
        hits = " + ".join(_like("m.content") for _ in terms)
        condition_params: Sequence[str | int]
        if expression:
            condition, condition_params = _like_boolean(expression, "content")
        else:
            condition, condition_params = "matched >= ?", [len(terms) if require_all else 1]
        if trigram_match is None:
            source, source_params = "messages m", []
        else:  # CROSS JOIN keeps the FTS table outer (see fts_messages)
            source = "messages_fts_trigram f CROSS JOIN messages m ON m.id = f.rowid"
            source_params = [trigram_match]
        match_sql = "messages_fts_trigram MATCH ? AND" if trigram_match is not None else ""
        sql = f"""
            SELECT message_id, session_id, role, content, timestamp, matched FROM (
                SELECT *, ROW_NUMBER() OVER (
                    PARTITION BY session_id ORDER BY matched DESC, message_id DESC
                ) AS nth
                FROM (
                    SELECT m.id AS message_id, m.session_id, m.role, m.content, m.timestamp,
                           ({hits}) AS matched
                    FROM {source}
                    WHERE {match_sql} m.role IN ('user', 'assistant')
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
            *source_params,
            json.dumps(list(session_ids)),
            *condition_params,
            PER_SESSION_SCAN,
            scan_limit,
        ]
        return [dict(row) for row in self.conn.execute(sql, params).fetchall()]

    # ----------------------------------------------------------------------- what the index covers
