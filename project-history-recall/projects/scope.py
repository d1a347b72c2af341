"""Which conversations belong to which project: attribution applied to the data, once per change.

:mod:`attribution` decides, purely, what project one session row is in. This module feeds it:
the rows from :class:`store.HermesDB`, every path with its symlinks resolved and git's roots
from :mod:`git`, the projects from ``projects.db`` and the folders that are never a project
from :class:`HermesEnv`. Every caller (search, move, the CLI's status/enable/index) goes through
:class:`ProjectMap`, so they cannot disagree about what "this project" means.

Scope is computed once per change of what it depends on, not per call (docs/design.md, "Scope"):

- a :class:`Snapshot` of every session's project is kept per ``state.db`` for the process, valid
  while ``PRAGMA data_version`` of ``state.db`` and ``projects.db`` (read on a connection kept for
  that alone, with the files' identity), the excluded roots, git's answers
  (:attr:`GitProbe.generation`) and the filesystem facts' epoch are unchanged;
- when it must be rebuilt, each distinct ``(cwd, git root)`` pair is made canonical once and
  each distinct canonical triple is attributed once (the memos outlive the snapshot while the
  projects and excluded roots stay the same), so a new message costs a re-read of the session
  rows, not a re-attribution.

The current conversation is always attributed from its own row, asking git in the calling
thread if needed; other conversations whose folder git has not answered for within the budget
are *pending*: left out of every scope and reported (``Scope.complete``), never guessed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from .. import attribution
from ..store import HermesDB, connect_readonly, set_busy_timeout, sqlite_lower
from . import git
from .forgotten import ForgottenList
from .git import STORE_NAME, GitProbe

Triple = tuple[str, str, str]  # canonical (cwd, git root, worktree root)
CACHED_HOMES = 8


@dataclass
class Scope:
    """The current conversation's project and the other conversations in it."""

    identity: dict[str, Any]
    current: dict[str, Any]
    session_ids: list[str]  # the other sessions of the project: what may be returned
    #: session -> its conversation; shared with the process's snapshot: read, never change it
    conversation_of: dict[str, str] = field(default_factory=dict)
    pending: int = 0  # sessions left out because git has not answered for their folder yet
    folders: list[str] = field(default_factory=list)  # the project's folders now (consent's coverage)
    #: ``state.db``'s data_version token, read before anything else of this call: while it is
    #: unchanged, nothing in Hermes's data is (``semantic.CompleteScopes``). None: unknown.
    data_token: tuple | None = None
    #: session -> (its title, as SQLite lowercases it), of every titled session (the snapshot's:
    #: read, never change it); None: not read with the sessions (the search reads them itself)
    titles: Mapping[str, tuple[str, str]] | None = None

    @property
    def sessions_in_scope(self) -> int:
        """Conversations of the project, the current one included (spec §七: 1 when alone).

        A compressed conversation is one chain of sessions and counts once, as Hermes lists it. A
        search with no recorded conversation (the terminal's, by folder) has no current one to
        add, so the count matches ``hermes project-history status``.
        """
        return len(set(self.conversation_of.values())) + (1 if self.current.get("id") else 0)

    @property
    def complete(self) -> bool:
        return self.pending == 0

    @property
    def is_home(self) -> bool:
        return self.identity.get("kind") == "home"


class Inputs(NamedTuple):
    """What a snapshot of every session's project depends on, read once per call
    (:meth:`ProjectMap._token`): a change in any of them renews it."""

    state: tuple | None  # state.db's data_version token
    projects: tuple | None  # projects.db's
    excluded_roots: tuple
    facts_epoch: int  # git facts learnt since the process started
    git_generation: int  # git answers given, for the current folder too


@dataclass
class Snapshot:
    """Every session's place, for one state of the data."""

    token: Inputs
    roots: dict[str, str]  # session -> first session of its compression chain
    chains: dict[str, list[str]]  # first session -> every session of the chain, oldest first
    members: dict[tuple[str, str], dict[str, str]]  # scope key -> visible session -> conversation
    identities: dict[tuple[str, str], dict[str, Any]]  # scope key -> identity
    pending: list[str]  # visible sessions waiting for git
    links: list[tuple] = field(default_factory=list)  # the session rows it was made from
    #: session -> the profile it was recorded under; rows without one belong to the home's own
    profiles: dict[str, str] = field(default_factory=dict)
    #: (scope key, profile, current conversation) -> that scope's sessions and their conversations,
    #: made once per state of the sessions (a snapshot renewed for new messages keeps it)
    scopes: dict[tuple, dict[str, str]] = field(default_factory=dict)
    #: visible sessions in no project (Home) -> conversation: searched only when asked for every
    #: project (``scope: all``, issue 32), never part of a project's scope
    home_members: dict[str, str] = field(default_factory=dict)
    #: session -> (its title, as SQLite lowercases it), for the sessions Hermes has titled (read
    #: with the rows, lowercased once per snapshot rather than per search)
    titles: dict[str, tuple[str, str]] = field(default_factory=dict)


class DataWatch:
    """``PRAGMA data_version`` of one database file, on a read-only connection kept for it.

    The value changes whenever another connection commits, which stat() alone cannot promise
    (a WAL commit within one timestamp tick). The file's identity is part of the token, so a
    replaced file is noticed too; a file that cannot be read gives a token that never repeats.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._ident: tuple[int, int] | None = None
        self._serials = itertools.count(1)  # a new connection, or an unreadable file, never repeats
        self._serial = 0

    def token(self, wait: float = 1.0) -> tuple | None:
        """``wait``: the longest this read waits for another connection's lock."""
        try:
            st = os.stat(self.path)
        except OSError:
            self.close()
            return None
        ident = (st.st_dev, st.st_ino)
        try:
            if self._conn is None or ident != self._ident:
                self.close()
                self._conn = connect_readonly(self.path, timeout=1.0)
                self._ident, self._serial = ident, next(self._serials)
            set_busy_timeout(self._conn, wait)
            version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error:
            self.close()
            return ("unreadable", next(self._serials))
        return (ident, self._serial, version)

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
        self._conn, self._ident = None, None


class HomeState:
    """What the process remembers about one Hermes home between calls."""

    def __init__(self, state_db: Path, projects_db: Path, data_dir: Path) -> None:
        self.lock = threading.RLock()
        self.forgotten = ForgottenList(data_dir)  # the plugin's forgotten.json, read once per change
        self.state_watch = DataWatch(state_db)
        self.projects_watch = DataWatch(projects_db)
        self.snapshot: Snapshot | None = None
        # Attribution inputs and their memos (cleared when the inputs change).
        self.inputs_key: tuple | None = None
        self.inputs_fingerprint: tuple | None = None
        self.index: attribution.FolderIndex | None = None
        self.excluded: attribution.ExcludedRoots | None = None
        self.identities: dict[Triple, dict[str, Any]] = {}
        # Each project's folders as projects.db records them (what consent covered), by id.
        self.folders: dict[str, list[str]] = {}
        self.triples_key: tuple | None = None
        self.triples: dict[tuple[str | None, str | None], Triple] = {}  # by recorded (cwd, root)

    def close(self) -> None:
        self.state_watch.close()
        self.projects_watch.close()


class ProjectsMemory:
    """What the process remembers about projects between calls: per Hermes home, the last snapshot
    of every session's project and the attribution memos (:class:`HomeState`), and git's answers
    (:class:`git.GitProbe`, shared by every home). Owned by the plugin's ``ProcessState``."""

    def __init__(self) -> None:
        self.probe = GitProbe()
        self._lock = threading.Lock()
        self._homes: OrderedDict[str, HomeState] = OrderedDict()

    def home(self, state_db: Path, projects_db: Path, data_dir: Path) -> HomeState:
        key = str(state_db)
        with self._lock:
            home = self._homes.get(key)
            if home is None:
                home = self._homes[key] = HomeState(state_db, projects_db, data_dir)
                while len(self._homes) > CACHED_HOMES:
                    _, evicted = self._homes.popitem(last=False)
                    evicted.close()
            self._homes.move_to_end(key)
            return home

    def close(self) -> None:
        with self._lock:
            for home in self._homes.values():
                home.close()
            self._homes.clear()
        self.probe.close()


class ProjectMap:
    """Attribution over one open :class:`HermesDB`, backed by the process's per-home memory."""

    def __init__(self, db: HermesDB, memory: ProjectsMemory, budget_seconds: float | None = None) -> None:
        self.db = db
        self.probe = memory.probe
        self.budget_seconds = git.FILL_BUDGET_SECONDS if budget_seconds is None else budget_seconds
        self.home = memory.home(db.env.state_db, db.env.projects_db, db.env.data_dir)
        self.store = db.env.data_dir / STORE_NAME
        self.unsure: set[tuple] = set()  # rows asked about now whose folder git did not answer for

    # ------------------------------------------------------------------- inputs

    def _excluded_roots(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return self.db.env.excluded_roots()

    def _refresh_for(self, token: Inputs | None) -> None:
        """:meth:`_refresh_inputs` as of the call's ``token``, or of projects.db and git now."""
        if token is None:
            self._refresh_inputs(
                self.home.projects_watch.token(self.db.wait_seconds(1.0)), self.probe.facts_epoch()
            )
        else:
            self._refresh_inputs(token.projects, token.facts_epoch)

    def _refresh_inputs(self, projects_token: tuple | None, epoch: int) -> None:
        """Projects and excluded roots in canonical form; the identity memo survives while equal."""
        home = self.home
        roots, trees = self._excluded_roots()
        key = (projects_token, epoch, roots, trees)
        if home.inputs_key == key and home.index is not None:
            return
        real, registered = self.probe.real, self.probe.registered
        listed = self.db.projects()
        recorded = {
            str(project.get("id")): [
                str(folder.get("path") if isinstance(folder, dict) else folder)
                for folder in project.get("folders") or []
            ]
            for project in listed
        }
        projects = [
            {
                "id": project.get("id"),
                "name": project.get("name"),
                "archived": project.get("archived"),
                # a folder ending in whitespace is recorded stripped (git.registered_folders)
                "folders": [
                    spelled for folder in recorded[str(project.get("id"))] for spelled in registered(folder)
                ],
            }
            for project in listed
        ]
        excluded_roots = tuple(dict.fromkeys([*roots, *map(real, roots)]))
        excluded_trees = tuple(dict.fromkeys([*trees, *map(real, trees)]))
        fingerprint = (repr(projects), excluded_roots, excluded_trees)
        if fingerprint != home.inputs_fingerprint:
            home.identities = {}
            home.inputs_fingerprint = fingerprint
        home.index = attribution.FolderIndex(projects)
        home.folders = recorded
        home.excluded = attribution.ExcludedRoots(roots=excluded_roots, trees=excluded_trees)
        home.inputs_key = key

    # ------------------------------------------------------------------- one row

    def _triple(self, cwd: str | None, root: str | None) -> Triple | str:
        """The canonical (cwd, root, worktree) of a recorded pair, or the git marker it waits for."""
        real = self.probe.real
        cwd_real, root_real = real(cwd), real(root)
        if not cwd_real or attribution.trusted_repo_root(cwd_real, root_real):
            return (cwd_real, root_real, "")
        marker = self.probe.marker(cwd_real)
        if not marker:  # no repository above it, or no such folder here: what Hermes recorded
            return (cwd_real, root_real, "")
        return marker

    def _identity(self, triple: Triple) -> dict[str, Any]:
        home = self.home
        identity = home.identities.get(triple)
        if identity is None:
            assert home.index is not None  # every caller holds home.lock and ran _refresh_for first
            row = {"cwd": triple[0], "git_repo_root": triple[1], "git_worktree_root": triple[2]}
            identity = attribution.resolve_project(row, home.index, excluded=home.excluded)
            home.identities[triple] = identity
        return identity

    def _with_answer(self, cwd_real: str, root_real: str, answer: tuple[str, str]) -> Triple:
        common, worktree = answer
        if common:
            return (cwd_real, self.probe.real(common), self.probe.real(worktree))
        return (cwd_real, root_real, "")

    def _canonical(self, pairs: Iterable[tuple[str | None, str | None]], first: Iterable[tuple]) -> tuple:
        """Canonical triples for recorded (cwd, root) pairs; pairs whose git answer is pending are
        left out. ``first`` pairs get git's answer in this thread, whatever it takes."""
        home, probe = self.home, self.probe
        key = (probe.facts_epoch(), probe.generation)
        if home.triples_key != key:
            home.triples, home.triples_key = {}, key
        known = home.triples
        waiting: dict[tuple[str | None, str | None], str] = {}
        first_markers = set()
        first = set(first)
        for pair in {*pairs, *first}:
            if pair in known:
                continue
            result = self._triple(*pair)
            if isinstance(result, tuple):
                known[pair] = result
            else:
                waiting[pair] = result
                if pair in first:
                    first_markers.add(result)
        if not waiting:
            return known, set()
        answers = probe.answers(
            set(waiting.values()) - first_markers,
            store=self.store,
            first=first_markers,
            budget_seconds=self.budget_seconds,
        )
        pending = set()
        for pair, marker in waiting.items():
            if marker in answers:
                known[pair] = self._with_answer(probe.real(pair[0]), probe.real(pair[1]), answers[marker])
            elif pair in first:  # git gave no answer even now: what Hermes recorded, this call only
                self.unsure.add(pair)
            else:
                pending.add(pair)
        if self.unsure:
            known = {
                **known,
                **{pair: (probe.real(pair[0]), probe.real(pair[1]), "") for pair in self.unsure},
            }
        return known, pending

    def _token(self) -> Inputs:
        return Inputs(
            self.home.state_watch.token(self.db.wait_seconds(1.0)),
            self.home.projects_watch.token(self.db.wait_seconds(1.0)),
            self._excluded_roots(),
            self.probe.facts_epoch(),
            self.probe.generation,
        )

    # ------------------------------------------------------------------- snapshot

    def snapshot(self, token: Inputs | None = None) -> Snapshot:
        """Every session's project, rebuilt only when something it depends on changed."""
        home = self.home
        with home.lock:
            token = token or self._token()
            if home.snapshot is not None and home.snapshot.token == token:
                return home.snapshot
            self._refresh_for(token)
            links = self.db.session_links()
            previous = home.snapshot
            if (
                previous is not None
                and previous.token._replace(state=token.state) == token
                and previous.links == links
            ):
                # Only messages changed (every turn of a conversation writes some): the session
                # rows, and so every project, are as they were; attribution is spared, reading the
                # rows to know it is not.
                home.snapshot = dataclasses.replace(previous, token=token)
                return home.snapshot
            pairs = {(cwd, root) for _, cwd, root, *_ in links}
            known, pending_pairs = self._canonical(pairs, ())
            identities: dict[tuple[str, str], dict[str, Any]] = {}
            key_of: dict[tuple, tuple[str, str] | None] = {}  # per distinct pair; None: not a project
            for pair in pairs:
                if pair in pending_pairs:
                    continue
                identity = self._identity(known[pair])
                key = attribution.scope_key(identity)
                key_of[pair] = None if key[0] == "home" else key
                if key[0] != "home":
                    identities.setdefault(key, identity)
            roots = attribution.conversation_roots({link[0]: link[4] for link in links})
            members: dict[tuple[str, str], dict[str, str]] = {}
            chains: dict[str, list[str]] = {}
            pending: list[str] = []
            home_members: dict[str, str] = {}
            for sid, cwd, root, visible, *_ in links:
                conversation = roots[sid]
                chains.setdefault(conversation, []).append(sid)
                if not visible:
                    continue
                pair = (cwd, root)
                if pair in pending_pairs:
                    pending.append(sid)
                    continue
                project = key_of[pair]
                if project is not None:
                    members.setdefault(project, {})[sid] = conversation
                else:
                    home_members[sid] = conversation
            own = self.db.env.profile
            home.snapshot = Snapshot(
                token=token,
                roots=roots,
                chains=chains,
                members=members,
                identities={key: identities[key] for key in members},
                pending=pending,
                links=links,
                profiles={link[0]: link[5] or own for link in links},
                home_members=home_members,
                titles={link[0]: (link[6], sqlite_lower(link[6])) for link in links if link[6]},
            )
            return home.snapshot

    # ------------------------------------------------------------------- questions

    def identity(self, row: dict[str, Any], token: Inputs | None = None) -> dict[str, Any]:
        """The project of one row, asking git now if its folder needs it (never pending)."""
        with self.home.lock:
            self._refresh_for(token or self._token())
            pair = (row.get("cwd"), row.get("git_repo_root"))
            known, _ = self._canonical([], [pair])
            return self._identity(known[pair])

    def identity_of_folder(self, folder: str) -> dict[str, Any]:
        return self.identity({"cwd": folder, "git_repo_root": None})

    def conversation(self, session_id: str) -> list[str]:
        """Every session of the conversation ``session_id`` belongs to, oldest first.

        Read from the data directly: a move needs the chain, not everyone's project (which could
        wait for git about other folders).
        """
        links = self.db.session_links()
        roots = attribution.conversation_roots({link[0]: link[4] for link in links})
        own = roots.get(session_id, session_id)
        return [sid for sid, *_ in links if roots[sid] == own] or [session_id]

    def resolve_scope(self, session_id: str, fallback_cwd: str = "") -> Scope:
        self.db.bound_waits()  # a lock on state.db is waited for until the call's deadline at most
        current = self.db.session(session_id) if session_id else None
        if current is None:
            current = {"id": session_id or "", "cwd": fallback_cwd or None, "git_repo_root": None}
        with self.home.lock:
            token = self._token()
            identity = self.identity(current, token)
            if identity["kind"] == "home":
                return Scope(identity=identity, current=current, session_ids=[], pending=len(self.unsure))
            if self.probe.generation != token.git_generation:  # git answered for the current folder just now
                token = self._token()
            snap = self.snapshot(token)
        own = snap.roots.get(current["id"], current["id"])
        # One state.db can hold several profiles' sessions (a multiplexed gateway tags them with
        # profile_name): the current conversation's profile is the scope's, as Hermes keeps one
        # database per profile otherwise.
        profile = snap.profiles.get(current["id"], self.db.env.profile)
        return self._scope_in(snap, identity, current, profile, own, token)

    def _scope_in(
        self,
        snap: Snapshot,
        identity: dict[str, Any],
        current: dict[str, Any],
        profile: str,
        own: str,
        token: Inputs,
    ) -> Scope:
        """The scope of ``identity`` (Home's: the sessions in no project) for the conversation
        ``own`` of ``profile``: that profile's sessions of it, the current chain and forgotten
        conversations left out."""
        key = attribution.scope_key(identity)
        conversation_of = snap.scopes.get((key, profile, own))
        if conversation_of is None:
            every = snap.home_members if key[0] == "home" else snap.members.get(key, {})
            conversation_of = {
                sid: conversation for sid, conversation in every.items() if snap.profiles.get(sid) == profile
            }
            for sid in snap.chains.get(own, ()):
                conversation_of.pop(sid, None)
            snap.scopes[(key, profile, own)] = conversation_of  # read-only from here on
        conversation_of = self._remembered(conversation_of)
        return Scope(
            identity=identity,
            current=current,
            session_ids=list(conversation_of),
            conversation_of=conversation_of,
            pending=len(snap.pending) + (1 if self.unsure else 0),
            folders=self.folders_of(identity, token),
            data_token=token.state,
            titles=snap.titles,
        )

    def tiers(self, scope: Scope) -> list[Scope]:
        """``scope: all``'s scopes in the order their results come (issue 32): the current
        conversation's project (or, asked from Home, Home), then Home, then every other project,
        each without the current conversation. Built from the same snapshot as
        :meth:`resolve_scope`, so attribution stays decided here and in :mod:`attribution`."""
        current = scope.current
        with self.home.lock:
            token = self._token()
            snap = self.snapshot(token)
        own = snap.roots.get(current.get("id") or "", current.get("id") or "")
        profile = snap.profiles.get(current.get("id") or "", self.db.env.profile)
        home = self._scope_in(snap, dict(attribution.HOME), current, profile, own, token)
        tiers = [home] if scope.is_home else [scope, home]
        first = attribution.scope_key(scope.identity)
        for key, identity in snap.identities.items():
            if key != first:
                tiers.append(self._scope_in(snap, identity, current, profile, own, token))
        return tiers

    def _remembered(self, conversation_of: dict[str, str]) -> dict[str, str]:
        """``conversation_of`` without the conversations the user asked to forget (``forget``):
        decided here, where every search path, the indexer and ``status`` take their sessions,
        so none of them can return or embed one (issue 32)."""
        forgotten = self.home.forgotten.ids()
        if not forgotten:
            return conversation_of
        return {
            sid: conversation
            for sid, conversation in conversation_of.items()
            if sid not in forgotten and conversation not in forgotten
        }

    def folders_of(self, identity: dict[str, Any], token: Inputs | None = None) -> list[str]:
        """The folders a project spans now, as consent records what it covered: an explicit
        project's folders in projects.db, an automatic repo's root. ``token``: the call's
        (:meth:`_token`), when it has read one."""
        if identity.get("kind") == "auto":
            return [str(identity.get("key"))]
        if identity.get("kind") != "explicit":
            return []
        with self.home.lock:  # read with the inputs, once per change of projects.db
            self._refresh_for(token)
            return list(self.home.folders.get(str(identity.get("id")), ()))

    def groups(self) -> list[dict[str, Any]]:
        """Every project that has conversations of this home's profile: its identity, its session
        ids (oldest first), how many conversations they are and its folders."""
        snap = self.snapshot()
        own = self.db.env.profile
        groups = []
        for key, every in snap.members.items():
            members = self._remembered(every)
            session_ids = [sid for sid in members if snap.profiles.get(sid) == own]
            if session_ids:
                identity = snap.identities[key]
                groups.append(
                    {
                        "identity": identity,
                        "session_ids": session_ids,
                        "conversations": len({members[sid] for sid in session_ids}),
                        "folders": self.folders_of(identity),
                    }
                )
        return groups
