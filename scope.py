"""Which conversations belong to which project, for one call: attribution applied to the data.

:mod:`attribution` decides, purely, what project one session row is in. This module feeds it:
the rows from :class:`hermes_db.HermesDB`, their git roots from :mod:`git_roots`, the projects
from ``projects.db`` and the folders that are never a project from :class:`HermesEnv`. Every
caller (search, move, the CLI's status/enable/index) goes through :class:`ProjectMap`, so they
cannot disagree about what "this project" means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import attribution
from .git_roots import PROBE, GitProbe
from .hermes_db import HermesDB


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


class ProjectMap:
    """Attribution over one open :class:`HermesDB`; identities memoised per distinct folder pair."""

    def __init__(self, db: HermesDB, probe: GitProbe = PROBE) -> None:
        self.db = db
        self.probe = probe
        self._index: attribution.FolderIndex | None = None
        self._junk = db.env.junk_roots()
        self._memo: dict[tuple[str, str, str], dict[str, Any]] = {}

    @property
    def index(self) -> attribution.FolderIndex:
        if self._index is None:
            self._index = attribution.FolderIndex(self.db.projects())
        return self._index

    def identity(self, row: dict[str, Any]) -> dict[str, Any]:
        """The project of a row whose git roots were already filled (:meth:`filled`)."""
        key = (
            (row.get("cwd") or "").strip(),
            (row.get("git_repo_root") or "").strip(),
            (row.get("git_worktree_root") or "").strip(),
        )
        if key not in self._memo:
            self._memo[key] = attribution.resolve_project(row, self.index, junk_roots=self._junk)
        return self._memo[key]

    def filled(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self.probe.fill_repo_roots(rows)

    def identity_of_folder(self, folder: str) -> dict[str, Any]:
        (row,) = self.filled([{"id": "", "cwd": folder, "git_repo_root": None}])
        return self.identity(row)

    def resolve_scope(self, session_id: str, fallback_cwd: str = "") -> Scope:
        current = self.db.session(session_id) if session_id else None
        if current is None:
            current = {"id": session_id or "", "cwd": fallback_cwd or None, "git_repo_root": None}
        current, *visible = self.filled([current, *self.db.visible_sessions()])
        identity = self.identity(current)
        if identity["kind"] == "home":
            return Scope(identity=identity, current=current, session_ids=[])
        excluded = {current["id"], *self.db.compression_ancestors(current["id"])}
        others = [
            row
            for row in visible
            if row["id"] not in excluded and attribution.same_project(identity, self.identity(row))
        ]
        return Scope(
            identity=identity,
            current=current,
            session_ids=[row["id"] for row in others],
            sessions={row["id"]: row for row in others},
        )

    def groups(self) -> list[dict[str, Any]]:
        """Every project that has conversations: its identity and its session ids, oldest first."""
        groups: dict[tuple[str, str], dict[str, Any]] = {}
        for row in self.filled(self.db.visible_sessions()):
            identity = self.identity(row)
            if identity["kind"] == "home":
                continue
            group = groups.setdefault(
                attribution.scope_key(identity), {"identity": identity, "session_ids": []}
            )
            group["session_ids"].append(row["id"])
        return list(groups.values())
