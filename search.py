"""Project-scoped retrieval: scope, keyword search, semantic search and their fusion.

Everything here composes :mod:`attribution` (who is in the project) and :mod:`store` (what the
databases say). Scope is decided once, in Python, by :func:`attribution.sessions_in_project`;
both the keyword and the semantic path receive the same list of session ids, so they cannot
disagree about what "this project" means.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from . import attribution, store

logger = logging.getLogger(__name__)

MAX_QUERY_CHARS = 2048
MAX_TERMS = 32
SCAN_LIMIT = 300  # message rows read per query step before reducing to sessions
SNIPPET_CHARS = 240
MODES = ("hybrid", "keyword", "semantic")

NO_PROJECT_CONTEXT = "No project context (no working directory recorded)"
NO_PROJECT_FOR_CWD = "No project context (the working directory is in no project or git repository)"
NO_OTHER_SESSIONS = "No other sessions in this project"

_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ebef]")
_WORD_CHAR = re.compile(r"\w")
_OPERATORS = ("AND", "OR", "NOT")
# Words that carry no topic; dropped only when a natural-language query is relaxed to OR,
# where they would otherwise match nearly every message.
_STOPWORDS = frozenset(
    """a about above after again all am an and any are as at be been before being below between
    both but by can could did do does doing done down during each few for from further had has
    have having he her here hers him his how i if in into is it its itself just me more most my
    no nor not now of off on once only or other our ours out over own same she should so some
    such than that the their theirs them then there these they this those through to too under
    until up very was we were what when where which while who whom why will with would you your
    yours yourself let lets us we've i'm it's don't didn't""".split()
)


# --------------------------------------------------------------------------- query planning


@dataclass(frozen=True)
class Term:
    text: str
    prefix: bool = False

    @property
    def fts(self) -> str:
        """One FTS5 phrase: quoting makes every character literal, so nothing can break MATCH."""
        return '"' + self.text.replace('"', '""') + '"' + ("*" if self.prefix else "")

    @property
    def has_cjk(self) -> bool:
        return bool(_CJK.search(self.text))


@dataclass(frozen=True)
class QueryPlan:
    """The query as FTS5 can take it: terms (words or user phrases) and the user's operators."""

    items: tuple[Term | str, ...]
    terms: tuple[Term, ...]

    @property
    def has_operators(self) -> bool:
        return any(isinstance(item, str) for item in self.items)

    @property
    def has_cjk(self) -> bool:
        return any(term.has_cjk for term in self.terms)

    def match_all(self) -> str:
        return " ".join(item.fts if isinstance(item, Term) else item for item in self.items)

    def topical(self) -> list[Term]:
        """The terms that carry a topic: stopwords dropped, unless nothing else is left."""
        return [t for t in self.terms if t.text.casefold() not in _STOPWORDS] or list(self.terms)

    def match_any(self) -> str:
        return " OR ".join(t.fts for t in self.topical())

    def needles(self) -> list[str]:
        return [t.text for t in self.terms]

    def like_expression(self) -> list[tuple[str, str]]:
        """The query for :func:`store.like_messages` when it carries the user's operators."""
        return [("term", i.text) if isinstance(i, Term) else ("op", i) for i in self.items]


def _clean_text(query: str) -> str:
    """Control characters (NUL included) become spaces; the length is bounded like Hermes does."""
    return "".join(
        " " if unicodedata.category(ch) in ("Cc", "Cf", "Cs") else ch for ch in query[:MAX_QUERY_CHARS]
    )


def _split_phrases(text: str) -> list[tuple[str, bool]]:
    """(chunk, is_phrase): balanced "..." stay phrases; an unpaired quote is a space."""
    pieces: list[tuple[str, bool]] = []
    rest = text
    while rest:
        start = rest.find('"')
        end = rest.find('"', start + 1) if start >= 0 else -1
        if start < 0 or end < 0:
            pieces.append((rest.replace('"', " "), False))
            break
        pieces.append((rest[:start], False))
        pieces.append((rest[start + 1 : end], True))
        rest = rest[end + 1 :]
    return pieces


def plan_query(query: str) -> QueryPlan:
    """Hermes's ``_sanitize_fts5_query`` rules, made total: no input reaches FTS5 unquoted.

    Balanced phrases are kept, ``AND``/``OR``/``NOT`` between terms stay operators, a trailing
    ``*`` stays a prefix search, every other token becomes a quoted phrase (so ``@ / # , ; ! ?
    ' %`` and friends are literal), and tokens with no letter or digit are dropped.
    """
    items: list[Term | str] = []
    for chunk, is_phrase in _split_phrases(_clean_text(query)):
        if is_phrase:
            if _WORD_CHAR.search(chunk):
                items.append(Term(" ".join(chunk.split())))
            continue
        for token in chunk.split():
            if token in _OPERATORS:
                items.append(token)
                continue
            core = token.strip("*")
            if _WORD_CHAR.search(core):
                items.append(Term(core, prefix=token.endswith("*")))
    # Operators only between two terms: drop leading/trailing ones and collapse runs.
    cleaned: list[Term | str] = []
    for item in items:
        if isinstance(item, str):
            if cleaned and isinstance(cleaned[-1], str):
                cleaned[-1] = item
            elif cleaned:
                cleaned.append(item)
        elif len([i for i in cleaned if isinstance(i, Term)]) < MAX_TERMS:
            cleaned.append(item)
    while cleaned and isinstance(cleaned[-1], str):
        cleaned.pop()
    return QueryPlan(items=tuple(cleaned), terms=tuple(i for i in cleaned if isinstance(i, Term)))


# --------------------------------------------------------------------------- scope


@dataclass
class Scope:
    """The current conversation's project and the other conversations in it."""

    identity: dict[str, Any]
    current: dict[str, Any]
    session_ids: list[str]  # the other sessions of the project: what may be returned
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def sessions_in_scope(self) -> int:
        """Sessions of the project, the current one included (spec §七: 1 when alone).

        A search with no recorded conversation (the terminal's, by folder) has no current one to
        add, so the count matches ``hermes project-history status``.
        """
        return len(self.session_ids) + (1 if self.current.get("id") else 0)

    @property
    def is_home(self) -> bool:
        return self.identity.get("kind") == "home"


def resolve_scope(
    conn: sqlite3.Connection,
    schema: store.StateSchema,
    session_id: str,
    fallback_cwd: str = "",
    projects: Sequence[dict[str, Any]] | None = None,
) -> Scope:
    current = store.read_session(conn, schema, session_id) if session_id else None
    if current is None:
        current = {"id": session_id or "", "cwd": fallback_cwd or None, "git_repo_root": None}
    visible = store.read_visible_sessions(conn, schema)
    current, *visible = store.fill_repo_roots([current, *visible])
    index = attribution.FolderIndex(store.read_projects() if projects is None else projects)
    junk = store.junk_roots()
    identity = attribution.resolve_project(current, index, junk_roots=junk)
    if identity["kind"] == "home":
        return Scope(identity=identity, current=current, session_ids=[])
    excluded = {current["id"], *store.compression_ancestors(conn, current["id"])}
    members = attribution.sessions_in_project(identity, visible, index, junk_roots=junk)
    by_id = {row["id"]: row for row in visible}
    others = [sid for sid in members if sid not in excluded]
    return Scope(
        identity=identity, current=current, session_ids=others, sessions={s: by_id[s] for s in others}
    )


# --------------------------------------------------------------------------- keyword path


def _add_new(ranked: list[dict[str, Any]], seen: set[int], rows: Iterable[dict[str, Any]]) -> None:
    for row in rows:
        if row["message_id"] not in seen:
            seen.add(row["message_id"])
            ranked.append(row)


def _session_count(rows: Iterable[dict[str, Any]]) -> int:
    return len({row["session_id"] for row in rows})


def keyword_messages(
    conn: sqlite3.Connection,
    schema: store.StateSchema,
    plan: QueryPlan,
    session_ids: Sequence[str],
    want_sessions: int,
) -> list[dict[str, Any]]:
    """Ranked matching messages: AND first, relaxed to OR (bm25) when too few sessions match.

    CJK terms use the trigram table when every term has three or more characters, else LIKE.
    Latin queries that still find too few sessions get a trigram substring pass, which finds
    words glued to CJK text (``修改youer服务端``) that unicode61 indexes as one token. An FTS
    error of any kind falls back to LIKE: a search never fails because of its query.
    """
    if not plan.terms or not session_ids:
        return []
    ranked: list[dict[str, Any]] = []
    seen: set[int] = set()
    relax = len(plan.terms) > 1 and not plan.has_operators
    long_terms = all(len(t.text) >= 3 for t in plan.terms)
    # The user's AND/OR/NOT hold on the LIKE path too (else "归属 NOT 项目" would mean AND).
    expression = plan.like_expression() if plan.has_operators else None

    def like(require_all: bool) -> list[dict[str, Any]]:
        terms = plan.needles() if require_all or expression else [t.text for t in plan.topical()]
        return store.like_messages(
            conn, schema, terms, session_ids, require_all, SCAN_LIMIT, expression=expression
        )

    def fts(table: str, match: str, require_all: bool = True) -> list[dict[str, Any]]:
        try:
            return store.fts_messages(conn, schema, table, match, session_ids, SCAN_LIMIT)
        except sqlite3.OperationalError as error:
            logger.debug("FTS query %r failed (%s); using LIKE", match, error)
            return like(require_all)

    def enough() -> bool:
        return _session_count(ranked) >= want_sessions

    if plan.has_cjk or not schema.fts_columns:
        if schema.has_trigram and long_terms:
            _add_new(ranked, seen, fts("messages_fts_trigram", plan.match_all()))
            if relax and not enough():
                _add_new(ranked, seen, fts("messages_fts_trigram", plan.match_any(), require_all=False))
        else:
            _add_new(ranked, seen, like(True))
            if relax and not enough():
                _add_new(ranked, seen, like(False))
        return ranked

    _add_new(ranked, seen, fts("messages_fts", plan.match_all()))
    if relax and not enough():
        _add_new(ranked, seen, fts("messages_fts", plan.match_any(), require_all=False))
    if not enough() and schema.has_trigram and long_terms:
        match = plan.match_any() if relax else plan.match_all()
        _add_new(ranked, seen, fts("messages_fts_trigram", match, require_all=not relax))
    return ranked


# --------------------------------------------------------------------------- fusion


def _paths(
    keyword: Sequence[dict[str, Any]],
    semantic: Sequence[dict[str, Any]],
    keyword_weight: float,
    semantic_weight: float,
) -> tuple[tuple[str, Sequence[dict[str, Any]], float], ...]:
    return (("keyword", keyword, keyword_weight), ("semantic", semantic, semantic_weight))


def fuse_messages(
    keyword: Sequence[dict[str, Any]],
    semantic: Sequence[dict[str, Any]],
    k: int,
    keyword_weight: float = 1.0,
    semantic_weight: float = 1.0,
) -> list[dict[str, Any]]:
    """Spec §4.4's RRF over message ids: ``w/(k + rank)`` summed over both message rankings.

    Each row keeps the message fields and says which paths found that message (``score_source``).
    """
    fused: dict[int, dict[str, Any]] = {}
    for source, rows, weight in _paths(keyword, semantic, keyword_weight, semantic_weight):
        for rank, row in enumerate(rows, start=1):
            entry = fused.setdefault(row["message_id"], {**row, "score": 0.0, "sources": set()})
            entry["score"] += weight / (k + rank)
            entry["sources"].add(source)
            if source == "semantic" and row.get("chunk_text"):
                entry.setdefault("chunk_text", row["chunk_text"])
    ordered = sorted(fused.values(), key=lambda e: (-e["score"], e["message_id"]))
    for entry in ordered:
        sources = entry.pop("sources")
        entry["score_source"] = "both" if len(sources) == 2 else next(iter(sources))
    return ordered


def fuse_rankings(
    keyword: Sequence[dict[str, Any]],
    semantic: Sequence[dict[str, Any]],
    k: int,
    keyword_weight: float = 1.0,
    semantic_weight: float = 1.0,
) -> list[dict[str, Any]]:
    """RRF over *session* rankings; one row per session, its best message, best session first.

    Results are sessions, and a session is often found by keyword through one message and by
    meaning through another: fusing message ids (spec §4.4) cannot add that evidence up, fusing
    each path's session order can. Measured on LoCoMo this is what lets hybrid match or beat
    both single modes on every metric (README, "Tuning"). A session's message is its best under
    message-level fusion; ``score_source`` says which paths found the session.
    """
    scores: dict[str, float] = {}
    sources: dict[str, set[str]] = {}
    for source, rows, weight in _paths(keyword, semantic, keyword_weight, semantic_weight):
        for rank, session_id in enumerate(dict.fromkeys(row["session_id"] for row in rows), start=1):
            scores[session_id] = scores.get(session_id, 0.0) + weight / (k + rank)
            sources.setdefault(session_id, set()).add(source)
    best: dict[str, dict[str, Any]] = {}
    for row in fuse_messages(keyword, semantic, k, keyword_weight, semantic_weight):
        best.setdefault(row["session_id"], row)
    ordered = sorted(best.values(), key=lambda row: (-scores[row["session_id"]], row["message_id"]))
    return [
        {
            **row,
            "score": scores[row["session_id"]],
            "score_source": "both" if len(sources[row["session_id"]]) == 2 else row["score_source"],
        }
        for row in ordered
    ]


def best_per_session(rows: Iterable[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """One entry per session, its best message, in rank order."""
    picked: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["session_id"] not in picked:
            picked[row["session_id"]] = row
            if len(picked) >= limit:
                break
    return list(picked.values())


# --------------------------------------------------------------------------- result shape


def make_snippet(content: Any, needles: Sequence[str], width: int = SNIPPET_CHARS) -> str:
    """The part of the message around the first matching term, whitespace folded, bounded."""
    text = " ".join(store.message_text(content).split())
    if len(text) <= width:
        return text
    folded = text.casefold()
    positions = [folded.find(n.casefold()) for n in needles if n]
    hit = min((p for p in positions if p >= 0), default=0)
    start = max(0, hit - width // 3)
    end = min(len(text), start + width)
    start = max(0, end - width)
    if start > 0 and " " in text[start : start + 20]:
        start = text.index(" ", start) + 1
    if end < len(text) and " " in text[end - 20 : end]:
        end = text.rindex(" ", start, end)
    return ("…" if start > 0 else "") + text[start:end] + ("…" if end < len(text) else "")


def format_when(timestamp: Any) -> str | None:
    try:
        return datetime.fromtimestamp(float(timestamp)).strftime("%Y-%m-%d %H:%M")
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def session_link(session_id: str, profile: str) -> str:
    """``@session:<id>``, or ``@session:<profile>/<id>`` on a named profile (desktop format)."""
    if profile and profile not in ("default", "custom"):
        return f"@session:{profile}/{session_id}"
    return f"@session:{session_id}"


def shape_results(
    rows: Sequence[dict[str, Any]], scope: Scope, needles: Sequence[str], profile: str
) -> list[dict[str, Any]]:
    results = []
    for row in rows:
        session = scope.sessions.get(row["session_id"], {})
        results.append(
            {
                "session_id": row["session_id"],
                "link": session_link(row["session_id"], profile),
                "title": session.get("title"),
                "message_id": row["message_id"],
                "snippet": make_snippet(row.get("chunk_text") or row.get("content"), needles),
                "score_source": row.get("score_source", "keyword"),
                "when": format_when(row.get("timestamp")),
            }
        )
    return results


# --------------------------------------------------------------------------- the whole search


def _semantic(
    conn: sqlite3.Connection,
    schema: store.StateSchema,
    scope: Scope,
    query: str,
    settings: Any,
    run: bool,
    build: bool = True,
) -> tuple[list[dict[str, Any]], str]:
    """Semantic rows and ``semantic_status``. ``run=False`` reports the state without any work;
    ``build=False`` searches only a complete index and never starts indexing."""
    from .config_schema import semantic_gate

    gate = semantic_gate(
        settings.embedding, store.read_consent(), scope.identity, store.active_profile_name()
    )
    if gate != "ok":
        return [], gate
    from . import semantic

    return semantic.search(conn, schema, scope, query, settings, run=run, build=build)


def run_search(
    query: str, mode: str, limit: int, session_id: str, fallback_cwd: str = "", build_index: bool = True
) -> dict[str, Any]:
    """The tool's answer as a dict (spec §4.5, failure rows of spec §七).

    ``build_index=False`` (the terminal's ``search``): semantic search runs only over a complete
    index and starts no indexing that the exiting process would abandon.
    """
    db_path = store.state_db_path()
    if not db_path.exists():
        return {"success": False, "error": "session database not found", "code": "no_db"}
    settings = store.read_settings()
    with store.reading(db_path) as conn:
        schema = store.detect_schema(conn)
        scope = resolve_scope(conn, schema, session_id, fallback_cwd)
        if scope.is_home:
            has_cwd = bool((scope.current.get("cwd") or "").strip())
            message = NO_PROJECT_FOR_CWD if has_cwd else NO_PROJECT_CONTEXT
            return {"success": True, "results": [], "message": message, "sessions_in_scope": 0}
        if not scope.session_ids:
            return {"success": True, "results": [], "message": NO_OTHER_SESSIONS, "sessions_in_scope": 1}

        plan = plan_query(query)
        keyword = keyword_messages(conn, schema, plan, scope.session_ids, limit) if mode != "semantic" else []
        semantic_rows, status = _semantic(
            conn, schema, scope, query, settings, run=mode != "keyword", build=build_index
        )
        if mode == "semantic" and not semantic_rows and status not in ("ready", "partial", "indexing"):
            # Semantic search cannot answer: keep the keyword results the agent can still use.
            keyword = keyword_messages(conn, schema, plan, scope.session_ids, limit)
        if mode == "keyword" or not semantic_rows:
            ranked = [{**row, "score_source": "keyword"} for row in keyword]
        elif mode == "semantic":
            ranked = [{**row, "score_source": "semantic"} for row in semantic_rows]
        else:
            embedding = settings.embedding
            ranked = fuse_rankings(
                keyword, semantic_rows, embedding.rrf_k, embedding.keyword_weight, embedding.semantic_weight
            )
        best = best_per_session(ranked, limit)
        result: dict[str, Any] = {
            "success": True,
            "mode": mode,
            "project": scope.identity,
            "results": shape_results(best, scope, plan.needles(), store.active_profile_name()),
            "sessions_in_scope": scope.sessions_in_scope,
            "semantic_status": status,
        }
    if not result["results"]:
        result["message"] = "No matching messages in this project's other sessions"
    if status == "unavailable":
        from . import semantic

        result["semantic_reason"] = semantic.unavailable_reason(settings)
    if status == "consent_required" and mode != "keyword":
        result["semantic_consent"] = consent_request(scope.identity, settings)
    return result


def consent_request(identity: dict[str, Any], settings: Any) -> dict[str, Any]:
    """What the agent should ask the user, and the command that records a yes (spec §五)."""
    from .config_schema import endpoint_of, project_ref

    embedding = settings.embedding
    endpoint = endpoint_of(embedding)
    project = identity.get("name") or identity.get("key") or project_ref(identity)
    profile = store.active_profile_name()
    profile_flag = f"-p {profile} " if profile not in ("default", "custom") else ""
    command = f"hermes {profile_flag}project-history allow --project {project_ref(identity)} --yes"
    where = (
        "this machine (in-process model, nothing leaves it)" if embedding.provider == "local" else endpoint
    )
    from .runtime import provider_problem, setup_hint

    problem = provider_problem(embedding, store.read_api_key(), settings.problems)
    extra = {"setup_needed": f"{problem}; run {setup_hint(embedding.provider)} first"} if problem else {}
    return {
        **extra,
        "ask_user": (
            f"Semantic search is off until you agree. If enabled, the text of the user and assistant "
            f"messages in this project's conversations ({project}), past and future, is sent to "
            f"{embedding.provider} model '{embedding.model}' at {where} to compute embeddings, "
            f"which are stored locally. Enable it for this project?"
        ),
        "on_yes_run": command,
        "provider": embedding.provider,
        "model": embedding.model,
        "endpoint": endpoint,
        "project": project_ref(identity),
        "sends": "user and assistant message text of this project's sessions (history and new messages)",
    }


# --------------------------------------------------------------------------- overview (CLI status)


def project_overview() -> list[dict[str, Any]]:
    """Every project that has conversations: its identity, session ids and live message count."""
    with store.reading(store.state_db_path()) as conn:
        schema = store.detect_schema(conn)
        rows = store.fill_repo_roots(store.read_visible_sessions(conn, schema))
        index = attribution.FolderIndex(store.read_projects())
        junk = store.junk_roots()
        groups: dict[tuple[str, str], dict[str, Any]] = {}
        for row in rows:
            identity = attribution.resolve_project(row, index, junk_roots=junk)
            if identity["kind"] == "home":
                continue
            group = groups.setdefault(
                attribution.scope_key(identity), {"identity": identity, "session_ids": [], "messages": 0}
            )
            group["session_ids"].append(row["id"])
        for group in groups.values():
            group["messages"] = len(store.live_message_ids(conn, schema, group["session_ids"]))
    return list(groups.values())


def indexed_messages(fingerprint: str, session_ids: Sequence[str]) -> int:
    if not store.embeddings_db_path().exists():
        return 0
    econn = store.connect_embeddings()
    try:
        return len(store.indexed_message_ids(econn, fingerprint, session_ids))
    finally:
        econn.close()
