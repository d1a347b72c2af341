"""Test harness: a real Hermes 0.19.0 with this plugin installed the way a user installs it.

The plugin folder is copied into ``$HERMES_HOME/plugins/project-history-recall``, enabled with
``hermes plugins enable``, and loaded by Hermes's own PluginManager when ``model_tools`` is
imported. Sessions and projects are made with Hermes's ``SessionDB`` and ``projects_db``; the
tools are called through ``model_tools.handle_function_call``, as the agent loop calls them.

Each test gets its own ``HERMES_HOME`` (the plugin resolves every path at call time, so the
one loaded plugin serves them all).
"""

from __future__ import annotations

import atexit
import importlib
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
# What Hermes installs: the plugin folder of the repository (`file://<clone>#project-history-recall`).
PLUGIN_DIR = REPO / "project-history-recall"
PLUGIN_KEY = "project-history-recall"
PLUGIN_MODULE = "hermes_plugins.project_history_recall"
VENV_BIN = Path(sys.executable).parent
HERMES = str(VENV_BIN / "hermes")

_ROOT = Path(tempfile.mkdtemp(prefix="phr-tests-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)  # nothing left behind in /tmp
BOOT_HOME = _ROOT / "boot-home"
BOOT_HOME.mkdir()
# Hermes freezes DEFAULT_DB_PATH at import: HERMES_HOME must be set before anything imports it.
os.environ["HERMES_HOME"] = str(BOOT_HOME)
os.environ.pop("PROJECT_HISTORY_EMBEDDING_API_KEY", None)

_IGNORED = shutil.ignore_patterns(
    ".git",
    ".venv",
    ".cache",
    ".hypothesis",
    "__pycache__",
    "*.pyc",
    "tests",
    "bench",
    "embeddings.db*",
    "git_roots.db*",
    "consent.json",
)


def install_plugin(home: Path) -> Path:
    """Copy the plugin into a Hermes home, as a user would clone it there."""
    target = home / "plugins" / PLUGIN_KEY
    shutil.copytree(PLUGIN_DIR, target, ignore=_IGNORED, dirs_exist_ok=True)
    return target


# Any request that is not for loopback goes to a closed loopback port and fails at once: tests
# never reach the internet, even if Hermes grew a new start-up download.
OFFLINE = {
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "ALL_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost,::1",
}


def run_hermes(home: Path, *args: str, cwd: Path | None = None, timeout: float = 120, **env: str):
    """The real ``hermes`` CLI of the test virtualenv, in a given home."""
    environment = {**os.environ, "HERMES_HOME": str(home), "NO_COLOR": "1", **OFFLINE, **env}
    return subprocess.run(
        [HERMES, *args],
        cwd=str(cwd or home),
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def enable_plugin(home: Path) -> None:
    install_plugin(home)
    done = run_hermes(home, "plugins", "enable", PLUGIN_KEY, "--no-allow-tool-override")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="session")
def plugin():
    """The plugin package as Hermes loaded it (``hermes_plugins.project_history_recall``)."""
    enable_plugin(BOOT_HOME)
    import model_tools  # noqa: F401  (importing it runs plugin discovery)
    from hermes_cli.plugins import get_plugin_manager

    loaded = {p["name"]: p for p in get_plugin_manager().list_plugins()}
    assert PLUGIN_KEY in loaded, loaded.keys()
    assert not loaded[PLUGIN_KEY].get("error"), loaded[PLUGIN_KEY]
    assert loaded[PLUGIN_KEY].get("enabled", True)
    # Every module as an attribute (plugin.store, plugin.semantic.indexer...), as tests address them.
    for name in plugin_modules():
        importlib.import_module(f"{PLUGIN_MODULE}.{name}")
    return sys.modules[PLUGIN_MODULE]


def plugin_modules() -> list[str]:
    """Dotted names of the plugin's modules and packages, relative to the package."""
    names = []
    for path in sorted(PLUGIN_DIR.rglob("*.py")):
        relative = path.relative_to(PLUGIN_DIR)
        skipped = relative.parts[0] in ("tests", "bench", "demo", ".venv", ".cache")
        if skipped or relative.name.startswith("."):
            continue
        parts = relative.with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        if parts:
            names.append(".".join(parts))
    return names


_ids = itertools.count(1)


def new_session_id() -> str:
    n = next(_ids)
    return time.strftime("%Y%m%d_%H%M%S") + f"_{n:06x}"


class World:
    """One Hermes home with its state.db and projects.db, built through Hermes's own API."""

    def __init__(self, home: Path, root: Path) -> None:
        from hermes_state import SessionDB

        self.home = home
        self.root = root
        self.db = SessionDB(db_path=home / "state.db")

    # -- folders and projects
    def folder(self, relative: str, git: bool = False) -> str:
        path = self.root / relative
        path.mkdir(parents=True, exist_ok=True)
        if git:
            subprocess.run(["git", "init", "-q", str(path)], check=True)
        return str(path)

    def project(self, name: str, *folders: str) -> str:
        from hermes_cli import projects_db

        with projects_db.connect_closing(self.home / "projects.db") as conn:
            project_id = projects_db.create_project(conn, name=name, folders=list(folders))
            conn.commit()
        return project_id

    def order_projects(self, *project_ids: str) -> None:
        """Make these projects oldest-first in this order (projects_db keeps whole seconds)."""
        from hermes_cli import projects_db

        with projects_db.connect_closing(self.home / "projects.db") as conn:
            for age, project_id in enumerate(project_ids, start=1):
                conn.execute("UPDATE projects SET created_at = ? WHERE id = ?", (1000 * age, project_id))
            conn.commit()

    # -- sessions
    def session(
        self,
        cwd: str | None = None,
        messages: Iterable[tuple[str, str]] = (),
        *,
        git_repo_root: str | None = None,
        title: str | None = None,
        source: str = "cli",
        timestamp: float | None = None,
    ) -> str:
        session_id = new_session_id()
        self.db.create_session(session_id, source, cwd=cwd)
        if git_repo_root:
            self.db.update_session_cwd(session_id, cwd, git_repo_root=git_repo_root)
        if title:
            self.db.set_session_title(session_id, title)
        self.add(session_id, messages, timestamp=timestamp)
        return session_id

    def add(
        self, session_id: str, messages: Iterable[tuple[str, str]], timestamp: float | None = None
    ) -> list[int]:
        return [
            self.db.append_message(session_id, role, content, timestamp=timestamp)
            for role, content in messages
        ]

    def row(self, session_id: str) -> dict[str, Any]:
        return self.db.get_session(session_id)

    # -- tools, through the real dispatcher
    def call(self, tool: str, args: dict[str, Any], session_id: str | None, task_id: str = "task-1") -> dict:
        import model_tools

        raw = model_tools.handle_function_call(tool, args, task_id=task_id, session_id=session_id)
        assert isinstance(raw, str)
        return json.loads(raw)

    def search(self, session_id: str | None, query: str, mode: str = "keyword", limit: int = 3) -> dict:
        return self.call("project_history_search", {"query": query, "mode": mode, "limit": limit}, session_id)

    def move(self, session_id: str | None, project_id: str) -> dict:
        return self.call("project_session_move", {"project_id": project_id}, session_id)

    def close(self) -> None:
        self.db.close()

    # -- helpers added for the attribution / keyword / move suites (append-only)
    def git_repo(self, relative: str, branch: str = "main") -> str:
        """A git repository with one commit on ``branch`` (worktrees need a commit)."""
        path = self.folder(relative)
        git = ["git", "-C", path, "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
        subprocess.run(["git", "init", "-q", "-b", branch, path], check=True)
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "init"], check=True)
        return path

    def worktree(self, repo: str, relative: str, branch: str) -> str:
        """A linked worktree of ``repo`` at ``root/relative`` on a new ``branch``."""
        path = str(self.root / relative)
        subprocess.run(["git", "-C", repo, "worktree", "add", "-q", "-b", branch, path], check=True)
        return path

    def write_config(self, text: str) -> None:
        (self.home / "config.yaml").write_text(text, encoding="utf-8")

    def message_rows(self, session_id: str) -> list[dict[str, Any]]:
        """Every stored message of a session (inactive ones too), oldest first."""
        return self.db.get_messages(session_id, include_inactive=True)

    def table_checksums(self) -> dict[str, str]:
        """sha256 of every table's rows (read through a separate read-only connection)."""
        import hashlib
        import sqlite3

        uri = (self.home / "state.db").resolve().as_uri() + "?mode=ro"
        conn = sqlite3.connect(uri, uri=True)
        try:
            names = [
                row[0]
                for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            ]
            sums = {}
            for name in names:
                digest = hashlib.sha256()
                for row in conn.execute(f'SELECT * FROM "{name}" ORDER BY 1'):
                    digest.update(repr(tuple(row)).encode())
                sums[name] = digest.hexdigest()
            return sums
        finally:
            conn.close()

    def state_files(self) -> dict[str, tuple[bytes, int]]:
        """Bytes and mtime (ns) of state.db and its WAL/SHM companions that exist."""
        files = {}
        for suffix in ("", "-wal", "-shm"):
            path = self.home / f"state.db{suffix}"
            if path.exists():
                files[path.name] = (path.read_bytes(), path.stat().st_mtime_ns)
        return files


@pytest.fixture
def world(plugin, tmp_path, monkeypatch) -> World:
    """A fresh home, and a fresh process state of the plugin: nothing one test learnt reaches the next."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    plugin.reset_process_state()
    w = World(home, tmp_path / "work")
    yield w
    w.close()
    plugin.reset_process_state()


def use_policy(plugin, **changes: Any) -> None:
    """This process's ranking policy with ``changes`` (``ranking.RankingPolicy`` fields): how a
    test switches a rule or moves a constant, instead of patching a module. The next test's
    fresh process state starts from the default again."""
    from dataclasses import replace

    state = plugin.process_state()
    state.policy = replace(state.policy, **changes)


def use_embedding_server(server: Any, **settings: Any) -> None:
    """Point the current home's plugin at ``server`` (the tests' OpenAI-compatible embedder) in
    config.yaml, through Hermes's own ``save_config`` as a user's edit would, with ``settings``
    on top."""
    from hermes_cli.config import save_config

    embedding = {"model": "e5-small", "base_url": server.base_url, "input_type": True, **settings}
    save_config({"plugins": {"project-history-recall": {"embedding": embedding}}}, merge_existing=True)


def session_ids(result: dict) -> list[str]:
    return [r["session_id"] for r in result.get("results", [])]
