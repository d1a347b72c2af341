"""Which project a conversation belongs to: a pure function of its recorded folders.

This mirrors the Hermes desktop's project tree (``tui_gateway/project_tree.py``) so the agent and
the sidebar agree: paths compare by segments, never by string prefix (``/a/proj`` does not own
``/a/proj2``); trailing separators are ignored; Windows paths (drive letter, UNC, backslash-rooted)
fold case while POSIX paths stay case-sensitive; the deepest matching folder wins; a git root that
does not contain the cwd is stale (Hermes 0.19 cannot clear it after a move) and is ignored.

No I/O happens here. Callers pass the session row, the projects (``projects_db`` dicts with their
folders) and the roots that can never be an automatic repo (the home folder, ``HERMES_HOME``).
Both search paths decide "same project" through :func:`same_project`, so the keyword and semantic
results can never disagree about scope.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Identity = dict[str, Any]

_DRIVE_OR_UNC = re.compile(r"^[A-Za-z]:([/\\]|$)")
_SEPARATORS = re.compile(r"[/\\]+")

HOME: Identity = {"kind": "home"}


def is_windows_path(path: str) -> bool:
    """Drive-letter (``C:\\``), UNC (``\\\\srv``, ``//srv``) or backslash-rooted paths."""
    value = (path or "").strip()
    return bool(_DRIVE_OR_UNC.match(value)) or value.startswith(("\\", "//"))


def path_segments(path: str | None) -> tuple[str, ...]:
    """Comparison segments: separator- and trailing-slash-agnostic, Windows case-folded."""
    value = (path or "").strip()
    segments = tuple(s for s in _SEPARATORS.split(value) if s)
    if is_windows_path(value):
        return tuple(s.casefold() for s in segments)
    return segments


def path_key(path: str | None) -> str:
    """One canonical string per folder, used as the identity of an automatic repo project."""
    segments = path_segments(path)
    if not segments:
        return ""
    key = "/".join(segments)
    return key if is_windows_path(path or "") else "/" + key


def is_path_under(folder: str | None, target: str | None) -> bool:
    """True when ``target`` is ``folder`` or lies inside it, compared segment by segment."""
    folder_segments = path_segments(folder)
    target_segments = path_segments(target)
    if not folder_segments or len(folder_segments) > len(target_segments):
        return False
    return target_segments[: len(folder_segments)] == folder_segments


def trusted_repo_root(cwd: str | None, git_repo_root: str | None, worktree_root: str | None = None) -> str:
    """The recorded git root, unless it is stale: a root that does not contain the cwd.

    Hermes 0.19's ``update_session_cwd`` never clears git fields, so a conversation moved out of
    a repository keeps pointing at it. The desktop applies the same guard when it reads.
    ``worktree_root`` is the checkout that git says holds the cwd: a linked worktree outside
    its main repository (``~/code/app-wt-x`` of ``~/code/app``) keeps the main repo's root.
    """
    root = (git_repo_root or "").strip()
    if not root:
        return ""
    cwd = (cwd or "").strip()
    if cwd and not is_path_under(root, cwd) and not is_path_under(worktree_root, cwd):
        return ""
    return root


class FolderIndex:
    """Folder → owning project, so a path finds its project by walking its own ancestors.

    Built once per search over every project, then each session costs a handful of dict
    lookups instead of a scan over projects × folders.
    """

    def __init__(self, projects: Iterable[Mapping[str, Any]]) -> None:
        self._owner_by_folder: dict[tuple[str, ...], Mapping[str, Any]] = {}
        for project in projects:
            if project.get("archived"):
                continue
            for folder in project.get("folders") or []:
                segments = path_segments(folder.get("path") if isinstance(folder, Mapping) else folder)
                # Two projects sharing a folder: the first (oldest, by created_at) keeps it.
                if segments and segments not in self._owner_by_folder:
                    self._owner_by_folder[segments] = project

    def match(self, path: str | None) -> tuple[Mapping[str, Any] | None, int]:
        """The project of the deepest folder that is ``path`` or an ancestor of it, and its depth."""
        segments = path_segments(path)
        for depth in range(len(segments), 0, -1):
            owner = self._owner_by_folder.get(segments[:depth])
            if owner is not None:
                return owner, depth
        return None, -1


def resolve_project(
    session_row: Mapping[str, Any],
    projects: Sequence[Mapping[str, Any]] | FolderIndex,
    *,
    junk_roots: Iterable[str] = (),
) -> Identity:
    """The project identity of one session row (spec §3.1).

    - ``{"kind": "explicit", "id", "name"}``: the cwd or the (trusted) git root lies in a folder
      of a project in ``projects.db``; the deeper folder wins, a tie goes to the cwd.
    - ``{"kind": "auto", "key"}``: no explicit folder, but a trusted git root that is not one of
      ``junk_roots`` (the home folder and ``HERMES_HOME`` are never a project, as on the desktop).
    - ``{"kind": "home"}``: neither.
    """
    index = projects if isinstance(projects, FolderIndex) else FolderIndex(projects)
    cwd = (session_row.get("cwd") or "").strip()
    repo_root = trusted_repo_root(cwd, session_row.get("git_repo_root"), session_row.get("git_worktree_root"))

    best, best_depth = None, -1
    for candidate in (cwd, repo_root):
        if not candidate:
            continue
        owner, depth = index.match(candidate)
        if owner is not None and depth > best_depth:
            best, best_depth = owner, depth
    if best is not None:
        return {"kind": "explicit", "id": best.get("id"), "name": best.get("name")}

    if repo_root:
        key = path_key(repo_root)
        junk = {path_key(root) for root in junk_roots if root}
        if key and key not in junk:
            return {"kind": "auto", "key": key}
    return dict(HOME)


def scope_key(identity: Mapping[str, Any]) -> tuple[str, str]:
    """A hashable form of an identity: two sessions share a scope exactly when these are equal."""
    kind = identity.get("kind") or "home"
    if kind == "explicit":
        return ("explicit", str(identity.get("id")))
    if kind == "auto":
        return ("auto", str(identity.get("key")))
    return ("home", "")


def same_project(identity: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """The one rule of scoping: same identity, and never Home (Home is no project)."""
    return scope_key(identity)[0] != "home" and scope_key(identity) == scope_key(other)


def sessions_in_project(
    identity: Mapping[str, Any],
    session_rows: Iterable[Mapping[str, Any]],
    projects: Sequence[Mapping[str, Any]] | FolderIndex,
    *,
    junk_roots: Iterable[str] = (),
) -> list[str]:
    """Ids of the sessions whose own identity equals ``identity``, in the order given."""
    index = projects if isinstance(projects, FolderIndex) else FolderIndex(projects)
    junk = tuple(junk_roots)
    return [
        row["id"]
        for row in session_rows
        if same_project(identity, resolve_project(row, index, junk_roots=junk))
    ]
