"""``project_session_move`` (spec §3.3): a move is a new cwd, recorded through Hermes's own
``SessionDB.update_session_cwd`` (:func:`store.update_session_cwd`, the plugin's one write); the
project follows because it is a function of the cwd."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..attribution import REPO_KEY, project_key
from ..store import (
    HermesDB,
    HermesEnv,
    NoSessionDatabase,
    SchemaCache,
    reanchor_live_session,
    update_session_cwd,
)
from ..text import echo
from .git import STORE_NAME, git_branch
from .scope import ProjectMap, ProjectsMemory

#: How many projects a "project not found" result lists for the model to retry with.
PROJECTS_LISTED = 20


def _project_by_name(projects: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """A project whose name is ``name`` (case-insensitive), when exactly one has it."""
    wanted = name.strip().casefold()
    matches = [p for p in projects if str(p.get("name") or "").strip().casefold() == wanted]
    return matches[0] if len(matches) == 1 else None


def _project_not_found(
    created: list[dict[str, Any]], projects: ProjectMap, project_id: str
) -> dict[str, Any]:
    """The spec's error, plus the projects the model can retry with (at most 20): the ones
    created with ``hermes project create``, then the git repositories that hold conversations,
    as search names them (``repo:<path>``)."""
    listed = [{"id": p.get("id"), "name": p.get("name")} for p in created]
    for group in projects.groups():
        identity = group["identity"]
        if identity.get("kind") == "auto":
            key = str(identity.get("key") or "")
            listed.append({"id": f"repo:{key}", "name": f"git repository {os.path.basename(key) or key}"})
    result: dict[str, Any] = {"success": False, "error": f"project not found: {project_id}"}
    result["projects"] = listed[:PROJECTS_LISTED]
    if len(listed) > PROJECTS_LISTED:
        result["projects_not_listed"] = len(listed) - PROJECTS_LISTED
    return result


def _label(identity: dict[str, Any]) -> str:
    if identity.get("kind") == "explicit":
        return f"project {identity.get('name') or identity.get('id')}"
    return f"the git repository {identity.get('key')}"


def home_target(env: Any, projects: Any) -> tuple[str, str] | tuple[None, str]:
    """Where "move to Home" lands: ``terminal.cwd`` (else ~) when it is in no project; else the
    home folder when that is in none; else nowhere. Returns (folder, what to tell) or (None, why).
    """
    configured = env.home_folder()
    home = str(Path.home())
    claimed: list[str] = []
    folders = list(dict.fromkeys([configured, home]))
    for folder in folders:
        identity = projects.identity_of_folder(folder)
        if identity["kind"] == "home":
            if folder == configured:
                return folder, ""
            return folder, f" (terminal.cwd {configured} is in {claimed[0]}, so the home folder is used)"
        claimed.append(_label(identity))
    where = " and ".join(f"{folder} is in {label}" for folder, label in zip(folders, claimed, strict=True))
    return None, (
        f"cannot move to Home: {where}; set terminal.cwd to a folder outside every project, or move "
        "this conversation to a project instead"
    )


def move_session(
    memory: ProjectsMemory,
    session_id: str,
    project_id: str,
    task_id: str | None,
    schemas: SchemaCache | None = None,
) -> dict[str, Any]:
    """Spec §3.3: a move is a new cwd; the project follows because it is a function of the cwd.

    A compressed conversation is a chain of sessions: all of them move, so no earlier part of the
    conversation stays behind in the old project.
    """
    env = HermesEnv.current()
    try:
        db = HermesDB.open(env, schemas)
    except NoSessionDatabase:
        return {"success": False, "error": "session database not found", "code": "no_db"}
    with db:
        if db.session(session_id) is None:
            return {"success": False, "error": f"session not found: {echo(session_id)}"}
        projects = ProjectMap(db, memory)
        project, repo, note = None, None, ""
        if project_id.startswith("repo:") or REPO_KEY.fullmatch(project_id):
            repo = _repository(projects, project_id)
            if repo is None:
                return _project_not_found(db.projects(), projects, echo(project_id))
            target, name = repo["key"], f"repository {repo['key']}"
            if not os.path.isdir(target):
                return {"success": False, "error": f"project folder not found: {target}"}
            if memory.probe.common_repo_root(target, env.data_dir / STORE_NAME) != target:
                return {"success": False, "error": f"not the root of a git repository: {target}"}
        elif project_id:
            project = db.project(project_id) or _project_by_name(db.projects(), project_id)
            if project is None:
                return _project_not_found(db.projects(), projects, echo(project_id))
            target, name = primary_folder(project), project.get("name") or project_id
            if not target or not os.path.isdir(target):
                return {"success": False, "error": f"project folder not found: {target or '(none)'}"}
        else:
            target, note = home_target(env, projects)
            if target is None:
                return {"success": False, "error": note}
            name = "Home"

        chain = projects.conversation(session_id)
        repo_root = memory.probe.common_repo_root(target, env.data_dir / STORE_NAME)
        branch = git_branch(target) if repo_root else ""
        update_session_cwd(env, chain, target, branch, repo_root)
        # Read back through the same read-only connection, the way a search reads it: a root
        # Hermes 0.19 could not clear is probed again.
        moved = db.session(session_id) or {}
        if moved.get("cwd") != target:
            return {
                "success": False,
                "error": f"Hermes did not record the new working directory for {session_id}",
            }
        identity = projects.identity(moved)
    live = reanchor_live_session(task_id, target, name)
    result: dict[str, Any] = {
        "success": True,
        "project": identity,
        "cwd": target,
        "git_branch": branch or None,
        "git_repo_root": repo_root or None,
        "message": f"Moved to {_destination(project_id, name, repo)}, cwd now {target}{note}",
        "live_session": "re-anchored" if live else "unchanged until resumed",
    }
    if len(chain) > 1:
        result["moved_sessions"] = chain  # the whole compressed conversation
    if not live:
        result["message"] += (
            ". The running session keeps its process working directory until it is resumed; "
            "history searches use the new project now."
        )
    if project is not None and identity.get("id") != project.get("id"):
        result["warning"] = (
            f"{target} is also claimed by another project, so this conversation is attributed to "
            f"{identity.get('name') or identity.get('kind')}"
        )
    elif repo is not None and identity != repo:
        result["warning"] = f"{target} is attributed to {_label(identity)}, which claims that folder"
    elif project is None and repo is None and identity.get("kind") != "home":
        result["warning"] = f"{target} is still attributed to {_label(identity)}"
    return result


def _destination(project_id: str, name: str, repo: dict[str, Any] | None) -> str:
    if not project_id:
        return "Home"
    return name if repo is not None else f"project {name}"


def _repository(projects: ProjectMap, wanted: str) -> dict[str, Any] | None:
    """An automatic repo project as search names it: ``repo:<path>`` (its ``key``) or the short
    ``repo-<digest>`` key printed commands carry; None when no such repository holds a
    conversation of this home (nothing to move to, by that name)."""
    for group in projects.groups():
        identity = group["identity"]
        if identity.get("kind") != "auto":
            continue
        if wanted in (f"repo:{identity.get('key')}", project_key(identity)):
            return identity
    if wanted.startswith("repo:"):  # a repository no conversation has been in yet
        folder = wanted[len("repo:") :]
        identity = projects.identity_of_folder(folder) if os.path.isabs(folder) else {}
        if identity.get("kind") == "auto" and identity.get("key") == folder:
            return identity
    return None


def primary_folder(project: dict[str, Any]) -> str:
    """Primary folder as Hermes picks it: primary_path, else the primary folder, else the first."""
    if project.get("primary_path"):
        return project["primary_path"]
    folders = project.get("folders") or []
    for folder in folders:
        if folder.get("is_primary"):
            return folder["path"]
    return folders[0]["path"] if folders else ""
