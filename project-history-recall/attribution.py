"""Which project a conversation belongs to: a pure function of its recorded folders.

This mirrors the Hermes desktop's project tree (``tui_gateway/project_tree.py``) so the agent and
the sidebar agree: paths compare by segments, never by string prefix (``/a/proj`` does not own
``/a/proj2``); the deepest matching folder wins; a git root that does not contain the cwd is
stale (Hermes 0.19 cannot clear it after a move) and is ignored.

Paths are compared in one normal form (:func:`path_parts`), with two deliberate differences from
the desktop (docs/design.md, "Scope"):

- A POSIX path (one that starts with ``/``) splits on ``/`` only and keeps its case: a
  backslash is an ordinary character of a POSIX file name (``/x/app\\evil`` is a folder *next
  to* ``/x/app``), and ``//x/APP`` is ``/x/APP`` (Linux reads two leading slashes as one), not a
  UNC share. Windows rules (split on both separators, fold case) apply to real Windows paths
  only: a drive letter (``C:\\``, ``c:/``) or a leading backslash (``\\\\srv\\share``, ``\\Users``).
- ``.`` and ``..`` segments are resolved lexically (``/x/app/../app2`` is ``/x/app2``), and a
  ``..`` never climbs above the root, a drive or a UNC share. A relative path is no place.

Symlinks are resolved by the caller (:mod:`projects.scope` passes every path through
:func:`projects.git.real_path` first), because that needs the filesystem; nothing here does I/O.
Callers pass the session row, the projects (``projects_db`` dicts with their folders) and the
roots that can never be an automatic repo. :func:`scope_key` is the one rule of "same project":
:class:`projects.ProjectMap` groups every session by it once, and the keyword and the semantic
path both receive that group, so they can never disagree about scope.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Identity = dict[str, Any]
Parts = tuple[str, ...]

_DRIVE = re.compile(r"^([A-Za-z]):(?:[/\\]|$)")
_WINDOWS_SEPARATORS = re.compile(r"[/\\]")

HOME: Identity = {"kind": "home"}

# The first element of a path's parts says what kind of place it is, so a POSIX folder and a
# Windows folder with the same names can never be confused: "/" (POSIX root), "c:" (a drive),
# "//" (a UNC share: server and share follow) and "\\" (the root of the current Windows drive).
POSIX_ROOT, UNC_ROOT, DRIVE_RELATIVE_ROOT = "/", "//", "\\"


def is_windows_path(path: str | None) -> bool:
    """A drive-letter (``C:\\``, ``c:/``) or backslash-rooted (``\\\\srv``, ``\\Users``) path."""
    value = path or ""
    return bool(_DRIVE.match(value)) or value.startswith("\\")


def path_parts(path: str | None) -> Parts:
    """The comparison form of an absolute path: its root kind, then its normalised segments.

    ``()`` for an empty or relative path (it names no place). Windows segments are case-folded.
    Nothing is trimmed: ``/x/app `` and ``/x/app`` are two folders, as the file system says.
    """
    value = path or ""
    drive = _DRIVE.match(value)
    if drive:
        anchor, rest, fixed, windows = drive.group(1).casefold() + ":", value[2:], 0, True
    elif value.startswith(("\\\\", "\\/")):
        anchor, rest, fixed, windows = UNC_ROOT, value[2:], 2, True  # server and share stay
    elif value.startswith("\\"):
        anchor, rest, fixed, windows = DRIVE_RELATIVE_ROOT, value[1:], 0, True
    elif value.startswith("/"):
        anchor, rest, fixed, windows = POSIX_ROOT, value[1:], 0, False
    else:
        return ()
    parts = [anchor]
    for segment in _WINDOWS_SEPARATORS.split(rest) if windows else rest.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if len(parts) > 1 + fixed:
                parts.pop()
            continue
        parts.append(segment.casefold() if windows else segment)
    return tuple(parts)


def path_key(path: str | None) -> str:
    """One canonical string per folder, used as the identity of an automatic repo project.

    ``/a/b`` (POSIX), ``c:/a/b`` (drive), ``//server/share/a`` (UNC), ``\\a/b`` (current drive);
    ``""`` for a root or a path that names no place (a root owns nothing).
    """
    parts = path_parts(path)
    if len(parts) < 2:
        return ""
    anchor = parts[0] + "/" if parts[0].endswith(":") else parts[0]
    return anchor + "/".join(parts[1:])


def _under(folder: Parts, target: Parts) -> bool:
    return len(folder) > 1 and len(folder) <= len(target) and target[: len(folder)] == folder


def is_path_under(folder: str | None, target: str | None) -> bool:
    """True when ``target`` is ``folder`` or lies inside it, compared segment by segment."""
    return _under(path_parts(folder), path_parts(target))


def trusted_repo_root(cwd: str | None, git_repo_root: str | None, worktree_root: str | None = None) -> str:
    """The recorded git root, unless it is stale: a root that does not contain the cwd.

    Hermes 0.19's ``update_session_cwd`` never clears git fields, so a conversation moved out of
    a repository keeps pointing at it. The desktop applies the same guard when it reads.
    ``worktree_root`` is the checkout that git says holds the cwd: a linked worktree outside
    its main repository (``~/code/app-wt-x`` of ``~/code/app``) keeps the main repo's root.
    """
    root = git_repo_root or ""
    if not root:
        return ""
    cwd = cwd or ""
    if cwd and not is_path_under(root, cwd) and not is_path_under(worktree_root, cwd):
        return ""
    return root


class FolderIndex:
    """Folder → owning project, so a path finds its project by walking its own ancestors.

    Built once per change of the projects, then each session costs a handful of dict lookups
    instead of a scan over projects × folders.
    """

    def __init__(self, projects: Iterable[Mapping[str, Any]]) -> None:
        self._owner_by_folder: dict[Parts, Mapping[str, Any]] = {}
        for project in projects:
            if project.get("archived"):
                continue
            for folder in project.get("folders") or []:
                parts = path_parts(folder.get("path") if isinstance(folder, Mapping) else folder)
                # Two projects sharing a folder: the first (oldest, by created_at) keeps it.
                if len(parts) > 1 and parts not in self._owner_by_folder:
                    self._owner_by_folder[parts] = project

    def match(self, path: str | None) -> tuple[Mapping[str, Any] | None, int]:
        """The project of the deepest folder that is ``path`` or an ancestor of it, and its depth
        (its number of names, a drive letter included, as the desktop counts them)."""
        parts = path_parts(path)
        unnamed = 0 if parts and parts[0].endswith(":") else 1
        for end in range(len(parts), 1, -1):
            owner = self._owner_by_folder.get(parts[:end])
            if owner is not None:
                return owner, end - unnamed
        return None, -1


class ExcludedRoots:
    """Git roots that are never an automatic project (the desktop's ``_is_repo_junk``).

    ``roots``: never a project themselves (the home folder); ``trees``: never, and nothing
    under them either (``HERMES_HOME``: Hermes's own config, sessions, skills and plugins).
    """

    def __init__(self, roots: Iterable[str] = (), trees: Iterable[str] = ()) -> None:
        self._roots = {parts for parts in map(path_parts, roots) if len(parts) > 1}
        self._trees = [parts for parts in map(path_parts, trees) if len(parts) > 1]

    def __contains__(self, root: object) -> bool:
        parts = path_parts(root if isinstance(root, str) else None)
        return parts in self._roots or any(_under(tree, parts) for tree in self._trees)


def resolve_project(
    session_row: Mapping[str, Any],
    projects: Sequence[Mapping[str, Any]] | FolderIndex,
    *,
    excluded: ExcludedRoots | None = None,
) -> Identity:
    """The project identity of one session row (spec §3.1).

    - ``{"kind": "explicit", "id", "name"}``: the cwd or the (trusted) git root lies in a folder
      of a project in ``projects.db``; the deeper folder wins, a tie goes to the cwd.
    - ``{"kind": "auto", "key"}``: no explicit folder, but a trusted git root that is not
      ``excluded``: the home folder and anything under ``HERMES_HOME`` are never a project, as on
      the desktop.
    - ``{"kind": "home"}``: neither.
    """
    index = projects if isinstance(projects, FolderIndex) else FolderIndex(projects)
    cwd = session_row.get("cwd") or ""
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
        if key and not (excluded is not None and repo_root in excluded):
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


#: How a command names an automatic repo project: ``repo-`` and 12 hex digits of its key's digest.
REPO_KEY = re.compile(r"repo-[0-9a-f]{12}")


def project_key(identity: Mapping[str, Any]) -> str:
    """A short name for a project that a printed command can carry: the explicit project's id
    (``p_`` and 8 hex digits), or ``repo-`` and a digest of an automatic repo's path. Never the
    path itself: a folder's name is chosen by whoever cloned the repository."""
    kind, value = scope_key(identity)
    if kind == "explicit":
        return value
    if kind == "auto":
        return "repo-" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return ""


def same_project(identity: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """The one rule of scoping: same identity, and never Home (Home is no project)."""
    return scope_key(identity)[0] != "home" and scope_key(identity) == scope_key(other)


def conversation_roots(continues: Mapping[str, str | None]) -> dict[str, str]:
    """Each session's conversation: the first session of its compression chain.

    ``continues`` maps every session to the session it continues after Hermes compressed the
    context (``None`` when it starts a conversation). A chain whose start is unknown, or a loop,
    ends at the last session seen, so every session gets exactly one root.
    """
    roots = {sid: sid for sid, parent in continues.items() if not parent}
    for start in continues:
        path = []
        current = start
        while current not in roots:
            path.append(current)
            parent = continues.get(current)
            if not parent or parent in path or parent not in continues:
                roots[current] = current
                break
            current = parent
        root = roots[current]
        for member in path:
            roots[member] = root
    return roots
