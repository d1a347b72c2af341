"""What the subcommands share: the one-line error, the call's databases, naming projects."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .. import ProcessState


class CommandError(Exception):
    """A user-facing failure: printed as one line on stderr, exit code 2."""


def confirmed(question: str, not_at_a_terminal: str) -> bool:
    """The user's yes at the terminal (``question``, then ``[y/N]``); outside a terminal there is
    nobody to ask: a :class:`CommandError` saying ``not_at_a_terminal`` (``--yes``)."""
    import sys

    if not sys.stdin or not sys.stdin.isatty():
        raise CommandError(not_at_a_terminal)
    if input(f"{question} [y/N] ").strip().lower() in ("y", "yes"):
        return True
    print("Nothing changed.")
    return False


def describe(error: BaseException) -> str:
    from ..semantic import describe_failure
    from ..store import HermesEnv

    return describe_failure(error, HermesEnv.current())


@contextmanager
def opened(process: ProcessState) -> Iterator[tuple[Any, Any, Any]]:
    """(env, HermesDB, ProjectMap) for one command, or a one-line error when there are no sessions."""
    from ..projects import ProjectMap
    from ..store import HermesDB, HermesEnv, NoSessionDatabase

    env = HermesEnv.current()
    try:
        db = HermesDB.open(env, process.schemas)
    except NoSessionDatabase:
        raise CommandError(f"no session database in {env.home} yet: chat with Hermes first") from None
    with db:
        yield env, db, ProjectMap(db, process.projects)


def identity_for(token: str, db: Any, projects: Any) -> dict[str, Any]:
    """A project named on the command line: id/slug, ``repo:<path>``, or a folder inside one."""
    from .. import attribution

    token = token.strip()
    if not token:
        raise CommandError("an empty project name was given")
    if attribution.REPO_KEY.fullmatch(token):  # the short key printed commands carry
        for identity in [g["identity"] for g in projects.groups()]:
            if attribution.project_key(identity) == token:
                return identity
        raise CommandError(f"project not found: {token} (see the projects `status` lists)")
    if token.startswith("repo:"):
        key = attribution.path_key(projects.probe.real(token[len("repo:") :]))
        if not key:
            raise CommandError(f"not a repository path: {token!r}")
        return {"kind": "auto", "key": key}
    project = db.project(token)
    if project is not None:
        return {"kind": "explicit", "id": project["id"], "name": project["name"]}
    if os.path.isdir(token):
        return identity_of_folder(os.path.abspath(token), projects)
    raise CommandError(f"project not found: {token} (use a project id or slug, repo:<path>, or a folder)")


def identity_of_folder(folder: str, projects: Any) -> dict[str, Any]:
    identity = projects.identity_of_folder(folder)
    if identity["kind"] == "home":
        raise CommandError(
            f"{folder} is in no project or git repository; pass --project ID or --all-projects"
        )
    return identity


def label(identity: dict[str, Any]) -> str:
    """A project as the terminal shows it: names and folders are data, so no control character
    of theirs reaches the terminal."""
    from ..text import without_controls

    if identity.get("kind") == "explicit":
        text = f"{identity.get('name')} ({identity.get('id')})"
    elif identity.get("kind") == "auto":
        text = f"repository {identity.get('key')}"
    else:
        text = "Home"
    return without_controls(text)


def counted(number: int, noun: str) -> str:
    """``1 conversation``, ``2 conversations``."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def save_plugin_settings(values: dict[str, Any]) -> None:
    from hermes_cli.config import save_config

    from ..config_schema import PLUGIN_KEY

    save_config({"plugins": {PLUGIN_KEY: {"embedding": values}}}, merge_existing=True)
